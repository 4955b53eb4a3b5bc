package consumer

import (
	"errors"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Boundary tests: each pins an edge a mutation of its comparison would move.

func TestNewIndexerAcceptsTheVerificationWindowBounds(t *testing.T) {
	for _, w := range []int{1, ckf.MaxVerificationWindow} {
		ix, _ := newTestIndexer(t, 64, w, 0)
		if ix == nil {
			t.Fatalf("window %d: no indexer", w)
		}
	}
}

func TestRetireLaneReadinessClearsExactlyThatLane(t *testing.T) {
	ix, format := newTestIndexer(t, 64, 2, 0, 1, ckf.LaneCount-1)
	all := uint16(1 | 1<<1 | 1<<(ckf.LaneCount-1))
	for _, l := range []int{0, 1, ckf.LaneCount - 1} {
		ing := activateLane(t, ix, l, make([]uint64, format.BucketCount))
		defer ing.Release()
	}
	if got := ix.ReadyLanes(); got != all {
		t.Fatalf("ready = %#x; want %#x", got, all)
	}
	for _, l := range []int{-1, ckf.LaneCount, ckf.LaneCount + 16} {
		ix.RetireLaneReadiness(l) // outside 0..15: ignored
	}
	if got := ix.ReadyLanes(); got != all {
		t.Fatalf("ready after out-of-range retirements = %#x; want %#x", got, all)
	}
	ix.RetireLaneReadiness(0)
	if got, want := ix.ReadyLanes(), all&^1; got != want {
		t.Fatalf("ready after retiring lane 0 = %#x; want %#x", got, want)
	}
	ix.RetireLaneReadiness(ckf.LaneCount - 1)
	if got, want := ix.ReadyLanes(), uint16(1<<1); got != want {
		t.Fatalf("ready after retiring lane %d = %#x; want %#x", ckf.LaneCount-1, got, want)
	}
}

// A snapshot at exactly the installed sequence is a duplicate: it is
// ignored and the ready lane keeps its state.
func TestSnapshotAtTheInstalledSequenceIsIgnoredOnAReadyLane(t *testing.T) {
	ix, format := newTestIndexer(t, 64, 2, 0)
	ing := activateLane(t, ix, 0, make([]uint64, format.BucketCount)) // sequence 1
	defer ing.Release()
	pool, _ := ix.Manifest().PoolID(0)
	id := ckf.ProducerIdentity{Pool: pool, ProducerIncarnation: 1, LayoutGeneration: 1, Format: format}
	lease, _ := ing.Lease()
	words := make([]uint64, format.BucketCount)
	words[0] = 77
	out := ing.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: words})
	if want := (IngestOutcome{Kind: OutcomeIgnoredStaleOrDuplicate, InstalledSequence: 1}); out != want {
		t.Fatalf("duplicate snapshot = %v; want %v", out, want)
	}
	if ix.ReadyLanes() != 1 || ix.table.LoadImage(0, 0) != 0 {
		t.Fatalf("ready = %#x, bucket 0 = %d; want the lane untouched", ix.ReadyLanes(), ix.table.LoadImage(0, 0))
	}
}

