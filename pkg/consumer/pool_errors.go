package consumer

// The error kinds of the ingestion pool, mirroring the seed's
// GlobalCkfIngestionPoolBuildError and GlobalCkfIngestionError enums.

import (
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// PoolBuildErrorKind enumerates GlobalCkfIngestionPoolBuildError. Each kind is
// itself an error.
type PoolBuildErrorKind uint8

const (
	ErrInvalidWorkerCount PoolBuildErrorKind = iota + 1
	ErrInvalidQueueCapacity
	ErrInvalidControlTimeout
	ErrInvalidOutstandingImageBound
	ErrInvalidDirtyToAppliedAge
	// ErrClaimLane wraps the indexer's claim error (the seed's GlobalCkf variant).
	ErrClaimLane
)

func (k PoolBuildErrorKind) Error() string {
	switch k {
	case ErrInvalidWorkerCount:
		return "consumer: pool: worker count must be greater than zero"
	case ErrInvalidQueueCapacity:
		return "consumer: pool: queue capacity must be greater than zero"
	case ErrInvalidControlTimeout:
		return "consumer: pool: control timeout must be greater than zero"
	case ErrInvalidOutstandingImageBound:
		return "consumer: pool: outstanding-image bound must be greater than zero"
	case ErrInvalidDirtyToAppliedAge:
		return "consumer: pool: dirty-to-applied age bound must be greater than zero"
	case ErrClaimLane:
		return "consumer: pool: cannot claim lane ingestor"
	}
	return fmt.Sprintf("consumer: pool build error %d", uint8(k))
}

// PoolBuildError carries a PoolBuildErrorKind; for ErrClaimLane, Lane and the
// indexer's error in Err.
type PoolBuildError struct {
	Kind PoolBuildErrorKind
	Lane int
	Err  error
}

func (e *PoolBuildError) Error() string {
	if e.Kind == ErrClaimLane && e.Err != nil {
		return fmt.Sprintf("consumer: pool: claim lane %d: %v", e.Lane, e.Err)
	}
	return e.Kind.Error()
}

// Unwrap exposes the kind and any wrapped indexer error.
func (e *PoolBuildError) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// IngestionErrorKind enumerates GlobalCkfIngestionError. Each kind is itself
// an error so callers can branch with errors.Is.
type IngestionErrorKind uint8

const (
	// ErrLaneNotConfigured is the seed's UnconfiguredLane; an IngestionError
	// of this kind also matches the indexer's ErrUnconfiguredLane.
	ErrLaneNotConfigured IngestionErrorKind = iota + 1
	ErrLaneUnassigned
	ErrLaneRetired
	ErrAwaitingSnapshot
	ErrSaturated
	ErrOutstandingImageLimit
	ErrDirtyToAppliedAgeExceeded
	ErrControlTimeout
	ErrWorkerFailed
	// ErrAssignment wraps the *AssignmentError in IngestionError.Err.
	ErrAssignment
	ErrAdmissionEpochExhausted
	// ErrPoolClosed is a Go addition: every call after Close returns it.
	ErrPoolClosed
)

func (k IngestionErrorKind) Error() string {
	switch k {
	case ErrLaneNotConfigured:
		return "consumer: pool: lane is not configured"
	case ErrLaneUnassigned:
		return "consumer: pool: lane has no current assignment"
	case ErrLaneRetired:
		return "consumer: pool: lane is retired and requires a new lease and snapshot"
	case ErrAwaitingSnapshot:
		return "consumer: pool: lane is awaiting a snapshot"
	case ErrSaturated:
		return "consumer: pool: ingestion queue saturated"
	case ErrOutstandingImageLimit:
		return "consumer: pool: outstanding-image bound exceeded"
	case ErrDirtyToAppliedAgeExceeded:
		return "consumer: pool: dirty-to-applied age exceeded"
	case ErrControlTimeout:
		return "consumer: pool: control operation timed out"
	case ErrWorkerFailed:
		return "consumer: pool: ingestion worker failed"
	case ErrAssignment:
		return "consumer: pool: assignment failed"
	case ErrAdmissionEpochExhausted:
		return "consumer: pool: lane admission epoch exhausted"
	case ErrPoolClosed:
		return "consumer: pool: closed"
	}
	return fmt.Sprintf("consumer: pool: ingestion error %d", uint8(k))
}

// Disposition is failure_disposition (spec §9.5): the recovery disposition of
// errors that retired consumer state. Admission and assignment rejections
// return false: they made no consumer write, and stale or superseded traffic
// must not fence the current assignment.
func (k IngestionErrorKind) Disposition() (ckf.FailureDisposition, bool) {
	switch k {
	case ErrSaturated, ErrOutstandingImageLimit:
		return ckf.PointConsumerGapOrMalformedBeforeWrite.Disposition(), true
	case ErrDirtyToAppliedAgeExceeded, ErrControlTimeout, ErrWorkerFailed:
		return ckf.PointConsumerWorkerFailureMidApply.Disposition(), true
	}
	return ckf.FailureDisposition{}, false
}

// IngestionError is GlobalCkfIngestionError: a kind plus its fields. Lane is
// set for lane errors, Requested/Limit for ErrOutstandingImageLimit, Worker
// for ErrWorkerFailed and Err (an *AssignmentError) for ErrAssignment.
type IngestionError struct {
	Kind      IngestionErrorKind
	Lane      int
	Requested uint64
	Limit     uint64
	Worker    int
	Err       error
}

func (e *IngestionError) Error() string {
	switch e.Kind {
	case ErrLaneNotConfigured:
		return fmt.Sprintf("consumer: pool: lane %d is not configured", e.Lane)
	case ErrLaneUnassigned:
		return fmt.Sprintf("consumer: pool: lane %d has no current assignment", e.Lane)
	case ErrLaneRetired:
		return fmt.Sprintf("consumer: pool: lane %d is retired and requires a new lease and snapshot", e.Lane)
	case ErrAwaitingSnapshot:
		return fmt.Sprintf("consumer: pool: lane %d is awaiting a snapshot", e.Lane)
	case ErrSaturated:
		return fmt.Sprintf("consumer: pool: lane %d ingestion queue saturated, lease retired", e.Lane)
	case ErrOutstandingImageLimit:
		return fmt.Sprintf("consumer: pool: lane %d exceeded its outstanding-image bound (%d requested, %d allowed), lease retired",
			e.Lane, e.Requested, e.Limit)
	case ErrDirtyToAppliedAgeExceeded:
		return fmt.Sprintf("consumer: pool: lane %d exceeded its dirty-to-applied age, lease retired", e.Lane)
	case ErrControlTimeout:
		return fmt.Sprintf("consumer: pool: lane %d control operation timed out, lease retired", e.Lane)
	case ErrWorkerFailed:
		return fmt.Sprintf("consumer: pool: ingestion worker %d failed", e.Worker)
	case ErrAssignment:
		if e.Err != nil {
			return "consumer: pool: assignment failed: " + e.Err.Error()
		}
	case ErrAdmissionEpochExhausted:
		return fmt.Sprintf("consumer: pool: lane %d admission epoch exhausted", e.Lane)
	}
	return e.Kind.Error()
}

// Unwrap exposes the kind and, for ErrAssignment, the *AssignmentError, so
// errors.As(err, &assignErr) reaches it. ErrLaneNotConfigured also unwraps to
// the indexer's ErrUnconfiguredLane.
func (e *IngestionError) Unwrap() []error {
	switch {
	case e.Err != nil:
		return []error{e.Kind, e.Err}
	case e.Kind == ErrLaneNotConfigured:
		return []error{e.Kind, ErrUnconfiguredLane}
	}
	return []error{e.Kind}
}

// Disposition returns the kind's disposition (see IngestionErrorKind.Disposition).
func (e *IngestionError) Disposition() (ckf.FailureDisposition, bool) {
	return e.Kind.Disposition()
}
