package consumer

import (
	"runtime"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Fail-closed gaps found against ingestion_pool.rs (issue 6, item 8). Each
// test failed on the pool before its fix.

// The seed drops a delta's permit while a panic unwinds. Before the fix the
// in-flight delta's outstanding entry leaked, and the lag watchdog later
// reported a spurious dirty-to-applied fault for a lane that had already
// failed as worker_failed.
func TestDeltaPanicReleasesItsOutstandingEntry(t *testing.T) {
	f := newPoolFixture(t, 4)
	f.pool.closeWatchdogForTest()
	f.assignAndSnapshot(t, 0)
	f.pool.panicNextDeltaForTest(f.lane)
	if err := f.pool.SubmitDelta(f.delta(0, 1, ckf.BucketImage{Bucket: 0, Value: 1})); err != nil {
		t.Fatal(err)
	}
	if fault := nextFault(t, f.pool); fault.Kind != FaultWorkerFailed {
		t.Fatalf("fault = %v; want worker_failed", fault)
	}
	f.pool.waitWorkerExit(t, f.lane)
	if st, _ := f.pool.LaneState(f.lane); st.OutstandingDeltas != 0 || st.OutstandingImages != 0 {
		t.Fatalf("lane state = %+v; the panicking delta's entry must be released", st)
	}
	f.clock.advance(time.Hour)
	f.pool.fenceExpiredLanes(f.clock.now())
	if fault, ok := f.pool.TryRecvFault(); ok {
		t.Fatalf("spurious fault %v after the worker failed", fault)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != 0 {
		t.Fatalf("ready = %#x; want 0", got)
	}
}

// Before the fix a second Close returned nil at once while the first was
// still failing closed, so its caller could observe a ready lane.
func TestConcurrentCloseReturnsOnlyOnceFailedClosed(t *testing.T) {
	f := newPoolFixture(t, 4)
	f.assignAndSnapshot(t, 0)
	c := f.pool.lanes[f.lane]
	c.mu.Lock() // holds the first Close before it retires the lane
	locked := true
	defer func() {
		if locked {
			c.mu.Unlock()
		}
	}()
	firstDone := make(chan error, 1)
	go func() { firstDone <- f.pool.Close() }()
	deadline := time.Now().Add(waitBound)
	for !f.pool.closed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("first Close did not start")
		}
		runtime.Gosched()
	}
	readyAfterSecond := make(chan uint16, 1)
	go func() {
		_ = f.pool.Close()
		readyAfterSecond <- f.pool.Indexer().ReadyLanes()
	}()
	// The second Close must not return while the lane is still ready. The
	// grace period only gives a wrong early return the chance to show; a
	// correct Close passes however long it is.
	select {
	case ready := <-readyAfterSecond:
		t.Fatalf("second Close returned while the first was failing closed (ready = %#x)", ready)
	case <-time.After(50 * time.Millisecond):
	}
	c.mu.Unlock()
	locked = false
	select {
	case ready := <-readyAfterSecond:
		if ready != 0 {
			t.Fatalf("ready after second Close = %#x; want 0", ready)
		}
	case <-time.After(waitBound):
		t.Fatal("second Close did not return")
	}
	if err := <-firstDone; err != nil {
		t.Fatalf("first Close = %v", err)
	}
}

