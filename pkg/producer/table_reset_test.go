package producer

import "testing"

// TestScratchTableResetKeepsWhatFits pins resetFor's sizing rule: a
// table at least the hint's size and at most four times it (or the keep
// size) is cleared in place, anything else is replaced by one of the
// hint's size. Either way the table comes back empty.
func TestScratchTableResetKeepsWhatFits(t *testing.T) {
	const hint = 1000 // newU64TableSize: 2048 slots
	want := newU64TableSize(hint)
	if want != 2048 {
		t.Fatalf("newU64TableSize(%d) = %d, want 2048", hint, want)
	}
	for _, tc := range []struct {
		name string
		size uint64
		kept bool
	}{
		{"smaller than the hint needs", want / 2, false},
		{"exactly the hint's size", want, true},
		{"four times the hint's size", 4 * want, true},
		{"more than four times", 8 * want, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl := makeU64Table(tc.size)
			for k := uint64(1); k <= 64; k++ {
				tbl.put(k, k)
			}
			before := &tbl.slots[0]
			tbl.resetFor(hint)
			if kept := &tbl.slots[0] == before; kept != tc.kept {
				t.Fatalf("table of %d slots for hint %d: kept = %v, want %v", tc.size, hint, kept, tc.kept)
			}
			wantLen := tc.size
			if !tc.kept {
				wantLen = want
			}
			if got := uint64(len(tbl.slots)); got != wantLen {
				t.Fatalf("%d slots after the reset, want %d", got, wantLen)
			}
			if tbl.len() != 0 {
				t.Fatalf("%d entries after the reset, want none", tbl.len())
			}
			if _, ok := tbl.get(7); ok {
				t.Fatal("a key put before the reset is still found")
			}
			tbl.put(7, 70)
			if v, ok := tbl.get(7); !ok || v != 70 {
				t.Fatalf("get(7) after the reset and a put = %d, %v", v, ok)
			}
		})
	}
	// Up to the keep size a table is kept even past four times the hint.
	small := makeU64Table(scratchKeepSlots)
	before := &small.slots[0]
	small.resetFor(1)
	if &small.slots[0] != before {
		t.Fatalf("a table of %d slots (the keep size) was replaced for hint 1", scratchKeepSlots)
	}
}
