package consumer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// waitBound bounds every wait for an asynchronous event; tests wait on
// channels, never on sleeps.
const waitBound = 5 * time.Second

// poolClock is a manual clock for lag ages: it moves only when told.
type poolClock struct {
	base   time.Time
	offset atomic.Int64
}

func (c *poolClock) now() time.Time          { return c.base.Add(time.Duration(c.offset.Load())) }
func (c *poolClock) advance(d time.Duration) { c.offset.Add(int64(d)) }
func newPoolClock() *poolClock               { return &poolClock{base: time.Unix(1_700_000_000, 0)} }

// defaultIndexer is the indexer of a new manifest, with the default
// prefix search.
func defaultIndexer(t testing.TB, consumer ckf.ConsumerInstanceID, domain ckf.IndexerDomainID, format ckf.FormatIdentity, lanes [ckf.LaneCount]*ckf.PoolID) *Indexer {
	t.Helper()
	m, err := NewManifest(consumer, domain, format, lanes)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndexer(m, ckf.DefaultPrefixSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func poolTestDomain(semantics byte) ckf.IndexerDomainID {
	return ckf.IndexerDomainID{
		CacheSemantics: ckf.CacheSemanticsID{Digest: ckf.Digest16{semantics, semantics, semantics}, Source: ckf.SourceExplicit},
		RoutingScope:   ckf.RoutingScopeID{Digest: ckf.Digest16{9, 9, 9}, Source: ckf.SourceExplicit},
	}
}

// poolFixture mirrors the seed's Fixture: consumer 11, one pool (DC 7) on
// lane 3, producer incarnation 13, lease epoch 1, a 64-block format.
type poolFixture struct {
	pool        *Pool
	clock       *poolClock
	identity    ckf.ProducerIdentity
	lease       ckf.LaneLease
	bucketCount int
	lane        int
}

func newPoolFixture(t testing.TB, queueCapacity int, tune ...func(*PoolConfig)) *poolFixture {
	t.Helper()
	format, err := ckf.NewConfig(64).Format()
	if err != nil {
		t.Fatal(err)
	}
	domain := poolTestDomain(1)
	poolID := ckf.PoolID{Domain: domain, Dc: 7}
	const consumer, lane = ckf.ConsumerInstanceID(11), 3
	var lanes [ckf.LaneCount]*ckf.PoolID
	lanes[lane] = &poolID
	indexer := defaultIndexer(t, consumer, domain, format, lanes)
	cfg := DefaultPoolConfig()
	cfg.WorkerCount = 1
	cfg.QueueCapacity = queueCapacity
	cfg.ControlTimeout = time.Second
	cfg.MaxDirtyToAppliedAge = 10 * time.Second
	for _, f := range tune {
		f(&cfg)
	}
	clock := newPoolClock()
	pool, err := newPoolWithClock(indexer, cfg, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	return &poolFixture{
		pool:        pool,
		clock:       clock,
		identity:    ckf.ProducerIdentity{Pool: poolID, ProducerIncarnation: 13, LayoutGeneration: 1, Format: format},
		lease:       ckf.LaneLease{ConsumerInstance: consumer, PhysicalLane: lane, AssignmentEpoch: 1},
		bucketCount: int(format.BucketCount),
		lane:        lane,
	}
}

func (f *poolFixture) snapshot(lease ckf.LaneLease, sequence uint64, buckets int) *ckf.Snapshot {
	return &ckf.Snapshot{Identity: f.identity, Lease: lease, Sequence: sequence, Buckets: make([]uint64, buckets)}
}

func (f *poolFixture) delta(base, sequence uint64, images ...ckf.BucketImage) *ckf.Delta {
	return &ckf.Delta{Identity: f.identity, Lease: f.lease, BaseSequence: base, Sequence: sequence, Images: images}
}

func (f *poolFixture) assignAndSnapshot(t testing.TB, sequence uint64) {
	t.Helper()
	if err := f.pool.Assign(f.identity, f.lease); err != nil {
		t.Fatalf("assign: %v", err)
	}
	got, err := f.pool.InstallSnapshot(f.snapshot(f.lease, sequence, f.bucketCount))
	if want := (IngestOutcome{Kind: OutcomeSnapshotInstalled, Sequence: sequence}); err != nil || got != want {
		t.Fatalf("install snapshot = %v, %v; want %v", got, err, want)
	}
}

func (f *poolFixture) laneBit() uint16 { return 1 << f.lane }

func (f *poolFixture) replacementLease() ckf.LaneLease {
	l := f.lease
	l.AssignmentEpoch++
	return l
}

// nextFault waits for the next fault notification.
func nextFault(t testing.TB, p *Pool) Fault {
	t.Helper()
	select {
	case fault := <-p.Faults():
		return fault
	case <-time.After(waitBound):
		t.Fatal("no fault was reported")
		return Fault{}
	}
}

func wantIngestionError(t testing.TB, err error, kind IngestionErrorKind) *IngestionError {
	t.Helper()
	var ie *IngestionError
	if !errors.As(err, &ie) || ie.Kind != kind || !errors.Is(err, kind) {
		t.Fatalf("error = %v; want kind %v", err, kind)
	}
	return ie
}

func wantDisposition(t testing.TB, got ckf.FailureDisposition, commit ckf.CommitState, action ckf.FailureAction) {
	t.Helper()
	if got.Domain != ckf.DomainConsumerLane || got.Commit != commit || got.Action != action {
		t.Fatalf("disposition = %v; want (consumer_lane, %v, %v)", got, commit, action)
	}
}

func TestAsyncDeltaPrecedesAwaitedDrainOnStickyLane(t *testing.T) {
	f := newPoolFixture(t, 8)
	f.assignAndSnapshot(t, 4)
	if err := f.pool.SubmitDelta(f.delta(4, 5, ckf.BucketImage{Bucket: 0, Value: 17})); err != nil {
		t.Fatal(err)
	}
	got, err := f.pool.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 5})
	if want := (IngestOutcome{Kind: OutcomeDrainAcknowledged, InstalledSequence: 5}); err != nil || got != want {
		t.Fatalf("drain = %v, %v; want %v", got, err, want)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != f.laneBit() {
		t.Fatalf("ready = %#x; want %#x", got, f.laneBit())
	}
	if got := f.pool.Indexer().table.LoadImage(0, f.lane); got != 17 {
		t.Fatalf("bucket 0 = %d; want 17", got)
	}
}

func TestCurrentStreamGapIsKnownUnchangedAndDeactivatesOnlyConsumerLane(t *testing.T) {
	f := newPoolFixture(t, 8)
	f.assignAndSnapshot(t, 4)
	if err := f.pool.SubmitDelta(f.delta(5, 6, ckf.BucketImage{Bucket: 0, Value: 17})); err != nil {
		t.Fatal(err)
	}
	fault := nextFault(t, f.pool)
	if fault.Kind != FaultLaneDeactivated || fault.LaneFault.Kind != FaultBaseSequenceMismatch || fault.Lane != f.lane {
		t.Fatalf("fault = %v; want lane_deactivated(base_sequence_mismatch) on lane %d", fault, f.lane)
	}
	wantDisposition(t, fault.FailureDisposition(), ckf.CommitKnownUnchanged, ckf.ActionDeactivateAndSnapshot)
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready = %#x; want 0", got)
	}
}

func TestStaleAssignmentCannotRetireReadyReplacement(t *testing.T) {
	f := newPoolFixture(t, 8)
	f.assignAndSnapshot(t, 4)
	replacement := f.replacementLease()
	if err := f.pool.Assign(f.identity, replacement); err != nil {
		t.Fatal(err)
	}
	got, err := f.pool.InstallSnapshot(f.snapshot(replacement, 10, f.bucketCount))
	if want := (IngestOutcome{Kind: OutcomeSnapshotInstalled, Sequence: 10}); err != nil || got != want {
		t.Fatalf("install = %v, %v; want %v", got, err, want)
	}

	err = f.pool.Assign(f.identity, f.lease)
	wantIngestionError(t, err, ErrAssignment)
	var ae *AssignmentError
	if !errors.As(err, &ae) || ae.Kind != ErrStaleAssignmentEpoch ||
		ae.MinimumExclusive != replacement.AssignmentEpoch || ae.Actual != f.lease.AssignmentEpoch {
		t.Fatalf("assignment error = %#v; want stale epoch (min %d, actual %d)", ae, replacement.AssignmentEpoch, f.lease.AssignmentEpoch)
	}
	if _, ok := (err.(*IngestionError)).Disposition(); ok {
		t.Fatal("a rejected assignment must carry no disposition")
	}
	if got := f.pool.Indexer().ReadyLanes(); got != f.laneBit() {
		t.Fatalf("ready = %#x; want %#x", got, f.laneBit())
	}
	got, err = f.pool.CompleteDrain(ckf.DrainMarker{Lease: replacement, ExpectedSequence: 10})
	if want := (IngestOutcome{Kind: OutcomeDrainAcknowledged, InstalledSequence: 10}); err != nil || got != want {
		t.Fatalf("drain = %v, %v; want %v", got, err, want)
	}
}

func TestForeignAssignmentValidationPreservesReadyLane(t *testing.T) {
	f := newPoolFixture(t, 8)
	f.assignAndSnapshot(t, 4)
	foreign := f.identity
	foreign.Pool.Domain = poolTestDomain(99)

	err := f.pool.Assign(foreign, f.replacementLease())
	wantIngestionError(t, err, ErrAssignment)
	if !errors.Is(err, ErrWrongLaneOwner) {
		t.Fatalf("error = %v; want wrong lane owner", err)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != f.laneBit() {
		t.Fatalf("ready = %#x; want %#x", got, f.laneBit())
	}
	got, err := f.pool.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 4})
	if want := (IngestOutcome{Kind: OutcomeDrainAcknowledged, InstalledSequence: 4}); err != nil || got != want {
		t.Fatalf("drain = %v, %v; want %v", got, err, want)
	}
}

