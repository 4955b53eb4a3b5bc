package consumer

// Asynchronous fault notifications and the admission states a lane
// reports (spec §9.2, §9.5).

import (
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// FaultKind enumerates GlobalCkfIngestionFault.
type FaultKind uint8

const (
	FaultSaturated FaultKind = iota + 1
	FaultOutstandingImageLimit
	FaultDirtyToAppliedAgeExceeded
	FaultLaneDeactivated
	FaultWorkerFailed
)

func (k FaultKind) String() string {
	switch k {
	case FaultSaturated:
		return "saturated"
	case FaultOutstandingImageLimit:
		return "outstanding_image_limit"
	case FaultDirtyToAppliedAgeExceeded:
		return "dirty_to_applied_age_exceeded"
	case FaultLaneDeactivated:
		return "lane_deactivated"
	case FaultWorkerFailed:
		return "worker_failed"
	}
	return fmt.Sprintf("FaultKind(%d)", uint8(k))
}

// Fault is an asynchronous ingestion fault notification. Lane and Lease (when
// HasLease) are set for lane faults; Requested/Limit for
// FaultOutstandingImageLimit; LaneFault and Disposition for
// FaultLaneDeactivated; Worker for FaultWorkerFailed.
type Fault struct {
	Kind        FaultKind
	Lane        int
	Lease       ckf.LaneLease
	HasLease    bool
	LaneFault   LaneFault
	Disposition ckf.FailureDisposition
	Requested   uint64
	Limit       uint64
	Worker      int
}

// FailureDisposition classifies recovery from the consumer state whose commit
// is known or uncertain (spec §9.5).
func (f Fault) FailureDisposition() ckf.FailureDisposition {
	switch f.Kind {
	case FaultLaneDeactivated:
		return f.Disposition
	case FaultWorkerFailed, FaultDirtyToAppliedAgeExceeded:
		return ckf.PointConsumerWorkerFailureMidApply.Disposition()
	}
	return ckf.PointConsumerGapOrMalformedBeforeWrite.Disposition()
}

func (f Fault) String() string {
	switch f.Kind {
	case FaultLaneDeactivated:
		return fmt.Sprintf("lane %d: lane_deactivated(%s)", f.Lane, f.LaneFault)
	case FaultOutstandingImageLimit:
		return fmt.Sprintf("lane %d: outstanding_image_limit(requested=%d, limit=%d)", f.Lane, f.Requested, f.Limit)
	case FaultWorkerFailed:
		return fmt.Sprintf("worker %d failed", f.Worker)
	}
	return fmt.Sprintf("lane %d: %s", f.Lane, f.Kind)
}

// AdmissionState is a lane's admission state (spec §9.2).
type AdmissionState uint8

const (
	AdmissionUnassigned AdmissionState = iota
	AdmissionTransitioning
	AdmissionAwaitingSnapshot
	AdmissionActive
	AdmissionRetired
)

func (s AdmissionState) String() string {
	switch s {
	case AdmissionUnassigned:
		return "unassigned"
	case AdmissionTransitioning:
		return "transitioning"
	case AdmissionAwaitingSnapshot:
		return "awaiting_snapshot"
	case AdmissionActive:
		return "active"
	case AdmissionRetired:
		return "retired"
	}
	return fmt.Sprintf("AdmissionState(%d)", uint8(s))
}

// LaneStatus is a consistent copy of one lane's admission state, for metrics.
type LaneStatus struct {
	Worker            int
	State             AdmissionState
	Epoch             uint64
	Fenced            bool
	Lease             ckf.LaneLease
	HasLease          bool
	OutstandingImages uint64
	OutstandingDeltas int
}