// Before the fix releaseDelta unlocked without defer: an accounting
// underflow panic on the worker left the admission lock held, so the lane
// state, Close and every admission call blocked forever.
func TestReleaseUnderflowPanicDoesNotWedgeAdmissionLock(t *testing.T) {
	f := newPoolFixture(t, 4)
	f.assignAndSnapshot(t, 0)
	resume := f.pool.pauseLaneWorker(t, f.lane)
	defer resume()
	if err := f.pool.SubmitDelta(f.delta(0, 1, ckf.BucketImage{Bucket: 0, Value: 1})); err != nil {
		t.Fatal(err)
	}
	f.pool.corruptOutstandingImagesForTest(f.lane)
	resume()
	if fault := nextFault(t, f.pool); fault.Kind != FaultWorkerFailed {
		t.Fatalf("fault = %v; want worker_failed", fault)
	}
	f.pool.waitWorkerExit(t, f.lane)

	got := make(chan LaneStatus, 1)
	go func() {
		st, _ := f.pool.LaneState(f.lane)
		got <- st
	}()
	select {
	case st := <-got:
		if st.State != AdmissionActive || st.OutstandingDeltas != 0 {
			t.Fatalf("lane state = %+v; want the released entry gone", st)
		}
	case <-time.After(waitBound):
		f.pool.lanes[f.lane].mu.Unlock() // let the cleanup Close finish
		t.Fatal("the admission lock stayed held after the worker panicked")
	}
	if ready := f.pool.Indexer().ReadyLanes(); ready != 0 {
		t.Fatalf("ready = %#x; want 0", ready)
	}
	wantIngestionError(t, f.pool.SubmitDelta(f.delta(1, 2, ckf.BucketImage{Bucket: 1, Value: 2})), ErrWorkerFailed)
	if err := f.pool.Close(); err != nil {
		t.Fatal(err)
	}
}

// Before the fix a ConfigureLane that passed its worker check just before
// the worker panicked claimed the lane after the worker had released its
// ingestors: the claim was never given back, so no later pool could ingest
// that lane.
func TestConfigureLaneRacingWorkerFailureLeavesNoClaim(t *testing.T) {
	f := newPoolFixture(t, 4)
	const lane = 5 // the single worker owns every lane
	joined := ckf.PoolID{Domain: poolTestDomain(1), Dc: 8}
	entered, release := f.pool.pauseNextConfigure()
	configured := make(chan error, 1)
	go func() { configured <- f.pool.ConfigureLane(lane, joined) }()
	select {
	case <-entered:
	case <-time.After(waitBound):
		t.Fatal("ConfigureLane did not reach its claim")
	}
	f.pool.crashLaneWorker(f.lane)
	f.pool.waitWorkerExit(t, f.lane)
	release()
	select {
	case err := <-configured:
		wantIngestionError(t, err, ErrWorkerFailed)
	case <-time.After(waitBound):
		t.Fatal("ConfigureLane did not return")
	}
	if err := f.pool.Close(); err != nil {
		t.Fatal(err)
	}
	configuredLanes := f.pool.Indexer().Manifest().ConfiguredLanes()
	for l := range ckf.LaneCount {
		if configuredLanes&(1<<l) == 0 {
			continue
		}
		ing, err := f.pool.Indexer().ClaimLane(l)
		if err != nil {
			t.Fatalf("lane %d cannot be claimed after the pool closed: %v", l, err)
		}
		ing.Release()
	}
}

// An Assign whose reply timed out stays queued. The worker must drop it as
// stale when it finally runs: applying it would record the lease's epoch in
// the ingestor and make the caller's retry of the same lease fail as stale.
func TestAssignRetriedAfterControlTimeoutIsAccepted(t *testing.T) {
	f := newPoolFixture(t, 8, func(c *PoolConfig) { c.ControlTimeout = 20 * time.Millisecond })
	resume := f.pool.pauseLaneWorker(t, f.lane)
	defer resume()
	wantIngestionError(t, f.pool.Assign(f.identity, f.lease), ErrControlTimeout)
	resume()
	if err := f.pool.Assign(f.identity, f.lease); err != nil {
		t.Fatalf("retried assign = %v; want it accepted", err)
	}
	got, err := f.pool.InstallSnapshot(f.snapshot(f.lease, 2, f.bucketCount))
	if err != nil || got.Kind != OutcomeSnapshotInstalled {
		t.Fatalf("install = %v, %v; want installed", got, err)
	}
	if ready := f.pool.Indexer().ReadyLanes(); ready != f.laneBit() {
		t.Fatalf("ready = %#x; want %#x", ready, f.laneBit())
	}
}