// DC id 0 is an ordinary DC: unconfigured lanes must not count as lanes of
// DC 0 when a pool is admitted.
func TestManifestAdmitsDcZero(t *testing.T) {
	format := ixFormat(t, 8)
	domain := ixDomain(1, 2, ckf.SourceExplicit, ckf.SourceExplicit)
	var lanes [ckf.LaneCount]*ckf.PoolID
	lanes[4] = poolPtr(ckf.PoolID{Domain: domain, Dc: 0})
	lanes[9] = poolPtr(ckf.PoolID{Domain: domain, Dc: 1})
	m, err := NewManifest(1, domain, format, lanes)
	if err != nil {
		t.Fatalf("manifest with DC 0: %v", err)
	}
	if pool, ok := m.PoolID(4); !ok || pool.Dc != 0 {
		t.Fatalf("lane 4 = %v, %v; want DC 0", pool, ok)
	}
	ix, err := NewIndexer(m, ckf.DefaultPrefixSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.ConfigureLane(0, ckf.PoolID{Domain: domain, Dc: 2}); err != nil {
		t.Fatalf("configure lane 0 at runtime: %v", err)
	}
	if err := ix.ConfigureLane(ckf.LaneCount-1, ckf.PoolID{Domain: domain, Dc: 3}); err != nil {
		t.Fatalf("configure lane %d at runtime: %v", ckf.LaneCount-1, err)
	}
	if got, want := ix.Manifest().ConfiguredLanes(), uint16(1|1<<4|1<<9|1<<(ckf.LaneCount-1)); got != want {
		t.Fatalf("configured = %#x; want %#x", got, want)
	}
	for _, lane := range []int{-1, ckf.LaneCount} {
		var be *BuildError
		if err := ix.ConfigureLane(lane, ckf.PoolID{Domain: domain, Dc: 5}); !errors.As(err, &be) || be.Kind != ErrInvalidLane {
			t.Fatalf("configure lane %d = %v; want ErrInvalidLane", lane, err)
		}
	}
}

// The smallest dirty-to-applied age is valid: the watchdog's polling period
// has a floor, so a pool with a 1ns bound runs and closes.
func TestPoolRunsWithTheSmallestDirtyToAppliedAge(t *testing.T) {
	f := newPoolFixture(t, 4, func(c *PoolConfig) { c.MaxDirtyToAppliedAge = time.Nanosecond })
	f.assignAndSnapshot(t, 0)
	if err := f.pool.Close(); err != nil {
		t.Fatal(err)
	}
}

// Lanes 0 and LaneCount-1 are ordinary lanes of the pool; -1 and LaneCount
// are refused with an error, never a panic. Worker indexes likewise.
func TestPoolLaneAndWorkerRangeEdges(t *testing.T) {
	f := newPoolFixture(t, 8, func(c *PoolConfig) { c.WorkerCount = 2 })
	for _, lane := range []int{-1, ckf.LaneCount} {
		if _, ok := f.pool.WorkerForLane(lane); ok {
			t.Fatalf("WorkerForLane(%d) reported a worker", lane)
		}
		if _, ok := f.pool.LaneState(lane); ok {
			t.Fatalf("LaneState(%d) reported a lane", lane)
		}
		var be *BuildError
		if err := f.pool.ConfigureLane(lane, ckf.PoolID{Domain: poolTestDomain(1), Dc: 30}); !errors.As(err, &be) || be.Kind != ErrInvalidLane {
			t.Fatalf("ConfigureLane(%d) = %v; want ErrInvalidLane", lane, err)
		}
	}
	outside := f.delta(0, 1, ckf.BucketImage{Bucket: 0, Value: 1})
	outside.Lease.PhysicalLane = ckf.LaneCount
	wantIngestionError(t, f.pool.SubmitDelta(outside), ErrLaneNotConfigured)
	for _, w := range []int{-1, 2} {
		if f.pool.WorkerFailed(w) {
			t.Fatalf("WorkerFailed(%d) = true for a worker that does not exist", w)
		}
	}

	for i, lane := range []int{0, ckf.LaneCount - 1} {
		pool := ckf.PoolID{Domain: poolTestDomain(1), Dc: ckf.DcID(40 + i)}
		if err := f.pool.ConfigureLane(lane, pool); err != nil {
			t.Fatalf("ConfigureLane(%d): %v", lane, err)
		}
		w, ok := f.pool.WorkerForLane(lane)
		if want := ckf.StickyWorker(uint64(f.lease.ConsumerInstance), uint8(lane), 2); !ok || w != want {
			t.Fatalf("WorkerForLane(%d) = %d, %v; want %d", lane, w, ok, want)
		}
		id := f.identity
		id.Pool = pool
		lease := ckf.LaneLease{ConsumerInstance: f.lease.ConsumerInstance, PhysicalLane: uint8(lane), AssignmentEpoch: 1}
		if err := f.pool.Assign(id, lease); err != nil {
			t.Fatalf("assign lane %d: %v", lane, err)
		}
		snap := &ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: make([]uint64, f.bucketCount)}
		if out, err := f.pool.InstallSnapshot(snap); err != nil || out.Kind != OutcomeSnapshotInstalled {
			t.Fatalf("install lane %d = %v, %v", lane, out, err)
		}
		if st, ok := f.pool.LaneState(lane); !ok || st.State != AdmissionActive || st.Worker != w {
			t.Fatalf("LaneState(%d) = %+v, %v; want active on worker %d", lane, st, ok, w)
		}
	}
	if got, want := f.pool.Indexer().ReadyLanes(), uint16(1|1<<(ckf.LaneCount-1)); got != want {
		t.Fatalf("ready = %#x; want %#x", got, want)
	}
}

// The outstanding-image bound is inclusive: a lane may hold exactly the
// bound in flight; one image more retires it.
func TestOutstandingImageBoundIsInclusive(t *testing.T) {
	f := newPoolFixture(t, 8, func(c *PoolConfig) {
		c.MaxOutstandingImagesPerLane, c.OutstandingImageBoundSet = 2, true
	})
	f.assignAndSnapshot(t, 0)
	resume := f.pool.pauseLaneWorker(t, f.lane)
	defer resume()
	if err := f.pool.SubmitDelta(f.delta(0, 1, ckf.BucketImage{Bucket: 0, Value: 1}, ckf.BucketImage{Bucket: 1, Value: 2})); err != nil {
		t.Fatalf("delta of exactly the bound: %v", err)
	}
	ie := wantIngestionError(t, f.pool.SubmitDelta(f.delta(1, 2, ckf.BucketImage{Bucket: 2, Value: 3})), ErrOutstandingImageLimit)
	if ie.Requested != 3 || ie.Limit != 2 {
		t.Fatalf("error = %+v; want requested 3, limit 2", ie)
	}
}
