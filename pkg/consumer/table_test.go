package consumer

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// laneFiller inserts full hashes into per-lane bucket images greedily: the
// first empty slot of bucket A, else of bucket B, else the hash is skipped.
// It is a test-only stand-in for the producer (no relocation).
type laneFiller struct {
	addressing ckf.Addressing
	lanes      [ckf.LaneCount][]uint64
}

func newLaneFiller(t testing.TB, bucketCount, seed uint64, lanes int) *laneFiller {
	t.Helper()
	a, err := ckf.NewAddressing(bucketCount, seed)
	if err != nil {
		t.Fatal(err)
	}
	f := &laneFiller{addressing: a}
	for l := range lanes {
		f.lanes[l] = make([]uint64, bucketCount)
	}
	return f
}

func (f *laneFiller) insert(lane int, hash uint64) bool {
	p := f.addressing.Prepare(hash)
	words := f.lanes[lane]
	for _, b := range [2]uint32{p.BucketA, p.BucketB} {
		if s := ckf.FirstEmpty(words[b]); s >= 0 {
			words[b] = ckf.WithSlot(words[b], s, p.Fingerprint)
			return true
		}
	}
	return false
}

func TestTableProbeMatchesPerLaneContains(t *testing.T) {
	const buckets = 64
	tb, err := newTable(buckets)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range tb.words {
		// Small fingerprint alphabet so probes hit often; some slots empty.
		var w uint64
		for s := range 4 {
			w = ckf.WithSlot(w, s, uint16(rng.IntN(6)))
		}
		tb.words[i].Store(w)
	}
	for range 20000 {
		p := ckf.Probe{Fingerprint: uint16(1 + rng.IntN(6)), BucketA: uint32(rng.IntN(buckets)), BucketB: uint32(rng.IntN(buckets))}
		var want uint16
		for l := range ckf.LaneCount {
			if ckf.Contains(tb.LoadImage(uint64(p.BucketA), l), p.Fingerprint) || ckf.Contains(tb.LoadImage(uint64(p.BucketB), l), p.Fingerprint) {
				want |= 1 << l
			}
		}
		if got := tb.Probe(p); got != want {
			t.Fatalf("Probe(%+v) = %#x, want %#x", p, got, want)
		}
	}
}

func TestTableStoreLoadAndClearLane(t *testing.T) {
	tb, err := newTable(8)
	if err != nil {
		t.Fatal(err)
	}
	for b := range uint64(8) {
		for l := range ckf.LaneCount {
			tb.StoreImage(b, l, b<<8|uint64(l)+1)
		}
	}
	// Lanes 0 and 15 are the edges of each row.
	cleared := map[int]bool{0: true, 5: true, 15: true}
	for l := range cleared {
		tb.ClearLane(l)
	}
	for b := range uint64(8) {
		for l := range ckf.LaneCount {
			want := b<<8 | uint64(l) + 1
			if cleared[l] {
				want = 0
			}
			if got := tb.LoadImage(b, l); got != want {
				t.Fatalf("bucket %d lane %d = %#x, want %#x", b, l, got, want)
			}
			// Bucket-major layout: a bucket's lanes are contiguous.
			if got := tb.words[b*ckf.LaneCount+uint64(l)].Load(); got != want {
				t.Fatalf("layout: word %d = %#x, want %#x", b*ckf.LaneCount+uint64(l), got, want)
			}
		}
	}
}

func TestTableSizingOverflow(t *testing.T) {
	for _, n := range []uint64{0, maxTableBuckets + 1, 1 << 41, math.MaxInt/128 + 1, math.MaxUint64} {
		_, err := newTable(n)
		if !errors.Is(err, ckf.ErrCapacityOverflow) || !errors.Is(err, ErrCkf) {
			t.Fatalf("newTable(%d) = %v, want ckf.ErrCapacityOverflow", n, err)
		}
	}
}

func TestTableProbeDoesNotAllocate(t *testing.T) {
	tb, err := newTable(16)
	if err != nil {
		t.Fatal(err)
	}
	var sink uint16
	allocs := testing.AllocsPerRun(100, func() {
		sink ^= tb.Probe(ckf.Probe{Fingerprint: 7, BucketA: 3, BucketB: 9})
	})
	if allocs != 0 {
		t.Fatalf("Probe allocates %.1f times", allocs)
	}
	_ = sink
}

// TestPrefetchLanesReachesEveryRowEdge: prefetching the first and last rows
// of a table, for one half of the lanes or both, neither faults nor changes
// a word (a prefetch past the mapping would crash the test binary).
func TestPrefetchLanesReachesEveryRowEdge(t *testing.T) {
	tb, err := newTable(64)
	if err != nil {
		t.Fatal(err)
	}
	tb.StoreImage(63, 15, 0x0001_0002_0003_0004)
	for _, need := range []uint16{0x0001, 0x8000, ckf.LaneMask} {
		tb.prefetchLanes(ckf.Probe{Fingerprint: 1, BucketA: 0, BucketB: 63}, need)
		tb.prefetchLanes(ckf.Probe{Fingerprint: 1, BucketA: 63, BucketB: 0}, need)
	}
	if got := tb.LoadImage(63, 15); got != 0x0001_0002_0003_0004 {
		t.Fatalf("word changed to %#x", got)
	}
	if got := tb.probeLanes(ckf.Probe{Fingerprint: 3, BucketA: 0, BucketB: 63}, 0x8000); got != 0x8000 {
		t.Fatalf("probe after prefetch %#x, want lane 15", got)
	}
}

// TestProbeLanesAnswersExactlyTheLanesItRead: for every need (sparse,
// one half, both halves), probeLanes agrees with the whole-row Probe on
// lanesRead(need), which covers need, and leaves every other bit zero, so
// the query path's per-position memo never mistakes an unread lane for a
// miss.
func TestProbeLanesAnswersExactlyTheLanesItRead(t *testing.T) {
	tb, err := newTable(8)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(21, 22))
	for iter := range 20000 {
		for b := range uint64(8) {
			for l := range ckf.LaneCount {
				var w uint64
				for s := range 4 {
					if rng.IntN(3) == 0 {
						w |= uint64(1+rng.IntN(3)) << (16 * s)
					}
				}
				tb.StoreImage(b, l, w)
			}
		}
		p := ckf.Probe{Fingerprint: uint16(1 + rng.IntN(3)), BucketA: uint32(rng.IntN(8)), BucketB: uint32(rng.IntN(8))}
		need := uint16(rng.Uint32())
		if iter%3 == 0 {
			need &= uint16(rng.Uint32()) & uint16(rng.Uint32()>>16) // sparse: two independent masks
		}
		read := lanesRead(need)
		got, whole := tb.probeLanes(p, need), tb.Probe(p)
		if need&^read != 0 || got&^read != 0 || got&read != whole&read {
			t.Fatalf("need %016b: read %016b, probeLanes %016b, Probe %016b", need, read, got, whole)
		}
	}
}
