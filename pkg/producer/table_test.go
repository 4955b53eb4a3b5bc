package producer

import (
	"maps"
	"math/rand/v2"
	"slices"
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

// TestSlotAccessLeavesTheLayoutPutAndDelLeave: the slot-keeping accesses
// the hot paths use (lookup then storeAt or delAt; lookups of a batch of
// keys first, then their inserts walking on from the recorded slots; a
// batch of deletes from hinted slots while earlier deletes shift entries)
// leave every slot, the count and the zero entry exactly as get, put and
// del do on a twin table, across growth at both load limits.
func TestSlotAccessLeavesTheLayoutPutAndDelLeave(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, sparse := range []bool{false, true} {
		for _, keySpace := range []uint64{24, 400, 1 << 40} {
			a, b := newU64Table(0), newU64Table(0)
			a.sparse, b.sparse = sparse, sparse
			same := func(op string) {
				t.Helper()
				if !slices.Equal(a.slots, b.slots) || a.n != b.n || a.hasZero != b.hasZero || a.zeroVal != b.zeroVal {
					t.Fatalf("sparse=%v keys=%d: layouts differ after %s", sparse, keySpace, op)
				}
			}
			// Half the keys are recent ones, so overwrites and deletes of
			// present keys happen at every load, the limits included.
			var recent []uint64
			pick := func() uint64 {
				if len(recent) > 0 && r.IntN(2) == 0 {
					return recent[r.IntN(len(recent))]
				}
				k := r.Uint64N(keySpace)
				if len(recent) < 64 {
					recent = append(recent, k)
				} else {
					recent[r.IntN(64)] = k
				}
				return k
			}
			for i := range 6000 {
				k := pick()
				switch r.IntN(4) {
				case 0: // read-modify-write of one key
					v, _ := a.get(k)
					a.put(k, v+uint64(i))
					slot, w, _ := b.lookup(k)
					b.storeAt(slot, k, w+uint64(i))
					same("storeAt")
				case 1: // delete one key
					a.del(k)
					if slot, _, ok := b.lookup(k); ok {
						b.delAt(slot)
					}
					same("delAt")
				case 2: // a batch of distinct absent keys: look all up, then insert
					keys := distinctKeys(pick, 1+r.IntN(12), func(k uint64) bool { _, ok := b.get(k); return !ok })
					slots := make([]int, len(keys))
					for j, k := range keys {
						slots[j], _, _ = b.lookup(k)
					}
					size := len(b.slots)
					for j, k := range keys {
						a.put(k, uint64(i+j))
						slot, _, _ := b.lookup(k)
						if len(b.slots) == size {
							slot, _, _ = b.lookupFrom(slots[j], k)
						}
						b.storeAt(slot, k, uint64(i+j))
						same("lookupFrom")
					}
				case 3: // a batch of deletes from hinted slots
					keys := distinctKeys(pick, 1+r.IntN(12), func(uint64) bool { return true })
					hints := make([]int, len(keys))
					for j, k := range keys {
						hints[j] = noSlot
						if slot, _, ok := b.lookup(k); ok {
							hints[j] = slot
						}
					}
					for j, k := range keys {
						a.del(k)
						if slot, _, ok := b.lookupHint(hints[j], k); ok {
							b.delAt(slot)
						}
						same("lookupHint")
					}
				}
			}
		}
	}
}

func distinctKeys(pick func() uint64, n int, keep func(uint64) bool) []uint64 {
	var keys []uint64
	for range 4 * n {
		if k := pick(); keep(k) && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		if len(keys) == n {
			break
		}
	}
	return keys
}

// TestLookupHintAnswersAsLookupForAnyHint: the hint only saves a walk.
// For every key (0, present, absent) and every hint (no slot, the zero
// slot, each slot, empty or holding another key, one past the end),
// lookupHint returns exactly what lookup does.
func TestLookupHintAnswersAsLookupForAnyHint(t *testing.T) {
	for _, withZero := range []bool{false, true} {
		tbl := newU64Table(0)
		for k := uint64(1); k <= 5; k++ {
			tbl.put(k<<40, k)
		}
		if withZero {
			tbl.put(0, 99)
		}
		keys := []uint64{0, 2 << 40, 5 << 40, 7, 1 << 63}
		for _, k := range keys {
			ws, wv, wok := tbl.lookup(k)
			for hint := noSlot; hint <= len(tbl.slots); hint++ {
				if s, v, ok := tbl.lookupHint(hint, k); s != ws || v != wv || ok != wok {
					t.Fatalf("zero entry %v: lookupHint(%d, %#x) = (%d, %d, %v), lookup = (%d, %d, %v)",
						withZero, hint, k, s, v, ok, ws, wv, wok)
				}
			}
		}
	}
}
