package consumer

import (
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// A lane's deltas that wait behind another lane's snapshot install on their
// shared worker (a bootstrap, a kvrelay source resubscribing) are not late
// by their own lane's doing: however long the install takes, the lag bound
// does not retire them for it. A 4,194,304-bucket install holds a worker
// for hundreds of milliseconds on a loaded host, past the indexer's 100 ms
// bound, so without this one source's resubscriptions retired every other
// lane of its worker (and each of them then bootstrapped, blocking the
// worker again).
func TestDeltasWaitingBehindAnotherLanesInstallAreNotRetired(t *testing.T) {
	const age = 20 * time.Millisecond
	f := newPoolFixture(t, 8, func(c *PoolConfig) { c.MaxDirtyToAppliedAge = age }) // one worker for every lane
	f.assignAndSnapshot(t, 0)

	// A second pool on lane 5 of the same worker, awaiting its snapshot.
	other := ckf.PoolID{Domain: f.identity.Pool.Domain, Dc: 8}
	if err := f.pool.ConfigureLane(5, other); err != nil {
		t.Fatal(err)
	}
	id := ckf.ProducerIdentity{Pool: other, ProducerIncarnation: 3, LayoutGeneration: 1, Format: f.identity.Format}
	lease := ckf.LaneLease{ConsumerInstance: f.lease.ConsumerInstance, PhysicalLane: 5, AssignmentEpoch: 1}
	if err := f.pool.Assign(id, lease); err != nil {
		t.Fatal(err)
	}
	entered, release := f.pool.pauseNextSnapshotActivation(5)
	installed := make(chan error, 1)
	go func() {
		out, err := f.pool.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: 4, Buckets: make([]uint64, f.bucketCount)})
		if err == nil && out.Kind != OutcomeSnapshotInstalled {
			t.Errorf("install lane 5: %v", out)
		}
		installed <- err
	}()
	select {
	case <-entered:
	case <-time.After(hookWait):
		release()
		t.Fatal("the install did not start")
	}

	// The worker is installing lane 5; lane 3's delta waits behind it for
	// well past the bound.
	if err := f.pool.SubmitDelta(f.delta(0, 1, ckf.BucketImage{Bucket: 0, Value: 1})); err != nil {
		release()
		t.Fatal(err)
	}
	f.clock.advance(5 * age)
	f.pool.fenceExpiredLanes(f.clock.now())
	if fault, ok := f.pool.TryRecvFault(); ok {
		release()
		t.Fatalf("a delta waiting behind another lane's install retired its lane: %v", fault)
	}
	if err := f.pool.SubmitDelta(f.delta(1, 2, ckf.BucketImage{Bucket: 1, Value: 1})); err != nil {
		release()
		t.Fatalf("admission behind another lane's install: %v", err)
	}
	release()
	if err := <-installed; err != nil {
		t.Fatal(err)
	}
	out, err := f.pool.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 2})
	if err != nil || out.Kind != OutcomeDrainAcknowledged {
		t.Fatalf("drain lane 3: %v, %v", out, err)
	}
	if got := f.pool.Indexer().ReadyLanes(); got != f.laneBit()|1<<5 {
		t.Fatalf("ready = %#x; want lanes 3 and 5", got)
	}

	// The bound still holds for any other wait: a stalled worker retires.
	resume := f.pool.pauseLaneWorker(t, f.lane)
	defer resume()
	if err := f.pool.SubmitDelta(f.delta(2, 3, ckf.BucketImage{Bucket: 2, Value: 1})); err != nil {
		t.Fatal(err)
	}
	f.clock.advance(age)
	f.pool.fenceExpiredLanes(f.clock.now())
	if fault := nextFault(t, f.pool); fault.Kind != FaultDirtyToAppliedAgeExceeded || fault.Lane != f.lane {
		t.Fatalf("fault = %v; want dirty_to_applied_age_exceeded on lane %d", fault, f.lane)
	}
}
