package producer

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// TestU64TableMatchesBuiltinMap checks get/put/del (incl. key 0, growth and
// backward-shift deletion over wrapped probe runs) against a Go map.
func TestU64TableMatchesBuiltinMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i, keySpace := range []uint64{16, 300, 1 << 40, 300, 1 << 40} {
		tab := newU64Table(0)
		tab.sparse = i >= 3
		ref := map[uint64]uint64{}
		for i := range 200000 {
			k := r.Uint64N(keySpace)
			switch r.IntN(3) {
			case 0, 1:
				tab.put(k, uint64(i))
				ref[k] = uint64(i)
			case 2:
				_, had := ref[k]
				if tab.del(k) != had {
					t.Fatalf("del(%d) presence mismatch", k)
				}
				delete(ref, k)
			}
			want, present := ref[k]
			if v, ok := tab.get(k); ok != present || v != want {
				t.Fatalf("get(%d) = %d,%v want %d,%v", k, v, ok, want, present)
			}
		}
		if tab.len() != len(ref) {
			t.Fatalf("len %d want %d", tab.len(), len(ref))
		}
		got := maps.Collect(tab.all())
		if !maps.Equal(got, ref) {
			t.Fatalf("contents differ (key space %d)", keySpace)
		}
		c := tab.clone()
		c.put(12345, 1)
		if _, ok := tab.get(12345); ok && ref[12345] != 1 {
			t.Fatal("clone shares storage")
		}
		tab.reset()
		if tab.len() != 0 {
			t.Fatal("reset kept entries")
		}
	}
}

// TestLineageTablesGrowAtFiveEighthsLoad: a member's lineage grows once it
// would pass 5/8 of its slots (the owner table at 3/4), before and after a
// checkpoint round trip.
func TestLineageTablesGrowAtFiveEighthsLoad(t *testing.T) {
	cfg := ckf.NewConfig(1 << 10)
	s := mustState(t, cfg)
	s.ApplyEvent(storedEv(1, 0, 1, 2, 3, 4, 5))
	if c := s.members[Member{WorkerID: 1}].lineage.capacity(); c != tableMinSlots {
		t.Fatalf("5 blocks in %d slots, want %d", c, tableMinSlots)
	}
	s.ApplyEvent(storedEv(2, 0, 1, 2, 3, 4, 5, 6))
	if c := s.members[Member{WorkerID: 2}].lineage.capacity(); c != 2*tableMinSlots {
		t.Fatalf("6 blocks in %d slots, want %d", c, 2*tableMinSlots)
	}
	s.Flush()
	got := roundTrip(t, s, cfg)
	got.ApplyEvent(storedEv(1, 0, 6))
	if c := got.members[Member{WorkerID: 1}].lineage.capacity(); c != 2*tableMinSlots {
		t.Fatalf("restored: 6 blocks in %d slots, want %d", c, 2*tableMinSlots)
	}
	if err := checkInvariants(got); err != nil {
		t.Fatal(err)
	}
}
