package adapter

import (
	"errors"
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
)

// BuildErrorKind enumerates LocalCkfAdapterBuildError. Each kind is itself an
// error so callers can errors.Is against it.
type BuildErrorKind uint8

const (
	// ErrProducer: the producer state could not be built; Err holds the
	// ckf.BuildError.
	ErrProducer BuildErrorKind = iota + 1
	// ErrProducerFormatMismatch: the identity's format is not the state's.
	ErrProducerFormatMismatch
	// ErrZeroRecoveryAttempts: RecoveryPolicy.MaxAttempts is not positive.
	ErrZeroRecoveryAttempts
	// ErrInitialAssignment: Pool.Assign failed; Err holds the ingestion error.
	ErrInitialAssignment
	// ErrInitialSnapshot: the first barrier snapshot failed; Err holds the
	// *producer.SnapshotError.
	ErrInitialSnapshot
	// ErrInitialSnapshotIngestion: Pool.InstallSnapshot failed; Err holds the
	// ingestion error.
	ErrInitialSnapshotIngestion
	// ErrInitialSnapshotInstallation: the snapshot was not installed at its
	// sequence; Outcome holds what the pool returned.
	ErrInitialSnapshotInstallation
)

func (k BuildErrorKind) Error() string {
	switch k {
	case ErrProducer:
		return "adapter: producer state build failed"
	case ErrProducerFormatMismatch:
		return "adapter: producer identity format does not match the local CKF state"
	case ErrZeroRecoveryAttempts:
		return "adapter: recovery max attempts must be positive"
	case ErrInitialAssignment:
		return "adapter: initial lane assignment failed"
	case ErrInitialSnapshot:
		return "adapter: initial actor barrier snapshot failed"
	case ErrInitialSnapshotIngestion:
		return "adapter: initial snapshot ingestion failed"
	case ErrInitialSnapshotInstallation:
		return "adapter: initial snapshot was not installed"
	}
	return fmt.Sprintf("adapter: build error %d", uint8(k))
}

// BuildError is LocalCkfAdapterBuildError: a kind plus its cause (Err) or,
// for ErrInitialSnapshotInstallation, the pool's Outcome.
type BuildError struct {
	Kind    BuildErrorKind
	Outcome consumer.IngestOutcome
	Err     error
}

func (e *BuildError) Error() string {
	switch {
	case e.Kind == ErrInitialSnapshotInstallation:
		return fmt.Sprintf("%s: returned %s", e.Kind.Error(), e.Outcome)
	case e.Err != nil:
		return fmt.Sprintf("%s: %v", e.Kind.Error(), e.Err)
	}
	return e.Kind.Error()
}

