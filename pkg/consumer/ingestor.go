package consumer

import "github.com/ckfrelay/ckfrelay/pkg/ckf"

// LaneIngestor is GlobalCkfLaneIngestor (spec §8.5): the direct ingestion
// state of one physical lane.
//
// Concurrency: a LaneIngestor is owned by one goroutine at a time (the
// lane-sticky worker); its lease, sequence and validation scratch are
// ordinary fields never read by queries. It talks to queries only through
// table words (plain atomic stores) and the ready bit (set after all snapshot
// words are stored, cleared before lease state changes).
type LaneIngestor struct {
	ix   *Indexer
	lane int
	bit  uint32

	assigned     bool
	identity     ckf.ProducerIdentity
	lease        ckf.LaneLease
	lastEpoch    uint64
	hasLastEpoch bool

	installedSequence uint64
	ready             bool
	released          bool

	lastFailure    ckf.FailureDisposition
	hasLastFailure bool

	// validationWords is a bitmap over buckets; touched lists the words set
	// during one validation so clearing costs O(images), not O(buckets).
	validationWords []uint64
	touched         []uint32
}

func newLaneIngestor(ix *Indexer, lane int) *LaneIngestor {
	words := (ix.table.bucketCount + 63) / 64
	return &LaneIngestor{
		ix:              ix,
		lane:            lane,
		bit:             1 << lane,
		validationWords: make([]uint64, words),
		touched:         make([]uint32, 0, words),
	}
}

// Lane returns the physical lane.
func (l *LaneIngestor) Lane() int { return l.lane }

// InstalledSequence returns the installed sequence, reported only while the
// lane is ready.
func (l *LaneIngestor) InstalledSequence() (uint64, bool) {
	if !l.ready {
		return 0, false
	}
	return l.installedSequence, true
}

// Lease returns the current lease, if assigned.
func (l *LaneIngestor) Lease() (ckf.LaneLease, bool) { return l.lease, l.assigned }

// LastFailureDisposition classifies the most recent current-lane failure.
// Every operation resets it; ignored stale or foreign traffic leaves none.
func (l *LaneIngestor) LastFailureDisposition() (ckf.FailureDisposition, bool) {
	return l.lastFailure, l.hasLastFailure
}

// Assign validates and installs a new assignment (spec §8.4). The ready bit
// is cleared before the lease changes, so later queries cannot see the lane
// ready under the new lease until its snapshot is installed.
func (l *LaneIngestor) Assign(id ckf.ProducerIdentity, lease ckf.LaneLease) error {
	l.hasLastFailure = false
	if l.released {
		return &AssignmentError{Kind: ErrIngestorReleased, Lane: uint8(l.lane)}
	}
	if err := l.ix.ValidateAssignment(l.lane, id, lease, l.lastEpoch, l.hasLastEpoch); err != nil {
		return err
	}
	l.clearReady()
	l.assigned, l.identity, l.lease = true, id, lease
	l.lastEpoch, l.hasLastEpoch = lease.AssignmentEpoch, true
	l.installedSequence = 0
	l.clearValidation()
	return nil
}

// Retire clears readiness and drops the assignment. The last assignment
// epoch survives, so an old lease cannot be re-assigned.
func (l *LaneIngestor) Retire() {
	l.hasLastFailure = false
	l.clearReady()
	l.assigned = false
	l.installedSequence = 0
	l.clearValidation()
}

// Release is the Rust Drop: it clears the lane's ready and claimed bits so
// the lane can be claimed again. The ingestor must not be used afterwards:
// messages are then ignored as foreign and Assign fails. Release is
// idempotent and never clears a later owner's bits.
func (l *LaneIngestor) Release() {
	if l.released {
		return
	}
	l.Retire()
	l.released = true
	l.ix.claimedLanes.And(^l.bit)
}