func TestStaleActiveSnapshotIsIgnoredWithoutRollback(t *testing.T) {
	f := newPoolFixture(t, 8)
	f.assignAndSnapshot(t, 4)
	stale := f.snapshot(f.lease, 3, f.bucketCount)
	for i := range stale.Buckets {
		stale.Buckets[i] = ^uint64(0)
	}
	got, err := f.pool.InstallSnapshot(stale)
	if want := (IngestOutcome{Kind: OutcomeIgnoredStaleOrDuplicate, InstalledSequence: 4}); err != nil || got != want {
		t.Fatalf("stale install = %v, %v; want %v", got, err, want)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != f.laneBit() {
		t.Fatalf("ready = %#x; want %#x", got, f.laneBit())
	}
	if got := f.pool.Indexer().table.LoadImage(0, f.lane); got != 0 {
		t.Fatalf("bucket 0 = %#x; the stale snapshot must not be written", got)
	}
	got, err = f.pool.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 4})
	if err != nil || got.Kind != OutcomeDrainAcknowledged {
		t.Fatalf("drain = %v, %v; want acknowledged", got, err)
	}
}

func TestInactiveSnapshotFailureKeepsLeaseRetryableWithoutProducerRecovery(t *testing.T) {
	f := newPoolFixture(t, 8)
	if err := f.pool.Assign(f.identity, f.lease); err != nil {
		t.Fatal(err)
	}
	got, err := f.pool.InstallSnapshot(f.snapshot(f.lease, 4, f.bucketCount-1))
	if err != nil || got.Kind != OutcomeLaneDeactivated || got.Fault.Kind != FaultInvalidSnapshotBucketCount {
		t.Fatalf("malformed install = %v, %v; want lane_deactivated(invalid_snapshot_bucket_count)", got, err)
	}
	fault, ok := f.pool.TryRecvFault()
	if !ok {
		t.Fatal("no fault reported for the malformed snapshot")
	}
	wantDisposition(t, fault.FailureDisposition(), ckf.CommitKnownUnchanged, ckf.ActionRetrySnapshot)
	if st, _ := f.pool.LaneState(f.lane); st.State != AdmissionAwaitingSnapshot || !st.HasLease || st.Lease != f.lease {
		t.Fatalf("lane state = %+v; want awaiting snapshot under the same lease", st)
	}

	got, err = f.pool.InstallSnapshot(f.snapshot(f.lease, 4, f.bucketCount))
	if want := (IngestOutcome{Kind: OutcomeSnapshotInstalled, Sequence: 4}); err != nil || got != want {
		t.Fatalf("corrected install = %v, %v; want %v", got, err, want)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != f.laneBit() {
		t.Fatalf("ready = %#x; want %#x", got, f.laneBit())
	}
}

func TestRetirementCannotRaceSnapshotActivationBackToReady(t *testing.T) {
	f := newPoolFixture(t, 8)
	if err := f.pool.Assign(f.identity, f.lease); err != nil {
		t.Fatal(err)
	}
	entered, release := f.pool.pauseNextSnapshotActivation(f.lane)
	type result struct {
		out IngestOutcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := f.pool.InstallSnapshot(f.snapshot(f.lease, 4, f.bucketCount))
		done <- result{out, err}
	}()
	select {
	case <-entered:
	case <-time.After(waitBound):
		t.Fatal("snapshot activation was not reached")
	}
	if err := f.pool.retireLaneForTest(f.lane); err != nil {
		t.Fatal(err)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready after retirement = %#x; want 0", got)
	}
	release()
	r := <-done
	wantIngestionError(t, r.err, ErrLaneRetired)
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready after the raced activation = %#x; want 0", got)
	}
}