// Unwrap exposes the kind and the cause, so both errors.Is(err,
// ErrInitialAssignment) and errors.As(err, &ingestionErr) hold.
func (e *BuildError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// ErrorKind enumerates LocalCkfAdapterError. Each kind is itself an error.
type ErrorKind uint8

const (
	// ErrAdmissionClosed: a drain or a recovery failed and admission stays
	// closed until RecoverSnapshot or ExactConsumerDrain succeeds.
	ErrAdmissionClosed ErrorKind = iota + 1
	// ErrPublisherFenced: the publisher is fenced; Reason says why (and is
	// also matched by errors.Is). The event was still applied to the state.
	ErrPublisherFenced
	// ErrDeltaDelivery: the sink failed to hand the delta to the pool; Err
	// holds the sink's error and the publisher is now fenced with
	// producer.FenceDeliveryUncertain. The event was applied to the state.
	ErrDeltaDelivery
	// ErrMissingLease: an exact drain needs a publisher lease.
	ErrMissingLease
	// ErrConsumerDrain: Pool.CompleteDrain failed; Err holds the error.
	ErrConsumerDrain
	// ErrConsumerDrainOutcome: the drain was not acknowledged at the
	// terminal sequence; Outcome holds what the pool returned (a lane
	// deactivation exposes a missing delta).
	ErrConsumerDrainOutcome
	// ErrAssignmentEpochExhausted: no newer assignment epoch exists.
	ErrAssignmentEpochExhausted
	// ErrAssignment: a recovery Pool.Assign failed; Err holds the error.
	ErrAssignment
	// ErrSnapshot: a recovery barrier snapshot failed; Err holds the
	// *producer.SnapshotError.
	ErrSnapshot
	// ErrSnapshotIngestion: a recovery Pool.InstallSnapshot failed; Err
	// holds the error.
	ErrSnapshotIngestion
	// ErrSnapshotInstallation: a recovery snapshot was not installed at its
	// sequence; Outcome holds what the pool returned.
	ErrSnapshotInstallation
	// ErrRecoveryExhausted: every attempt failed; Attempts is their number
	// and Err the last attempt's *Error.
	ErrRecoveryExhausted
)

func (k ErrorKind) Error() string {
	switch k {
	case ErrAdmissionClosed:
		return "adapter: local CKF adapter admission is closed"
	case ErrPublisherFenced:
		return "adapter: local CKF publisher fenced the stream"
	case ErrDeltaDelivery:
		return "adapter: local CKF delta delivery failed"
	case ErrMissingLease:
		return "adapter: consumer exact drain requires an active publisher lease"
	case ErrConsumerDrain:
		return "adapter: consumer exact drain failed"
	case ErrConsumerDrainOutcome:
		return "adapter: consumer exact drain was not acknowledged"
	case ErrAssignmentEpochExhausted:
		return "adapter: lane assignment epoch exhausted"
	case ErrAssignment:
		return "adapter: same-generation lane assignment failed"
	case ErrSnapshot:
		return "adapter: actor barrier snapshot failed"
	case ErrSnapshotIngestion:
		return "adapter: snapshot ingestion failed"
	case ErrSnapshotInstallation:
		return "adapter: snapshot was not installed"
	case ErrRecoveryExhausted:
		return "adapter: snapshot recovery failed"
	}
	return fmt.Sprintf("adapter: error %d", uint8(k))
}

// Error is LocalCkfAdapterError: a kind plus the fields of its variant:
// Reason (ErrPublisherFenced), Outcome (ErrConsumerDrainOutcome,
// ErrSnapshotInstallation), Attempts (ErrRecoveryExhausted) and the cause in
// Err (the sink, ingestion or snapshot error, or the last *Error of an
// exhausted recovery).
type Error struct {
	Kind     ErrorKind
	Reason   producer.FenceReason
	Outcome  consumer.IngestOutcome
	Attempts int
	Err      error
}

func (e *Error) Error() string {
	switch e.Kind {
	case ErrPublisherFenced:
		return fmt.Sprintf("%s: %s", e.Kind.Error(), e.Reason)
	case ErrConsumerDrainOutcome, ErrSnapshotInstallation:
		return fmt.Sprintf("%s: returned %s", e.Kind.Error(), e.Outcome)
	case ErrRecoveryExhausted:
		return fmt.Sprintf("%s after %d attempts: %v", e.Kind.Error(), e.Attempts, e.Err)
	}
	if e.Err != nil {
		return fmt.Sprintf("%s: %v", e.Kind.Error(), e.Err)
	}
	return e.Kind.Error()
}

// Unwrap exposes the kind, the fence reason of ErrPublisherFenced and the
// cause. For ErrRecoveryExhausted the cause is the last attempt's *Error, so
// errors.Is also reaches that attempt's kind and its own cause.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 3)
	errs = append(errs, e.Kind)
	if e.Kind == ErrPublisherFenced && e.Reason != 0 {
		errs = append(errs, e.Reason)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// mapPublishError translates a publish failure into the adapter's words:
// a fence becomes ErrPublisherFenced, a sink failure ErrDeltaDelivery
// carrying the sink's own error.
func mapPublishError(err error) error {
	var pe *producer.PublishError
	if !errors.As(err, &pe) {
		return &Error{Kind: ErrDeltaDelivery, Err: err}
	}
	if pe.Kind == producer.ErrFenced {
		return &Error{Kind: ErrPublisherFenced, Reason: pe.Reason}
	}
	return &Error{Kind: ErrDeltaDelivery, Err: pe.Err}
}