// Readiness is retired as soon as a new assignment is admitted, not when
// the worker gets to it: a query must not read the old generation's words
// as ready while the lane is transitioning to a new lease.
func TestAdmittedAssignRetiresReadinessBeforeTheWorkerRuns(t *testing.T) {
	f := newPoolFixture(t, 8)
	f.assignAndSnapshot(t, 3)
	resume := f.pool.pauseLaneWorker(t, f.lane)
	defer resume()
	assigned := make(chan error, 1)
	go func() { assigned <- f.pool.Assign(f.identity, f.replacementLease()) }()
	deadline := time.Now().Add(waitBound)
	for {
		st, _ := f.pool.LaneState(f.lane)
		if st.State == AdmissionTransitioning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("assign was not admitted; lane state %+v", st)
		}
		runtime.Gosched()
	}
	if ready := f.pool.Indexer().ReadyLanes(); ready != 0 {
		t.Fatalf("ready while the new assignment is queued = %#x; want 0", ready)
	}
	resume()
	if err := <-assigned; err != nil {
		t.Fatal(err)
	}
}

// A delta that deactivates the lane retires its admission generation: later
// traffic under the same lease is refused at admission until a new lease
// and snapshot, instead of queueing behind a lane that can only ignore it.
func TestDeactivatingDeltaRetiresAdmission(t *testing.T) {
	f := newPoolFixture(t, 8)
	f.assignAndSnapshot(t, 4)
	if err := f.pool.SubmitDelta(f.delta(5, 6, ckf.BucketImage{Bucket: 0, Value: 17})); err != nil {
		t.Fatal(err)
	}
	if fault := nextFault(t, f.pool); fault.Kind != FaultLaneDeactivated {
		t.Fatalf("fault = %v; want lane_deactivated", fault)
	}
	if st, _ := f.pool.LaneState(f.lane); st.State != AdmissionRetired || st.HasLease {
		t.Fatalf("lane state = %+v; want retired without lease", st)
	}
	wantIngestionError(t, f.pool.SubmitDelta(f.delta(4, 5, ckf.BucketImage{Bucket: 0, Value: 1})), ErrLaneRetired)
	lease := f.replacementLease()
	if err := f.pool.Assign(f.identity, lease); err != nil {
		t.Fatal(err)
	}
	if out, err := f.pool.InstallSnapshot(f.snapshot(lease, 9, f.bucketCount)); err != nil || out.Kind != OutcomeSnapshotInstalled {
		t.Fatalf("install = %v, %v", out, err)
	}
}

// A failed worker clears the readiness of its own lanes only: a lane routed
// to another worker stays ready and keeps answering.
func TestWorkerFailureLeavesOtherWorkersLanesReady(t *testing.T) {
	f := newPoolFixture(t, 8, func(c *PoolConfig) { c.WorkerCount = 2 })
	mine, _ := f.pool.WorkerForLane(f.lane)
	other := -1
	for lane := range ckf.LaneCount {
		if lane != f.lane && ckf.StickyWorker(uint64(f.lease.ConsumerInstance), uint8(lane), 2) != mine {
			other = lane
			break
		}
	}
	if other < 0 {
		t.Fatal("no lane routes to the other worker")
	}
	pool := ckf.PoolID{Domain: poolTestDomain(1), Dc: 50}
	if err := f.pool.ConfigureLane(other, pool); err != nil {
		t.Fatal(err)
	}
	id := f.identity
	id.Pool = pool
	lease := ckf.LaneLease{ConsumerInstance: f.lease.ConsumerInstance, PhysicalLane: uint8(other), AssignmentEpoch: 1}
	if err := f.pool.Assign(id, lease); err != nil {
		t.Fatal(err)
	}
	if out, err := f.pool.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: make([]uint64, f.bucketCount)}); err != nil || out.Kind != OutcomeSnapshotInstalled {
		t.Fatalf("install = %v, %v", out, err)
	}
	f.assignAndSnapshot(t, 0)

	f.pool.crashLaneWorker(f.lane)
	if fault := nextFault(t, f.pool); fault.Kind != FaultWorkerFailed || fault.Worker != mine {
		t.Fatalf("fault = %v; want worker %d failed", fault, mine)
	}
	f.pool.waitWorkerExit(t, f.lane)
	if got, want := f.pool.Indexer().ReadyLanes(), uint16(1<<other); got != want {
		t.Fatalf("ready = %#x; want only lane %d (%#x)", got, other, want)
	}
	if f.pool.WorkerFailed(1 - mine) {
		t.Fatalf("worker %d reported failed", 1-mine)
	}
}