func TestAdmissionEpochExhaustionFencesLaneFailClosed(t *testing.T) {
	f := newPoolFixture(t, 8)
	f.assignAndSnapshot(t, 4)
	f.pool.exhaustLaneEpochForTest(f.lane)

	wantIngestionError(t, f.pool.retireLaneForTest(f.lane), ErrAdmissionEpochExhausted)
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready = %#x; want 0", got)
	}
	wantIngestionError(t, f.pool.Assign(f.identity, f.replacementLease()), ErrAdmissionEpochExhausted)
	if st, _ := f.pool.LaneState(f.lane); !st.Fenced || st.State != AdmissionRetired {
		t.Fatalf("lane state = %+v; want fenced and retired", st)
	}
}

func TestOutstandingImageLimitIsLaneAttributableAndFailClosed(t *testing.T) {
	f := newPoolFixture(t, 8, func(c *PoolConfig) {
		c.MaxOutstandingImagesPerLane, c.OutstandingImageBoundSet = 1, true
	})
	f.assignAndSnapshot(t, 0)
	err := f.pool.SubmitDelta(f.delta(0, 1, ckf.BucketImage{Bucket: 0, Value: 1}, ckf.BucketImage{Bucket: 1, Value: 2}))
	ie := wantIngestionError(t, err, ErrOutstandingImageLimit)
	if ie.Lane != f.lane || ie.Requested != 2 || ie.Limit != 1 {
		t.Fatalf("error = %+v; want lane %d, requested 2, limit 1", ie, f.lane)
	}
	if d, ok := ie.Disposition(); !ok || d != ckf.PointConsumerGapOrMalformedBeforeWrite.Disposition() {
		t.Fatalf("disposition = %v, %v; want consumer gap before write", d, ok)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready = %#x; want 0", got)
	}
	fault, ok := f.pool.TryRecvFault()
	if !ok || fault.Kind != FaultOutstandingImageLimit || fault.Lane != f.lane || fault.Requested != 2 || fault.Limit != 1 {
		t.Fatalf("fault = %v, %v; want outstanding_image_limit on lane %d", fault, ok, f.lane)
	}
}

func TestStalledDeltaRetiresLaneAtDirtyToAppliedDeadline(t *testing.T) {
	const age = 20 * time.Millisecond
	f := newPoolFixture(t, 8, func(c *PoolConfig) { c.MaxDirtyToAppliedAge = age })
	f.assignAndSnapshot(t, 0)
	resume := f.pool.pauseLaneWorker(t, f.lane)
	defer resume()
	if err := f.pool.SubmitDelta(f.delta(0, 1, ckf.BucketImage{Bucket: 0, Value: 1})); err != nil {
		t.Fatal(err)
	}

	// Just below the deadline nothing happens, whoever scans.
	f.pool.fenceExpiredLanes(f.clock.now().Add(age - time.Nanosecond))
	if got := f.pool.Indexer().ReadyLanes(); got != f.laneBit() {
		t.Fatalf("ready before the deadline = %#x; want %#x", got, f.laneBit())
	}
	// At the deadline the watchdog goroutine retires the lane.
	f.clock.advance(age)
	fault := nextFault(t, f.pool)
	if fault.Kind != FaultDirtyToAppliedAgeExceeded || fault.Lane != f.lane || fault.Lease != f.lease {
		t.Fatalf("fault = %v; want dirty_to_applied_age_exceeded on lane %d", fault, f.lane)
	}
	wantDisposition(t, fault.FailureDisposition(), ckf.CommitUncertain, ckf.ActionDeactivateAndSnapshot)
	resume()
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready = %#x; want 0", got)
	}
	wantIngestionError(t, f.pool.SubmitDelta(f.delta(1, 2, ckf.BucketImage{Bucket: 1, Value: 1})), ErrLaneRetired)
}

