package consumer

import (
	"testing"

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
