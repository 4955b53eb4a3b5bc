package ckf

import "fmt"

// FailureDomain is where a failure's state lives.
type FailureDomain uint8

const (
	DomainProducerCore FailureDomain = iota + 1
	DomainConsumerLane
)

func (d FailureDomain) String() string {
	switch d {
	case DomainProducerCore:
		return "producer_core"
	case DomainConsumerLane:
		return "consumer_lane"
	}
	return "none"
}

// CommitState says whether an authoritative write may have happened.
type CommitState uint8

const (
	CommitKnownUnchanged CommitState = iota + 1
	CommitUncertain
	// CommitExactCommittedPhysicalOmitted is the canonical-lineage state of a
	// relocation failure: ownership committed, only the fingerprint missing.
	CommitExactCommittedPhysicalOmitted
)

func (c CommitState) String() string {
	switch c {
	case CommitKnownUnchanged:
		return "known_unchanged"
	case CommitUncertain:
		return "uncertain"
	case CommitExactCommittedPhysicalOmitted:
		return "exact_committed_physical_omitted"
	}
	return "none"
}

// FailureAction is what the owner of a failure must do.
type FailureAction uint8

const (
	ActionContinueCapacityOmission FailureAction = iota + 1
	ActionReportResourceFailure
	ActionRejectSource
	ActionFenceAndRebuildProducer
	ActionDeactivateAndSnapshot
	ActionRetrySnapshot
)

func (a FailureAction) String() string {
	switch a {
	case ActionContinueCapacityOmission:
		return "continue_capacity_omission"
	case ActionReportResourceFailure:
		return "report_resource_failure"
	case ActionRejectSource:
		return "reject_source"
	case ActionFenceAndRebuildProducer:
		return "fence_and_rebuild_producer"
	case ActionDeactivateAndSnapshot:
		return "deactivate_and_snapshot"
	case ActionRetrySnapshot:
		return "retry_snapshot"
	}
	return "none"
}

// FailureDisposition is the full disposition of a failure point. A zero
// RecoveryDomain means "none".
type FailureDisposition struct {
	Domain         FailureDomain
	Commit         CommitState
	RecoveryDomain FailureDomain
	Action         FailureAction
}

func (d FailureDisposition) String() string {
	return fmt.Sprintf("(%s, %s, recovery=%s, %s)", d.Domain, d.Commit, d.RecoveryDomain, d.Action)
}

// FailurePoint is CkfFailurePoint.
type FailurePoint uint8

const (
	PointBoundedRelocationFailure FailurePoint = iota + 1
	PointPrecommitAllocationFailure
	PointSourceProtocolFailure
	PointPrewriteInvariantMismatch
	PointConsumerGapOrMalformedBeforeWrite
	PointConsumerWorkerFailureMidApply
	PointInactiveSnapshotInstallFailure
)

func (p FailurePoint) String() string {
	switch p {
	case PointBoundedRelocationFailure:
		return "bounded_relocation_failure"
	case PointPrecommitAllocationFailure:
		return "precommit_allocation_failure"
	case PointSourceProtocolFailure:
		return "source_protocol_failure"
	case PointPrewriteInvariantMismatch:
		return "prewrite_invariant_mismatch"
	case PointConsumerGapOrMalformedBeforeWrite:
		return "consumer_gap_or_malformed_before_write"
	case PointConsumerWorkerFailureMidApply:
		return "consumer_worker_failure_mid_apply"
	case PointInactiveSnapshotInstallFailure:
		return "inactive_snapshot_install_failure"
	}
	return fmt.Sprintf("FailurePoint(%d)", uint8(p))
}

// Disposition returns the 1.4.0 disposition table (spec §12.2).
func (p FailurePoint) Disposition() FailureDisposition {
	switch p {
	case PointBoundedRelocationFailure:
		return FailureDisposition{DomainProducerCore, CommitKnownUnchanged, 0, ActionContinueCapacityOmission}
	case PointPrecommitAllocationFailure:
		return FailureDisposition{DomainProducerCore, CommitKnownUnchanged, 0, ActionReportResourceFailure}
	case PointSourceProtocolFailure:
		return FailureDisposition{DomainProducerCore, CommitKnownUnchanged, 0, ActionRejectSource}
	case PointPrewriteInvariantMismatch:
		return FailureDisposition{DomainProducerCore, CommitKnownUnchanged, DomainProducerCore, ActionFenceAndRebuildProducer}
	case PointConsumerGapOrMalformedBeforeWrite:
		return FailureDisposition{DomainConsumerLane, CommitKnownUnchanged, DomainConsumerLane, ActionDeactivateAndSnapshot}
	case PointConsumerWorkerFailureMidApply:
		return FailureDisposition{DomainConsumerLane, CommitUncertain, DomainConsumerLane, ActionDeactivateAndSnapshot}
	case PointInactiveSnapshotInstallFailure:
		return FailureDisposition{DomainConsumerLane, CommitKnownUnchanged, DomainConsumerLane, ActionRetrySnapshot}
	}
	return FailureDisposition{}
}

// DispositionFor returns the disposition under a hash mode: in canonical
// lineage mode a relocation failure has committed exact state.
func (p FailurePoint) DispositionFor(mode HashMode) FailureDisposition {
	d := p.Disposition()
	if p == PointBoundedRelocationFailure && mode == HashModeCanonical {
		d.Commit = CommitExactCommittedPhysicalOmitted
	}
	return d
}

// EventError is KvCacheEventError. Each value is an error.
type EventError uint8

const (
	ErrParentBlockNotFound EventError = iota + 1
	ErrBlockNotFound
	ErrInvalidBlockSequence
	ErrCapacityExhausted
	ErrEventAllocationFailed
	ErrOwnershipDegreeOverflow
	ErrIndexerInvariantViolation
	ErrUnsupportedResidencyDomain
)

func (e EventError) Error() string {
	switch e {
	case ErrParentBlockNotFound:
		return "kv event: parent block not found"
	case ErrBlockNotFound:
		return "kv event: block not found"
	case ErrInvalidBlockSequence:
		return "kv event: invalid block sequence"
	case ErrCapacityExhausted:
		return "kv event: CKF capacity exhausted (bounded relocation failed)"
	case ErrEventAllocationFailed:
		return "kv event: allocation failed"
	case ErrOwnershipDegreeOverflow:
		return "kv event: ownership degree overflow"
	case ErrIndexerInvariantViolation:
		return "kv event: indexer invariant violation"
	case ErrUnsupportedResidencyDomain:
		return "kv event: unsupported residency domain"
	}
	return fmt.Sprintf("kv event: error %d", uint8(e))
}

// FailurePoint maps a producer error to its failure point (spec §12.3).
func (e EventError) FailurePoint() FailurePoint {
	switch e {
	case ErrCapacityExhausted:
		return PointBoundedRelocationFailure
	case ErrEventAllocationFailed:
		return PointPrecommitAllocationFailure
	case ErrInvalidBlockSequence, ErrParentBlockNotFound, ErrUnsupportedResidencyDomain, ErrBlockNotFound:
		return PointSourceProtocolFailure
	case ErrIndexerInvariantViolation, ErrOwnershipDegreeOverflow:
		return PointPrewriteInvariantMismatch
	}
	return 0
}