func TestDirtyToAppliedAgeIsAlsoCheckedAtAdmission(t *testing.T) {
	const age = 20 * time.Millisecond
	f := newPoolFixture(t, 8, func(c *PoolConfig) { c.MaxDirtyToAppliedAge = age })
	f.assignAndSnapshot(t, 0)
	resume := f.pool.pauseLaneWorker(t, f.lane)
	defer resume()
	f.pool.closeWatchdogForTest()
	if err := f.pool.SubmitDelta(f.delta(0, 1, ckf.BucketImage{Bucket: 0, Value: 1})); err != nil {
		t.Fatal(err)
	}
	f.clock.advance(age)
	err := f.pool.SubmitDelta(f.delta(1, 2, ckf.BucketImage{Bucket: 1, Value: 1}))
	ie := wantIngestionError(t, err, ErrDirtyToAppliedAgeExceeded)
	if d, ok := ie.Disposition(); !ok || d != ckf.PointConsumerWorkerFailureMidApply.Disposition() {
		t.Fatalf("disposition = %v, %v; want worker failure mid apply", d, ok)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready = %#x; want 0", got)
	}
	if fault := nextFault(t, f.pool); fault.Kind != FaultDirtyToAppliedAgeExceeded {
		t.Fatalf("fault = %v; want dirty_to_applied_age_exceeded", fault)
	}
}

func TestWorkerHealthTracksEachFailedWorker(t *testing.T) {
	f := newPoolFixture(t, 8, func(c *PoolConfig) { c.WorkerCount = 3 })
	if _, ok := f.pool.FailedWorker(); ok {
		t.Fatal("no worker has failed yet")
	}
	f.pool.markWorkerFailed(f.pool.workers[0])
	f.pool.markWorkerFailed(f.pool.workers[2])
	f.pool.markWorkerFailed(f.pool.workers[2]) // recorded and reported once
	if !f.pool.WorkerFailed(0) || f.pool.WorkerFailed(1) || !f.pool.WorkerFailed(2) {
		t.Fatalf("failed = %v %v %v; want true false true",
			f.pool.WorkerFailed(0), f.pool.WorkerFailed(1), f.pool.WorkerFailed(2))
	}
	if w, ok := f.pool.FailedWorker(); !ok || w != 0 {
		t.Fatalf("FailedWorker = %d, %v; want 0", w, ok)
	}
	for _, want := range []int{0, 2} {
		if fault, ok := f.pool.TryRecvFault(); !ok || fault.Kind != FaultWorkerFailed || fault.Worker != want {
			t.Fatalf("fault = %v, %v; want worker %d failed", fault, ok, want)
		}
	}
	if fault, ok := f.pool.TryRecvFault(); ok {
		t.Fatalf("unexpected fault %v", fault)
	}
}

func TestSaturationRetiresReadinessAndDiscardsQueuedTail(t *testing.T) {
	f := newPoolFixture(t, 1)
	f.assignAndSnapshot(t, 0)
	resume := f.pool.pauseLaneWorker(t, f.lane)
	defer resume()
	if err := f.pool.SubmitDelta(f.delta(0, 1, ckf.BucketImage{Bucket: 0, Value: 1})); err != nil {
		t.Fatal(err)
	}
	err := f.pool.SubmitDelta(f.delta(1, 2, ckf.BucketImage{Bucket: 1, Value: 2}))
	ie := wantIngestionError(t, err, ErrSaturated)
	if d, ok := ie.Disposition(); !ok || d != ckf.PointConsumerGapOrMalformedBeforeWrite.Disposition() {
		t.Fatalf("disposition = %v, %v; want consumer gap before write", d, ok)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready = %#x; want 0", got)
	}
	resume()
	_, err = f.pool.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 1})
	wantIngestionError(t, err, ErrLaneRetired)
	fault, ok := f.pool.TryRecvFault()
	if !ok || fault.Kind != FaultSaturated || fault.Lane != f.lane {
		t.Fatalf("fault = %v, %v; want saturated on lane %d", fault, ok, f.lane)
	}
	// The queued tail was discarded: nothing of it reached the table, and its
	// permit was released once the worker dropped it.
	if err := f.pool.Assign(f.identity, f.replacementLease()); err != nil {
		t.Fatal(err) // the round trip runs behind the discarded delta
	}
	if got := f.pool.Indexer().table.LoadImage(0, f.lane); got != 0 {
		t.Fatalf("bucket 0 = %d; the stale delta must not be applied", got)
	}
	if st, _ := f.pool.LaneState(f.lane); st.OutstandingImages != 0 || st.OutstandingDeltas != 0 {
		t.Fatalf("lane state = %+v; want no outstanding deltas", st)
	}
}

func TestWorkerFailureIsObservableAndClearsReadiness(t *testing.T) {
	f := newPoolFixture(t, 4)
	f.assignAndSnapshot(t, 0)
	worker, ok := f.pool.WorkerForLane(f.lane)
	if !ok {
		t.Fatal("lane has no worker")
	}
	f.pool.crashLaneWorker(f.lane)

	fault := nextFault(t, f.pool)
	if fault.Kind != FaultWorkerFailed || fault.Worker != worker {
		t.Fatalf("fault = %v; want worker %d failed", fault, worker)
	}
	wantDisposition(t, fault.FailureDisposition(), ckf.CommitUncertain, ckf.ActionDeactivateAndSnapshot)
	if w, ok := f.pool.FailedWorker(); !ok || w != worker {
		t.Fatalf("FailedWorker = %d, %v; want %d", w, ok, worker)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready = %#x; want 0", got)
	}
	ie := wantIngestionError(t, f.pool.SubmitDelta(f.delta(0, 1, ckf.BucketImage{Bucket: 0, Value: 1})), ErrWorkerFailed)
	if ie.Worker != worker {
		t.Fatalf("error worker = %d; want %d", ie.Worker, worker)
	}
	_, err := f.pool.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 0})
	wantIngestionError(t, err, ErrWorkerFailed)
}