// InstallSnapshot installs a barrier snapshot and activates the lane.
func (l *LaneIngestor) InstallSnapshot(s *ckf.Snapshot) IngestOutcome {
	return l.InstallSnapshotGuarded(s, nil)
}

// InstallSnapshotGuarded is InstallSnapshot with an activation guard (the
// ingestion pool's variant). After every word is stored, activate is called
// on this goroutine; if it returns false the outcome is AwaitingSnapshot and
// the lane stays unready (its words written). If it returns true the lane is
// activated immediately after the call returns. A guard that must be atomic
// with activation therefore keeps its lock held when it returns true and
// releases it after InstallSnapshotGuarded returns. A nil guard always
// activates.
func (l *LaneIngestor) InstallSnapshotGuarded(s *ckf.Snapshot, activate func() bool) IngestOutcome {
	l.hasLastFailure = false
	if !l.assigned || s.Lease != l.lease {
		return IngestOutcome{Kind: OutcomeIgnoredForeignLease}
	}
	if s.Identity != l.identity {
		return l.deactivateSnapshot(LaneFault{Kind: FaultWrongIdentity})
	}
	if l.ready && s.Sequence <= l.installedSequence {
		// A delayed snapshot of the current lease is stale: ignore it before
		// validating its payload so it cannot retire a newer state.
		return IngestOutcome{Kind: OutcomeIgnoredStaleOrDuplicate, InstalledSequence: l.installedSequence}
	}
	if expected := l.ix.table.bucketCount; uint64(len(s.Buckets)) != expected {
		return l.deactivateSnapshot(LaneFault{Kind: FaultInvalidSnapshotBucketCount, Expected: expected, Actual: uint64(len(s.Buckets))})
	}
	if l.ready {
		return l.deactivate(LaneFault{Kind: FaultSnapshotWhileReady, InstalledSequence: l.installedSequence, SnapshotSequence: s.Sequence}, ckf.PointConsumerGapOrMalformedBeforeWrite)
	}

	l.clearReady()
	for bucket, value := range s.Buckets {
		l.ix.table.StoreImage(uint64(bucket), l.lane, value)
	}
	if activate != nil && !activate() {
		return IngestOutcome{Kind: OutcomeAwaitingSnapshot}
	}
	l.activateSnapshot(s.Sequence)
	return IngestOutcome{Kind: OutcomeSnapshotInstalled, Sequence: s.Sequence}
}

// ApplyDelta applies one contiguous absolute-image delta, one atomic store
// per bucket and not atomic as a group. Foreign or superseded leases are
// ignored; a current-stream gap, reordering, malformed image set or identity
// mismatch clears readiness before any write, and the lane waits for a new
// snapshot: deltas are never buffered across a gap.
func (l *LaneIngestor) ApplyDelta(d *ckf.Delta) IngestOutcome {
	l.hasLastFailure = false
	if !l.assigned || d.Lease != l.lease {
		return IngestOutcome{Kind: OutcomeIgnoredForeignLease}
	}
	const point = ckf.PointConsumerGapOrMalformedBeforeWrite
	if d.Identity != l.identity {
		return l.deactivate(LaneFault{Kind: FaultWrongIdentity}, point)
	}
	if !l.ready {
		return IngestOutcome{Kind: OutcomeAwaitingSnapshot}
	}
	if d.Sequence <= l.installedSequence {
		return IngestOutcome{Kind: OutcomeIgnoredStaleOrDuplicate, InstalledSequence: l.installedSequence}
	}
	if d.BaseSequence != l.installedSequence {
		return l.deactivate(LaneFault{Kind: FaultBaseSequenceMismatch, Expected: l.installedSequence, Actual: d.BaseSequence}, point)
	}
	if d.BaseSequence == ^uint64(0) {
		return l.deactivate(LaneFault{Kind: FaultSequenceExhausted}, point)
	}
	if d.Sequence != d.BaseSequence+1 {
		return l.deactivate(LaneFault{Kind: FaultNonContiguousSequence, Base: d.BaseSequence, Sequence: d.Sequence}, point)
	}
	if fault, ok := l.validateImages(d.Images); !ok {
		return l.deactivate(fault, point)
	}
	for _, img := range d.Images {
		l.ix.table.StoreImage(img.Bucket, l.lane, img.Value)
	}
	l.installedSequence = d.Sequence
	return IngestOutcome{Kind: OutcomeDeltaApplied, Sequence: d.Sequence, Images: len(d.Images)}
}

