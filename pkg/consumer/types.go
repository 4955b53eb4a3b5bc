package consumer

import (
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// AssignmentErrorKind enumerates GlobalCkfAssignmentError (spec §8.4). Each
// kind is itself an error so callers can errors.Is against it.
type AssignmentErrorKind uint8

const (
	ErrWrongConsumerInstance AssignmentErrorKind = iota + 1
	ErrWrongPhysicalLane
	ErrWrongLaneOwner
	ErrWrongFormat
	ErrStaleAssignmentEpoch
	// ErrIngestorReleased is a Go addition: a released LaneIngestor no longer
	// owns its lane and refuses new assignments.
	ErrIngestorReleased
)

func (k AssignmentErrorKind) Error() string {
	switch k {
	case ErrWrongConsumerInstance:
		return "consumer: lease targets another consumer instance"
	case ErrWrongPhysicalLane:
		return "consumer: lease targets another physical lane"
	case ErrWrongLaneOwner:
		return "consumer: producer identity does not own the lane"
	case ErrWrongFormat:
		return "consumer: producer CKF format differs from the immutable consumer format"
	case ErrStaleAssignmentEpoch:
		return "consumer: assignment epoch is not newer than the previous one"
	case ErrIngestorReleased:
		return "consumer: lane ingestor was released"
	}
	return fmt.Sprintf("consumer: assignment error %d", uint8(k))
}

// AssignmentError carries an AssignmentErrorKind and its fields. Expected and
// Actual hold consumer instance ids (ErrWrongConsumerInstance), lane numbers
// (ErrWrongPhysicalLane) or the refused epoch in Actual
// (ErrStaleAssignmentEpoch, with MinimumExclusive).
type AssignmentError struct {
	Kind             AssignmentErrorKind
	Expected, Actual uint64
	Lane             uint8
	MinimumExclusive uint64
}

func (e *AssignmentError) Error() string {
	switch e.Kind {
	case ErrWrongConsumerInstance:
		return fmt.Sprintf("consumer: lease targets consumer %d, expected %d", e.Actual, e.Expected)
	case ErrWrongPhysicalLane:
		return fmt.Sprintf("consumer: lease targets lane %d, expected %d", e.Actual, e.Expected)
	case ErrWrongLaneOwner:
		return fmt.Sprintf("consumer: producer identity does not own lane %d", e.Lane)
	case ErrStaleAssignmentEpoch:
		return fmt.Sprintf("consumer: assignment epoch %d must be newer than %d", e.Actual, e.MinimumExclusive)
	}
	return e.Kind.Error()
}

func (e *AssignmentError) Unwrap() error { return e.Kind }

// BuildErrorKind enumerates GlobalCkfBuildError (manifest, indexer and lane
// claim errors). Each kind is itself an error.
type BuildErrorKind uint8

const (
	ErrNoConfiguredLanes BuildErrorKind = iota + 1
	ErrMixedIndexerDomain
	ErrDuplicatePool
	ErrDuplicateDcLane
	ErrInvalidLane
	ErrUnconfiguredLane
	ErrLaneAlreadyClaimed
	ErrInvalidVerificationWindow
	ErrAllocationFailed
	// ErrCkf wraps a ckf.BuildError (the seed's transparent Ckf variant); the
	// wrapped error is in BuildError.Err.
	ErrCkf
	// ErrLaneAlreadyConfigured is a Go addition for Indexer.ConfigureLane: a
	// configured lane's pool is immutable.
	ErrLaneAlreadyConfigured
)

func (k BuildErrorKind) Error() string {
	switch k {
	case ErrNoConfiguredLanes:
		return "consumer: global CKF manifest must configure at least one lane"
	case ErrMixedIndexerDomain:
		return "consumer: lane belongs to another indexer domain"
	case ErrDuplicatePool:
		return "consumer: duplicate global CKF pool"
	case ErrDuplicateDcLane:
		return "consumer: more than one lane for one DC"
	case ErrInvalidLane:
		return "consumer: lane is outside 0..16"
	case ErrUnconfiguredLane:
		return "consumer: lane is not configured"
	case ErrLaneAlreadyClaimed:
		return "consumer: lane already has an ingestion owner"
	case ErrInvalidVerificationWindow:
		return "consumer: verification_window outside 1..=8"
	case ErrAllocationFailed:
		return "consumer: failed to allocate global CKF storage"
	case ErrCkf:
		return "consumer: ckf build error"
	case ErrLaneAlreadyConfigured:
		return "consumer: lane is already configured"
	}
	return fmt.Sprintf("consumer: build error %d", uint8(k))
}

// BuildError carries a BuildErrorKind and the fields of its variant: Lane
// (MixedIndexerDomain, InvalidLane, UnconfiguredLane, LaneAlreadyClaimed,
// LaneAlreadyConfigured), Expected/Actual domains (MixedIndexerDomain), Pool
// (DuplicatePool), Dc (DuplicateDcLane), Value (InvalidVerificationWindow)
// and Err (the wrapped ckf error of ErrCkf).
type BuildError struct {
	Kind     BuildErrorKind
	Lane     int
	Expected ckf.IndexerDomainID
	Actual   ckf.IndexerDomainID
	Pool     ckf.PoolID
	Dc       ckf.DcID
	Value    int
	Err      error
}

func (e *BuildError) Error() string {
	switch e.Kind {
	case ErrMixedIndexerDomain:
		return fmt.Sprintf("consumer: lane %d has indexer domain %s, expected %s", e.Lane, e.Actual, e.Expected)
	case ErrDuplicatePool:
		return fmt.Sprintf("consumer: duplicate global CKF pool %s", e.Pool)
	case ErrDuplicateDcLane:
		return fmt.Sprintf("consumer: global CKF manifest contains more than one lane for DC %s", e.Dc)
	case ErrInvalidLane:
		return fmt.Sprintf("consumer: global CKF lane %d is outside 0..%d", e.Lane, ckf.LaneCount)
	case ErrUnconfiguredLane:
		return fmt.Sprintf("consumer: global CKF lane %d is not configured", e.Lane)
	case ErrLaneAlreadyClaimed:
		return fmt.Sprintf("consumer: global CKF lane %d already has an ingestion owner", e.Lane)
	case ErrLaneAlreadyConfigured:
		return fmt.Sprintf("consumer: global CKF lane %d is already configured", e.Lane)
	case ErrInvalidVerificationWindow:
		return fmt.Sprintf("consumer: verification_window %d is outside 1..=%d", e.Value, ckf.MaxVerificationWindow)
	case ErrCkf:
		if e.Err != nil {
			return "consumer: " + e.Err.Error()
		}
	}
	return e.Kind.Error()
}

// Unwrap exposes the kind and, for ErrCkf, the wrapped ckf error, so both
// errors.Is(err, ErrCkf) and errors.Is(err, ckf.ErrCapacityOverflow) hold.
func (e *BuildError) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

func ckfBuildError(err error) error {
	return &BuildError{Kind: ErrCkf, Err: err}
}

// LaneFaultKind enumerates GlobalCkfLaneFault (spec §8.5).
type LaneFaultKind uint8

const (
	FaultWrongIdentity LaneFaultKind = iota + 1
	FaultInvalidSnapshotBucketCount
	FaultEmptyDelta
	FaultBaseSequenceMismatch
	FaultNonContiguousSequence
	FaultSequenceExhausted
	FaultInvalidImageIndex
	FaultDuplicateImageIndex
	FaultSnapshotWhileReady
	FaultTerminalSequenceMismatch
)

func (k LaneFaultKind) String() string {
	switch k {
	case FaultWrongIdentity:
		return "wrong_identity"
	case FaultInvalidSnapshotBucketCount:
		return "invalid_snapshot_bucket_count"
	case FaultEmptyDelta:
		return "empty_delta"
	case FaultBaseSequenceMismatch:
		return "base_sequence_mismatch"
	case FaultNonContiguousSequence:
		return "non_contiguous_sequence"
	case FaultSequenceExhausted:
		return "sequence_exhausted"
	case FaultInvalidImageIndex:
		return "invalid_image_index"
	case FaultDuplicateImageIndex:
		return "duplicate_image_index"
	case FaultSnapshotWhileReady:
		return "snapshot_while_ready"
	case FaultTerminalSequenceMismatch:
		return "terminal_sequence_mismatch"
	}
	return fmt.Sprintf("LaneFaultKind(%d)", uint8(k))
}

// LaneFault is a current-lane fault that deactivated the lane. It is a
// comparable value; only the fields of its kind are set:
//
//   - InvalidSnapshotBucketCount, BaseSequenceMismatch: Expected, Actual;
//   - NonContiguousSequence: Base, Sequence;
//   - InvalidImageIndex, DuplicateImageIndex: Bucket;
//   - SnapshotWhileReady: InstalledSequence, SnapshotSequence;
//   - TerminalSequenceMismatch: Expected, and Actual only when HasActual
//     (the lane was ready).
type LaneFault struct {
	Kind              LaneFaultKind
	Expected, Actual  uint64
	HasActual         bool
	Bucket            uint64
	Base, Sequence    uint64
	InstalledSequence uint64
	SnapshotSequence  uint64
}

func (f LaneFault) String() string {
	switch f.Kind {
	case FaultInvalidSnapshotBucketCount:
		return fmt.Sprintf("invalid_snapshot_bucket_count(expected=%d, actual=%d)", f.Expected, f.Actual)
	case FaultBaseSequenceMismatch:
		return fmt.Sprintf("base_sequence_mismatch(expected=%d, actual=%d)", f.Expected, f.Actual)
	case FaultNonContiguousSequence:
		return fmt.Sprintf("non_contiguous_sequence(base=%d, sequence=%d)", f.Base, f.Sequence)
	case FaultInvalidImageIndex, FaultDuplicateImageIndex:
		return fmt.Sprintf("%s(bucket=%d)", f.Kind, f.Bucket)
	case FaultSnapshotWhileReady:
		return fmt.Sprintf("snapshot_while_ready(installed=%d, snapshot=%d)", f.InstalledSequence, f.SnapshotSequence)
	case FaultTerminalSequenceMismatch:
		if f.HasActual {
			return fmt.Sprintf("terminal_sequence_mismatch(expected=%d, actual=%d)", f.Expected, f.Actual)
		}
		return fmt.Sprintf("terminal_sequence_mismatch(expected=%d, actual=none)", f.Expected)
	}
	return f.Kind.String()
}

// OutcomeKind enumerates GlobalCkfIngestOutcome.
type OutcomeKind uint8

const (
	OutcomeSnapshotInstalled OutcomeKind = iota + 1
	OutcomeDeltaApplied
	OutcomeIgnoredForeignLease
	OutcomeIgnoredStaleOrDuplicate
	OutcomeDrainAcknowledged
	OutcomeAwaitingSnapshot
	OutcomeLaneDeactivated
)

func (k OutcomeKind) String() string {
	switch k {
	case OutcomeSnapshotInstalled:
		return "snapshot_installed"
	case OutcomeDeltaApplied:
		return "delta_applied"
	case OutcomeIgnoredForeignLease:
		return "ignored_foreign_lease"
	case OutcomeIgnoredStaleOrDuplicate:
		return "ignored_stale_or_duplicate"
	case OutcomeDrainAcknowledged:
		return "drain_acknowledged"
	case OutcomeAwaitingSnapshot:
		return "awaiting_snapshot"
	case OutcomeLaneDeactivated:
		return "lane_deactivated"
	}
	return fmt.Sprintf("OutcomeKind(%d)", uint8(k))
}

// IngestOutcome is the result of one ingestion message. It is comparable;
// only the fields of its kind are set:
//
//   - SnapshotInstalled: Sequence;
//   - DeltaApplied: Sequence, Images;
//   - IgnoredStaleOrDuplicate, DrainAcknowledged: InstalledSequence;
//   - LaneDeactivated: Fault.
type IngestOutcome struct {
	Kind              OutcomeKind
	Sequence          uint64
	Images            int
	InstalledSequence uint64
	Fault             LaneFault
}

func (o IngestOutcome) String() string {
	switch o.Kind {
	case OutcomeSnapshotInstalled:
		return fmt.Sprintf("snapshot_installed(sequence=%d)", o.Sequence)
	case OutcomeDeltaApplied:
		return fmt.Sprintf("delta_applied(sequence=%d, images=%d)", o.Sequence, o.Images)
	case OutcomeIgnoredStaleOrDuplicate, OutcomeDrainAcknowledged:
		return fmt.Sprintf("%s(installed_sequence=%d)", o.Kind, o.InstalledSequence)
	case OutcomeLaneDeactivated:
		return "lane_deactivated(" + o.Fault.String() + ")"
	}
	return o.Kind.String()
}

// QueryError enumerates GlobalCkfQueryError.
type QueryError uint8

// ErrUnavailable: no configured lane was ready when the query captured readiness.
const ErrUnavailable QueryError = 1

func (e QueryError) Error() string {
	if e == ErrUnavailable {
		return "consumer: no global CKF lanes are ready"
	}
	return fmt.Sprintf("consumer: query error %d", uint8(e))
}