func TestStickyAssignmentIsStableForConsumerAndLane(t *testing.T) {
	f := newPoolFixture(t, 4)
	worker, ok := f.pool.WorkerForLane(f.lane)
	if !ok {
		t.Fatal("configured lane has no worker")
	}
	if again, _ := f.pool.WorkerForLane(f.lane); again != worker {
		t.Fatalf("worker changed from %d to %d", worker, again)
	}
	if want := ckf.StickyWorker(uint64(f.lease.ConsumerInstance), uint8(f.lane), 1); worker != want {
		t.Fatalf("worker = %d; want %d", worker, want)
	}
	if _, ok := f.pool.WorkerForLane(f.lane + 1); ok {
		t.Fatal("an unconfigured lane must have no worker")
	}
}

func TestNewPoolRejectsInvalidConfig(t *testing.T) {
	f := newPoolFixture(t, 1)
	ix := f.pool.Indexer()
	tests := []struct {
		name string
		tune func(*PoolConfig)
		want PoolBuildErrorKind
	}{
		{"zero workers", func(c *PoolConfig) { c.WorkerCount = 0 }, ErrInvalidWorkerCount},
		{"zero queue", func(c *PoolConfig) { c.QueueCapacity = 0 }, ErrInvalidQueueCapacity},
		{"zero control timeout", func(c *PoolConfig) { c.ControlTimeout = 0 }, ErrInvalidControlTimeout},
		{"explicit zero image bound", func(c *PoolConfig) { c.OutstandingImageBoundSet = true }, ErrInvalidOutstandingImageBound},
		{"zero lag bound", func(c *PoolConfig) { c.MaxDirtyToAppliedAge = 0 }, ErrInvalidDirtyToAppliedAge},
		{"lane already claimed", func(*PoolConfig) {}, ErrClaimLane},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultPoolConfig()
			tc.tune(&cfg)
			p, err := NewPool(ix, cfg)
			if p != nil {
				p.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("NewPool = %v; want %v", err, tc.want)
			}
		})
	}
	var pbe *PoolBuildError
	_, err := NewPool(ix, DefaultPoolConfig())
	if !errors.As(err, &pbe) || pbe.Lane != f.lane || !errors.Is(err, ErrLaneAlreadyClaimed) {
		t.Fatalf("claim error = %v; want lane %d already claimed", err, f.lane)
	}
}

func TestCloseFailsClosed(t *testing.T) {
	f := newPoolFixture(t, 8)
	f.assignAndSnapshot(t, 4)
	if err := f.pool.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready after close = %#x; want 0", got)
	}
	if err := f.pool.Close(); err != nil {
		t.Fatalf("second Close = %v; want nil", err)
	}
	wantIngestionError(t, f.pool.SubmitDelta(f.delta(4, 5, ckf.BucketImage{Bucket: 0, Value: 1})), ErrPoolClosed)
	wantIngestionError(t, f.pool.Assign(f.identity, f.replacementLease()), ErrPoolClosed)
	_, err := f.pool.InstallSnapshot(f.snapshot(f.lease, 5, f.bucketCount))
	wantIngestionError(t, err, ErrPoolClosed)
	_, err = f.pool.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 4})
	wantIngestionError(t, err, ErrPoolClosed)
	wantIngestionError(t, f.pool.ConfigureLane(5, ckf.PoolID{Domain: poolTestDomain(1), Dc: 8}), ErrPoolClosed)
	// The workers released their ingestors: the lane can be claimed again.
	ing, err := f.pool.Indexer().ClaimLane(f.lane)
	if err != nil {
		t.Fatalf("claim after close: %v", err)
	}
	ing.Release()
}

func TestCloseDoesNotBlockOnFullQueue(t *testing.T) {
	f := newPoolFixture(t, 1)
	f.assignAndSnapshot(t, 0)
	resume := f.pool.pauseLaneWorker(t, f.lane)
	defer resume()
	if err := f.pool.SubmitDelta(f.delta(0, 1, ckf.BucketImage{Bucket: 0, Value: 1})); err != nil {
		t.Fatal(err)
	}
	// The worker is held and its queue full; Close must still return.
	if err := f.pool.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready after close = %#x; want 0", got)
	}
}

func TestControlTimeoutRetiresLane(t *testing.T) {
	t.Run("reply", func(t *testing.T) {
		f := newPoolFixture(t, 8, func(c *PoolConfig) { c.ControlTimeout = 20 * time.Millisecond })
		f.assignAndSnapshot(t, 4)
		resume := f.pool.pauseLaneWorker(t, f.lane)
		defer resume()
		// The drain is queued behind the pause and its reply never comes in time.
		_, err := f.pool.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 4})
		ie := wantIngestionError(t, err, ErrControlTimeout)
		if d, ok := ie.Disposition(); !ok || d != ckf.PointConsumerWorkerFailureMidApply.Disposition() {
			t.Fatalf("disposition = %v, %v; want worker failure mid apply", d, ok)
		}
		if got := f.pool.Indexer().ReadyLanes(); got != 0 {
			t.Fatalf("ready = %#x; want 0", got)
		}
		if st, _ := f.pool.LaneState(f.lane); st.State != AdmissionRetired || st.HasLease {
			t.Fatalf("lane state = %+v; want retired without lease", st)
		}
	})
	t.Run("send", func(t *testing.T) {
		f := newPoolFixture(t, 1, func(c *PoolConfig) { c.ControlTimeout = 20 * time.Millisecond })
		f.assignAndSnapshot(t, 4)
		resume := f.pool.pauseLaneWorker(t, f.lane)
		defer resume()
		if err := f.pool.SubmitDelta(f.delta(4, 5, ckf.BucketImage{Bucket: 0, Value: 1})); err != nil {
			t.Fatal(err)
		}
		// The queue is full: the send itself times out.
		_, err := f.pool.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 5})
		wantIngestionError(t, err, ErrControlTimeout)
		if got := f.pool.Indexer().ReadyLanes(); got != 0 {
			t.Fatalf("ready = %#x; want 0", got)
		}
		resume()
		// The lane recovers with a new lease and snapshot.
		lease := f.replacementLease()
		if err := f.pool.Assign(f.identity, lease); err != nil {
			t.Fatal(err)
		}
		if out, err := f.pool.InstallSnapshot(f.snapshot(lease, 7, f.bucketCount)); err != nil || out.Kind != OutcomeSnapshotInstalled {
			t.Fatalf("install = %v, %v", out, err)
		}
		if got := f.pool.Indexer().ReadyLanes(); got != f.laneBit() {
			t.Fatalf("ready = %#x; want %#x", got, f.laneBit())
		}
	})
}