// CompleteDrain acknowledges a drain only at the publisher's expected
// terminal sequence; a mismatch exposes a dropped final delta that would
// otherwise have no successor to reveal the gap.
func (l *LaneIngestor) CompleteDrain(marker ckf.DrainMarker) IngestOutcome {
	l.hasLastFailure = false
	if !l.assigned || marker.Lease != l.lease {
		return IngestOutcome{Kind: OutcomeIgnoredForeignLease}
	}
	if l.ready && l.installedSequence == marker.ExpectedSequence {
		return IngestOutcome{Kind: OutcomeDrainAcknowledged, InstalledSequence: l.installedSequence}
	}
	fault := LaneFault{Kind: FaultTerminalSequenceMismatch, Expected: marker.ExpectedSequence}
	if l.ready {
		fault.Actual, fault.HasActual = l.installedSequence, true
	}
	return l.deactivate(fault, ckf.PointConsumerGapOrMalformedBeforeWrite)
}

// validateImages rejects an empty set, an out-of-range bucket or a repeated
// bucket (the first offending image in order) without allocating.
func (l *LaneIngestor) validateImages(images []ckf.BucketImage) (LaneFault, bool) {
	l.clearValidation()
	if len(images) == 0 {
		return LaneFault{Kind: FaultEmptyDelta}, false
	}
	defer l.clearValidation()
	bucketCount := l.ix.table.bucketCount
	for _, img := range images {
		if img.Bucket >= bucketCount {
			return LaneFault{Kind: FaultInvalidImageIndex, Bucket: img.Bucket}, false
		}
		word, bit := img.Bucket/64, uint64(1)<<(img.Bucket%64)
		w := l.validationWords[word]
		if w&bit != 0 {
			return LaneFault{Kind: FaultDuplicateImageIndex, Bucket: img.Bucket}, false
		}
		if w == 0 {
			l.touched = append(l.touched, uint32(word))
		}
		l.validationWords[word] = w | bit
	}
	return LaneFault{}, true
}

func (l *LaneIngestor) clearValidation() {
	for _, word := range l.touched {
		l.validationWords[word] = 0
	}
	l.touched = l.touched[:0]
}

// deactivateSnapshot picks the failure point by readiness: an inactive lane
// merely retries its snapshot.
func (l *LaneIngestor) deactivateSnapshot(fault LaneFault) IngestOutcome {
	point := ckf.PointInactiveSnapshotInstallFailure
	if l.ready {
		point = ckf.PointConsumerGapOrMalformedBeforeWrite
	}
	return l.deactivate(fault, point)
}

// deactivate records the disposition and clears readiness; the assignment
// stays, so the same lease may install a corrected snapshot.
func (l *LaneIngestor) deactivate(fault LaneFault, point ckf.FailurePoint) IngestOutcome {
	l.lastFailure, l.hasLastFailure = point.Disposition(), true
	l.clearReady()
	return IngestOutcome{Kind: OutcomeLaneDeactivated, Fault: fault}
}

// activateSnapshot publishes readiness after every snapshot word is stored.
func (l *LaneIngestor) activateSnapshot(sequence uint64) {
	l.installedSequence = sequence
	l.ready = true
	l.ix.readyLanes.Or(l.bit)
}

func (l *LaneIngestor) clearReady() {
	l.ix.readyLanes.And(^l.bit)
	l.ready = false
}
