package producer

import (
	"maps"
	"math/rand/v2"
	"testing"
)

// TestU64TableMatchesBuiltinMap checks get/put/del (incl. key 0, growth and
// backward-shift deletion over wrapped probe runs) against a Go map.
func TestU64TableMatchesBuiltinMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, keySpace := range []uint64{16, 300, 1 << 40} {
		tab := newU64Table(0)
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