func TestFaultChannelIsBoundedAndBestEffort(t *testing.T) {
	f := newPoolFixture(t, 8, func(c *PoolConfig) {
		c.MaxOutstandingImagesPerLane, c.OutstandingImageBoundSet = 1, true
	})
	capacity := 2*ckf.LaneCount + 1
	if got := cap(f.pool.Faults()); got != capacity {
		t.Fatalf("fault capacity = %d; want %d", got, capacity)
	}
	lease := f.lease
	for i := range capacity + 10 {
		lease.AssignmentEpoch = uint64(i + 1)
		f.lease = lease
		f.assignAndSnapshot(t, 0)
		// Each rejection retires the lane and reports; none may block.
		wantIngestionError(t, f.pool.SubmitDelta(f.delta(0, 1,
			ckf.BucketImage{Bucket: 0, Value: 1}, ckf.BucketImage{Bucket: 1, Value: 1})), ErrOutstandingImageLimit)
	}
	n := 0
	for {
		fault, ok := f.pool.TryRecvFault()
		if !ok {
			break
		}
		if fault.Kind != FaultOutstandingImageLimit {
			t.Fatalf("fault = %v; want outstanding_image_limit", fault)
		}
		// The oldest notifications are kept; the overflow was dropped.
		if want := uint64(n + 1); fault.Lease.AssignmentEpoch != want {
			t.Fatalf("fault %d lease epoch = %d; want %d", n, fault.Lease.AssignmentEpoch, want)
		}
		n++
	}
	if n != capacity {
		t.Fatalf("received %d faults; want exactly %d", n, capacity)
	}
}

func TestConfigureLaneAtRuntime(t *testing.T) {
	f := newPoolFixture(t, 8, func(c *PoolConfig) { c.WorkerCount = 2 })
	const lane = 5
	joined := ckf.PoolID{Domain: poolTestDomain(1), Dc: 8}
	id := f.identity
	id.Pool = joined
	lease := ckf.LaneLease{ConsumerInstance: f.lease.ConsumerInstance, PhysicalLane: lane, AssignmentEpoch: 1}

	err := f.pool.Assign(id, lease)
	wantIngestionError(t, err, ErrLaneNotConfigured)
	if !errors.Is(err, ErrUnconfiguredLane) {
		t.Fatalf("error = %v; want it to match ErrUnconfiguredLane too", err)
	}
	if err := f.pool.ConfigureLane(lane, joined); err != nil {
		t.Fatal(err)
	}
	if err := f.pool.ConfigureLane(lane, ckf.PoolID{Domain: joined.Domain, Dc: 9}); !errors.Is(err, ErrLaneAlreadyConfigured) {
		t.Fatalf("second ConfigureLane = %v; want ErrLaneAlreadyConfigured", err)
	}
	worker, ok := f.pool.WorkerForLane(lane)
	if want := ckf.StickyWorker(uint64(f.lease.ConsumerInstance), lane, 2); !ok || worker != want {
		t.Fatalf("worker = %d, %v; want %d", worker, ok, want)
	}

	f.assignAndSnapshot(t, 1)
	if err := f.pool.Assign(id, lease); err != nil {
		t.Fatal(err)
	}
	snap := &ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: make([]uint64, f.bucketCount)}
	if out, err := f.pool.InstallSnapshot(snap); err != nil || out.Kind != OutcomeSnapshotInstalled {
		t.Fatalf("install = %v, %v", out, err)
	}
	if err := f.pool.SubmitDelta(&ckf.Delta{Identity: id, Lease: lease, BaseSequence: 1, Sequence: 2,
		Images: []ckf.BucketImage{{Bucket: 3, Value: 33}}}); err != nil {
		t.Fatal(err)
	}
	out, err := f.pool.CompleteDrain(ckf.DrainMarker{Lease: lease, ExpectedSequence: 2})
	if want := (IngestOutcome{Kind: OutcomeDrainAcknowledged, InstalledSequence: 2}); err != nil || out != want {
		t.Fatalf("drain = %v, %v; want %v", out, err, want)
	}
	if got, want := f.pool.Indexer().ReadyLanes(), f.laneBit()|1<<lane; got != want {
		t.Fatalf("ready = %#x; want %#x", got, want)
	}
	if got := f.pool.Indexer().table.LoadImage(3, lane); got != 33 {
		t.Fatalf("bucket 3 of lane %d = %d; want 33", lane, got)
	}
}

