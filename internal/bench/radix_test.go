package bench

import (
	"math/rand/v2"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// TestRadixDepthsEqualExactAndALinearWalk: on random prefix-closed DC sets,
// with branches off the query's chain stored beside it, the radix tree's
// walk gives the same depths as the exact map's galloping search and as a
// linear walk of the map.
func TestRadixDepthsEqualExactAndALinearWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var rs RadixScratch
	var es ExactScratch
	// Up to 120 blocks: the tree's insert walks from the root, so a chain
	// costs it O(n²) node visits (slow under -race). 100 random sets by
	// default, 400 with CKF_TEST_FULL=1 (CI).
	iters := 100
	if fullInputs() {
		iters = 400
	}
	for iter := range iters {
		n := 1 + rng.IntN(120)
		q := make([]ckf.LocalBlockHash, n)
		for i := range q {
			q[i] = ckf.LocalBlockHash(rng.Uint64())
		}
		x, r := NewExactIndex(), NewRadixIndex()
		var want [ckf.LaneCount]uint32
		for dc := range ckf.LaneCount {
			d := rng.IntN(n + 1)
			if rng.IntN(3) == 0 {
				d = n
			}
			want[dc] = uint32(d)
			if d == 0 {
				continue
			}
			// Stored as one chain or as a shorter chain then the whole
			// one (a re-offer of the shared prefix).
			if d > 1 && rng.IntN(2) == 0 {
				r.Add(dc, q[:1+rng.IntN(d-1)])
			}
			if added, xadded := r.Add(dc, q[:d]), x.Add(dc, q[:d]); xadded != d || added > d {
				t.Fatalf("iter %d dc %d: radix added %d, exact %d of %d", iter, dc, added, xadded, d)
			}
		}
		// Branches off the query's chain: same first blocks, then others.
		for range 3 {
			at := rng.IntN(n)
			other := append(append([]ckf.LocalBlockHash(nil), q[:at]...), ckf.LocalBlockHash(rng.Uint64()), ckf.LocalBlockHash(rng.Uint64()))
			dc := rng.IntN(ckf.LaneCount)
			x.Add(dc, other)
			r.Add(dc, other)
		}
		if r.Len() != x.Len() {
			t.Fatalf("iter %d: radix holds %d prefixes, exact %d blocks", iter, r.Len(), x.Len())
		}
		var got, exact [ckf.LaneCount]uint32
		r.Depths(q, &rs, &got)
		x.Depths(q, &es, &exact)
		if walk := linearExact(x, q); got != exact || got != walk {
			t.Fatalf("iter %d n=%d: radix %v, exact %v, linear walk %v", iter, n, got, exact, walk)
		}
		for dc := range ckf.LaneCount {
			if got[dc] < want[dc] {
				t.Fatalf("iter %d dc %d: depth %d below the stored %d", iter, dc, got[dc], want[dc])
			}
		}
	}
}

// TestRadixAddCountsNewMembershipsOnce: re-adding a chain or its prefix
// adds nothing; another DC's copy adds every block for that DC only.
func TestRadixAddCountsNewMembershipsOnce(t *testing.T) {
	r := NewRadixIndex()
	q := []ckf.LocalBlockHash{1 << 63, 2, 3, 4}
	if got := r.Add(0, q); got != 4 {
		t.Fatalf("first add: %d new", got)
	}
	if got := r.Add(0, q[:2]); got != 0 {
		t.Fatalf("prefix re-add: %d new", got)
	}
	if got := r.Add(5, q[:3]); got != 3 {
		t.Fatalf("other DC: %d new", got)
	}
	if r.Len() != 4 {
		t.Fatalf("%d prefixes", r.Len())
	}
	var d [ckf.LaneCount]uint32
	r.Depths(append(q, 9), &RadixScratch{}, &d)
	if d[0] != 4 || d[5] != 3 || d[1] != 0 {
		t.Fatalf("depths %v", d)
	}
}

// TestRadixDepthsDoNotAllocate: a query allocates nothing once its scratch
// has grown.
func TestRadixDepthsDoNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	r := NewRadixIndex()
	q := make([]ckf.LocalBlockHash, 128)
	for i := range q {
		q[i] = ckf.LocalBlockHash(rng.Uint64())
	}
	for dc := range ckf.LaneCount {
		r.Add(dc, q[:1+rng.IntN(len(q))])
	}
	var s RadixScratch
	var d [ckf.LaneCount]uint32
	r.Depths(q, &s, &d)
	if allocs := testing.AllocsPerRun(100, func() { r.Depths(q, &s, &d) }); allocs != 0 {
		t.Fatalf("%.1f allocations per query", allocs)
	}
}
