package ckf

// Packed bucket operations (spec §4.1): four 16-bit slots in one uint64,
// slot s at bits 16s..16s+15, 0 meaning empty.

const (
	lanesLo uint64 = 0x0001_0001_0001_0001
	lanesHi uint64 = 0x8000_8000_8000_8000
)

// Slot returns slot s of w.
func Slot(w uint64, s int) uint16 { return uint16(w >> (16 * uint(s))) }

// WithSlot returns w with slot s set to fp.
func WithSlot(w uint64, s int, fp uint16) uint64 {
	shift := 16 * uint(s)
	return w&^(0xFFFF<<shift) | uint64(fp)<<shift
}

// FirstSlot returns the lowest slot holding fp, or -1.
func FirstSlot(w uint64, fp uint16) int {
	for s := range 4 {
		if Slot(w, s) == fp {
			return s
		}
	}
	return -1
}

// FirstEmpty returns the lowest empty slot, or -1.
func FirstEmpty(w uint64) int { return FirstSlot(w, 0) }

// Contains reports whether a non-zero fp occupies any slot, branch-free.
func Contains(w uint64, fp uint16) bool {
	d := w ^ (uint64(fp) * lanesLo)
	return (d-lanesLo)&^d&lanesHi != 0
}

// OccupiedSlots counts non-empty slots.
func OccupiedSlots(w uint64) int {
	n := 0
	for s := range 4 {
		if Slot(w, s) != 0 {
			n++
		}
	}
	return n
}