// TestConcurrentLanesWithQueries drives several lanes from their own
// goroutines while queries run; run it under -race. Every lane inserts the
// same block chain, so once all lanes have drained a query must see the full
// depth on each of them.
func TestConcurrentLanesWithQueries(t *testing.T) {
	const (
		lanes      = 6
		deltas     = 400
		drainEvery = 16
	)
	format, err := ckf.NewConfig(4096).Format()
	if err != nil {
		t.Fatal(err)
	}
	domain := poolTestDomain(1)
	var configured [ckf.LaneCount]*ckf.PoolID
	for l := range lanes {
		configured[l] = &ckf.PoolID{Domain: domain, Dc: ckf.DcID(100 + l)}
	}
	ix := defaultIndexer(t, 21, domain, format, configured)
	cfg := DefaultPoolConfig()
	cfg.WorkerCount = 3
	cfg.QueueCapacity = lanes * (drainEvery + 1)
	cfg.MaxDirtyToAppliedAge = time.Hour // lag is not under test; CI machines stall
	p, err := NewPool(ix, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	chain := []ckf.LocalBlockHash{101, 202, 303, 404, 505, 606, 707, 808}
	seq := ckf.SequenceHashes(nil, chain)
	addressing, err := ckf.NewAddressing(format.BucketCount, format.Seed)
	if err != nil {
		t.Fatal(err)
	}

	var submitters sync.WaitGroup
	var firstQueries sync.WaitGroup
	firstQueries.Add(2) // one per querier below
	stop := make(chan struct{})
	errs := make(chan error, lanes)
	for l := range lanes {
		id := ckf.ProducerIdentity{Pool: *configured[l], ProducerIncarnation: 1, LayoutGeneration: 1, Format: format}
		lease := ckf.LaneLease{ConsumerInstance: 21, PhysicalLane: uint8(l), AssignmentEpoch: 1}
		if err := p.Assign(id, lease); err != nil {
			t.Fatal(err)
		}
		snap := &ckf.Snapshot{Identity: id, Lease: lease, Buckets: make([]uint64, format.BucketCount)}
		if out, err := p.InstallSnapshot(snap); err != nil || out.Kind != OutcomeSnapshotInstalled {
			t.Fatalf("lane %d install = %v, %v", l, out, err)
		}
		submitters.Add(1)
		go func() {
			defer submitters.Done()
			// The lanes start once every querier has run, so queries
			// overlap the applies whatever the scheduler does.
			firstQueries.Wait()
			errs <- driveLane(p, id, lease, addressing, seq, deltas, drainEvery, uint64(l))
		}()
	}

	var queries sync.WaitGroup
	var queried atomic.Int64
	for range 2 {
		queries.Add(1)
		go func() {
			defer queries.Done()
			var scratch QueryScratch
			var out QueryResult
			// The first query, or an early return, lets the lanes start.
			var once sync.Once
			defer once.Do(firstQueries.Done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := ix.FindPrefixMatches(chain, &scratch, &out)
				if err != nil && !errors.Is(err, ErrUnavailable) {
					errs <- err
					return
				}
				queried.Add(1)
				once.Do(firstQueries.Done)
			}
		}()
	}
	submitters.Wait()
	close(stop)
	queries.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, want := ix.ReadyLanes(), uint16(1<<lanes-1); got != want {
		t.Fatalf("ready = %#x; want %#x", got, want)
	}
	var scratch QueryScratch
	var out QueryResult
	if err := ix.FindPrefixMatches(chain, &scratch, &out); err != nil {
		t.Fatal(err)
	}
	for l := range lanes {
		if m := out.Lanes[l]; !m.Present || m.Depth != uint32(len(chain)) {
			t.Fatalf("lane %d match = %+v; want depth %d", l, m, len(chain))
		}
	}
	if queried.Load() == 0 {
		t.Fatal("no query ran concurrently")
	}
}

// driveLane inserts seq's fingerprints one position per delta, then writes
// filler deltas to other buckets, draining every drainEvery deltas so the
// shared queue cannot saturate.
func driveLane(p *Pool, id ckf.ProducerIdentity, lease ckf.LaneLease, a ckf.Addressing,
	seq []ckf.SequenceHash, deltas, drainEvery int, salt uint64) error {
	rng := rand.New(rand.NewPCG(salt, 7))
	words := map[uint64]uint64{}
	var sequence uint64
	for i := range deltas {
		var images []ckf.BucketImage
		if i < len(seq) {
			probe := a.Prepare(uint64(seq[i]))
			bucket := uint64(probe.BucketA)
			w := words[bucket]
			w = ckf.WithSlot(w, ckf.FirstEmpty(w), probe.Fingerprint)
			words[bucket] = w
			images = []ckf.BucketImage{{Bucket: bucket, Value: w}}
		} else {
			n := 1 + rng.IntN(8)
			seen := map[uint64]bool{}
			for len(images) < n {
				b := rng.Uint64N(a.BucketCount())
				if _, chained := words[b]; chained || seen[b] {
					continue
				}
				seen[b] = true
				images = append(images, ckf.BucketImage{Bucket: b, Value: rng.Uint64()})
			}
		}
		if err := p.SubmitDelta(&ckf.Delta{Identity: id, Lease: lease, BaseSequence: sequence, Sequence: sequence + 1, Images: images}); err != nil {
			return err
		}
		sequence++
		if (i+1)%drainEvery == 0 || i == deltas-1 {
			out, err := p.CompleteDrain(ckf.DrainMarker{Lease: lease, ExpectedSequence: sequence})
			if err != nil {
				return err
			}
			if out.Kind != OutcomeDrainAcknowledged || out.InstalledSequence != sequence {
				return errors.New("drain not acknowledged: " + out.String())
			}
		}
	}
	return nil
}

func TestSubmitDeltaDoesNotAllocate(t *testing.T) {
	f := newPoolFixture(t, 512, func(c *PoolConfig) {
		c.MaxOutstandingImagesPerLane = 1 << 20
	})
	f.assignAndSnapshot(t, 0)
	d := f.delta(0, 1, ckf.BucketImage{Bucket: 1, Value: 7}, ckf.BucketImage{Bucket: 2, Value: 9})
	submit := func() {
		if err := f.pool.SubmitDelta(d); err != nil {
			panic(err) // a fast failure must not pose as a fast success
		}
		d.BaseSequence++
		d.Sequence++
	}
	// Grow the outstanding ring to its steady-state size first.
	for range 300 {
		submit()
	}
	if _, err := f.pool.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: d.BaseSequence}); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(200, submit); allocs != 0 {
		t.Fatalf("SubmitDelta allocates %.1f times per delta; want 0", allocs)
	}
	out, err := f.pool.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: d.BaseSequence})
	if err != nil || out.Kind != OutcomeDrainAcknowledged {
		t.Fatalf("drain = %v, %v; want acknowledged", out, err)
	}
}

// BenchmarkPoolDeltaThroughput drives 16 lanes, one submitting goroutine per
// lane, with deltas of 16–64 images through the default pool (4 workers,
// queue 256). Each submitter drains its lane every window deltas, which is
// how a real consumer bounds its backlog below saturation; a final drain per
// lane makes the count exact. One op is one delta.
func BenchmarkPoolDeltaThroughput(b *testing.B) {
	const (
		lanes = ckf.LaneCount
		sets  = 64
	)
	format, err := ckf.NewConfig(1 << 16).Format()
	if err != nil {
		b.Fatal(err)
	}
	domain := poolTestDomain(1)
	var configured [ckf.LaneCount]*ckf.PoolID
	for l := range lanes {
		configured[l] = &ckf.PoolID{Domain: domain, Dc: ckf.DcID(1000 + l)}
	}
	const consumer = 77
	cfg := DefaultPoolConfig()
	// Lag is not under test; a shared CI machine may stall a worker > 10ms.
	cfg.MaxDirtyToAppliedAge = time.Minute
	perWorker := make([]int, cfg.WorkerCount)
	for l := range lanes {
		perWorker[ckf.StickyWorker(consumer, uint8(l), cfg.WorkerCount)]++
	}
	window := min(32, cfg.QueueCapacity/(slices.Max(perWorker)+1))

	rng := rand.New(rand.NewPCG(1, 2))
	var imageSets [lanes][sets][]ckf.BucketImage
	for l := range lanes {
		for s := range sets {
			n := 16 + rng.IntN(49)
			seen := map[uint64]bool{}
			for len(imageSets[l][s]) < n {
				bucket := rng.Uint64N(format.BucketCount)
				if !seen[bucket] {
					seen[bucket] = true
					imageSets[l][s] = append(imageSets[l][s], ckf.BucketImage{Bucket: bucket, Value: rng.Uint64()})
				}
			}
		}
	}

	ix := defaultIndexer(b, consumer, domain, format, configured)
	p, err := NewPool(ix, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ids := make([]ckf.ProducerIdentity, lanes)
	leases := make([]ckf.LaneLease, lanes)
	for l := range lanes {
		ids[l] = ckf.ProducerIdentity{Pool: *configured[l], ProducerIncarnation: 1, LayoutGeneration: 1, Format: format}
		leases[l] = ckf.LaneLease{ConsumerInstance: consumer, PhysicalLane: uint8(l), AssignmentEpoch: 1}
		if err := p.Assign(ids[l], leases[l]); err != nil {
			b.Fatal(err)
		}
		snap := &ckf.Snapshot{Identity: ids[l], Lease: leases[l], Buckets: make([]uint64, format.BucketCount)}
		if out, err := p.InstallSnapshot(snap); err != nil || out.Kind != OutcomeSnapshotInstalled {
			b.Fatalf("install = %v, %v", out, err)
		}
	}

	perLane := (b.N + lanes - 1) / lanes
	var images atomic.Int64
	errs := make(chan error, lanes)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := ckf.Delta{Identity: ids[l], Lease: leases[l], Sequence: 1}
			var sent int64
			for i := range perLane {
				d.Images = imageSets[l][i%sets]
				if err := p.SubmitDelta(&d); err != nil {
					errs <- err
					return
				}
				sent += int64(len(d.Images))
				d.BaseSequence++
				d.Sequence = d.BaseSequence + 1
				if (i+1)%window == 0 || i == perLane-1 {
					out, err := p.CompleteDrain(ckf.DrainMarker{Lease: leases[l], ExpectedSequence: d.BaseSequence})
					if err != nil || out.Kind != OutcomeDrainAcknowledged {
						errs <- fmt.Errorf("lane %d drain = %v, %v", l, out, err)
						return
					}
				}
			}
			images.Add(sent)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if got := ix.ReadyLanes(); got != ckf.LaneMask {
		b.Fatalf("ready = %#x; want all lanes", got)
	}
	b.ReportMetric(float64(images.Load())/elapsed.Seconds(), "images/s")
}

// The lag watchdog looks at the lanes about four times per
// MaxDirtyToAppliedAge, so a stalled lane is retired at most about a quarter
// of the bound late. Measured as the gaps between the watchdog's clock reads
// on an idle pool (nothing else reads the clock): their median stays well
// below a 2ms bound's 500µs period times eight.
func TestLagWatchdogPollsAQuarterOfTheAgeBound(t *testing.T) {
	format, err := ckf.NewConfig(64).Format()
	if err != nil {
		t.Fatal(err)
	}
	domain := poolTestDomain(1)
	poolID := ckf.PoolID{Domain: domain, Dc: 7}
	var lanes [ckf.LaneCount]*ckf.PoolID
	lanes[3] = &poolID
	indexer := defaultIndexer(t, 11, domain, format, lanes)
	cfg := DefaultPoolConfig()
	cfg.WorkerCount = 1
	cfg.MaxDirtyToAppliedAge = 2 * time.Millisecond
	const reads = 41
	var mu sync.Mutex
	var at []time.Time
	done := make(chan struct{})
	now := func() time.Time {
		t := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if at = append(at, t); len(at) == reads {
			close(done)
		}
		return t
	}
	pool, err := newPoolWithClock(indexer, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog read the clock fewer than 41 times in 10s")
	}
	mu.Lock()
	gaps := make([]time.Duration, 0, reads-1)
	for i := 1; i < reads; i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]))
	}
	mu.Unlock()
	slices.Sort(gaps)
	if median := gaps[len(gaps)/2]; median >= 4*time.Millisecond {
		t.Fatalf("median watchdog period %v for a 2ms age bound, want about 500µs (gaps %v)", median, gaps)
	}
}
