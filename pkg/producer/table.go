package producer

import "iter"

// u64Table is an open-addressing hash table from uint64 to uint64 with
// linear probing and backward-shift deletion. It exists because the exact
// maps are the producer's hot path: one 16-byte slot per entry keeps a
// lookup to about one cache line, and deletion leaves no tombstones, so FIFO
// churn at a constant size never rehashes or allocates (Go's builtin map
// under the same churn periodically rebuilds its tables).
type u64Table struct {
	slots   []tableEntry
	mask    uint64
	shift   uint8
	n       int // entries with a non-zero key
	hasZero bool
	zeroVal uint64
	// sparse makes the table grow at 5/8 load instead of 3/4: for tables
	// that churn at a constant size (a member's lineage under LRU eviction
	// stays at its cache's size), where at 3/4 load linear probing's runs,
	// and with them every lookup and backward-shift deletion, are about
	// twice as long. (The restore budget needs a grown table to hold more
	// than 1/budgetSlotsPerEntry of its slots: 5/16 does, 1/4 would not.)
	sparse bool
}

type tableEntry struct{ key, val uint64 }

const tableMinSlots = 8

// scratchKeepSlots is the size up to which resetFor always keeps a table
// (16 KiB of slots, cleared in well under a microsecond).
const scratchKeepSlots = 1 << 10

// newU64Table sizes the table for hint entries without growing.
func newU64Table(hint int) u64Table {
	return makeU64Table(newU64TableSize(hint))
}

// newU64TableSize is the slot count that holds hint entries within the
// load bound.
func newU64TableSize(hint int) uint64 {
	size := uint64(tableMinSlots)
	for size*3/4 < uint64(hint) {
		size <<= 1
	}
	return size
}

func makeU64Table(size uint64) u64Table {
	shift := uint8(64)
	for s := size; s > 1; s >>= 1 {
		shift--
	}
	return u64Table{slots: make([]tableEntry, size), mask: size - 1, shift: shift}
}

// home is Fibonacci hashing: it spreads sequential and random keys alike.
func (t *u64Table) home(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// touch loads k's home slot so that its cache line is in flight before a
// dependent lookup needs it; the result is meaningless but must be consumed.
func (t *u64Table) touch(k uint64) uint64 {
	if i := t.home(k); i < uint64(len(t.slots)) {
		return t.slots[i].key
	}
	return 0
}

func (t *u64Table) len() int {
	if t.hasZero {
		return t.n + 1
	}
	return t.n
}

func (t *u64Table) get(k uint64) (uint64, bool) {
	if k == 0 {
		return t.zeroVal, t.hasZero
	}
	for i := t.home(k); ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if e.key == k {
			return e.val, true
		}
		if e.key == 0 {
			return 0, false
		}
	}
}

// put inserts or overwrites k.
func (t *u64Table) put(k, v uint64) {
	if k == 0 {
		t.hasZero, t.zeroVal = true, v
		return
	}
	if t.full() {
		t.grow()
	}
	t.putFrom(t.home(k), k, v)
}

// full reports that the next put grows the table first (put checks before
// it looks for the key, so even an overwrite grows a table at its limit).
func (t *u64Table) full() bool {
	limit := uint64(len(t.slots)) * 3 / 4
	if t.sparse {
		limit = uint64(len(t.slots)) * 5 / 8
	}
	return uint64(t.n+1) > limit
}

// lookup is get that also returns k's slot, or, when k is absent, the slot
// put would insert it at (zeroSlot for key 0). A caller that reads an entry
// and then writes it passes the slot to storeAt and walks the probe run
// once.
func (t *u64Table) lookup(k uint64) (slot int, v uint64, ok bool) {
	return t.lookupFrom(int(t.home(k)), k)
}

// lookupFrom is lookup starting the walk at slot from instead of k's home.
// Every slot from k's home up to from must hold another key: from is a slot
// an earlier lookup of k returned, and since then the table has neither
// grown nor lost an entry (inserts only fill empty slots, so the run before
// from stays full, and k, if inserted meanwhile, lies at or after from).
func (t *u64Table) lookupFrom(from int, k uint64) (slot int, v uint64, ok bool) {
	if k == 0 {
		return zeroSlot, t.zeroVal, t.hasZero
	}
	for i := uint64(from) & t.mask; ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if e.key == k {
			return int(i), e.val, true
		}
		if e.key == 0 {
			return int(i), 0, false
		}
	}
}

// storeAt writes k → v at the slot lookup returned for k, the table
// unchanged since. It grows the table exactly when put would, and then
// places k by a fresh walk, so the layout is the one put leaves.
func (t *u64Table) storeAt(slot int, k, v uint64) {
	if slot == zeroSlot {
		t.hasZero, t.zeroVal = true, v
		return
	}
	if t.full() {
		t.grow()
		t.putFrom(t.home(k), k, v)
		return
	}
	e := &t.slots[slot]
	if e.key == 0 {
		t.n++
	}
	*e = tableEntry{key: k, val: v}
}

// putFrom inserts or overwrites non-zero k walking from slot i, on a table
// with room for one more entry; the slots before i in k's run must hold
// other keys (see lookupFrom).
func (t *u64Table) putFrom(i uint64, k, v uint64) {
	for ; ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if e.key == k {
			e.val = v
			return
		}
		if e.key == 0 {
			*e = tableEntry{key: k, val: v}
			t.n++
			return
		}
	}
}

func (t *u64Table) grow() {
	next := makeU64Table(uint64(len(t.slots)) * 2)
	next.hasZero, next.zeroVal, next.sparse = t.hasZero, t.zeroVal, t.sparse
	for _, e := range t.slots {
		if e.key == 0 {
			continue
		}
		for i := next.home(e.key); ; i = (i + 1) & next.mask {
			if next.slots[i].key == 0 {
				next.slots[i] = e
				next.n++
				break
			}
		}
	}
	*t = next
}

// del removes k and reports whether it was present.
func (t *u64Table) del(k uint64) bool {
	slot, _, ok := t.lookup(k)
	if ok {
		t.delAt(slot)
	}
	return ok
}

// lookupHint is lookup for a k that an earlier lookup found at slot hint:
// if the slot still holds k (entries move when others are deleted) the walk
// is skipped.
func (t *u64Table) lookupHint(hint int, k uint64) (slot int, v uint64, ok bool) {
	if k != 0 && uint(hint) < uint(len(t.slots)) && t.slots[hint].key == k {
		return hint, t.slots[hint].val, true
	}
	return t.lookup(k)
}

// zeroSlot is lookup's slot for key 0, which lives outside the slots.
const zeroSlot = -1

// delAt removes the entry lookup found; the table must not have changed
// since.
func (t *u64Table) delAt(slot int) {
	if slot == zeroSlot {
		t.hasZero, t.zeroVal = false, 0
		return
	}
	i := uint64(slot)
	// Backward shift: pull later entries of the probe run into the hole
	// unless their home lies cyclically in (hole, j].
	for j := (i + 1) & t.mask; t.slots[j].key != 0; j = (j + 1) & t.mask {
		h := t.home(t.slots[j].key)
		var stays bool
		if i < j {
			stays = h > i && h <= j
		} else {
			stays = h > i || h <= j
		}
		if !stays {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = tableEntry{}
	t.n--
}

// all iterates every entry; the table must not change meanwhile.
func (t *u64Table) all() iter.Seq2[uint64, uint64] {
	return func(yield func(uint64, uint64) bool) {
		if t.hasZero && !yield(0, t.zeroVal) {
			return
		}
		for _, e := range t.slots {
			if e.key != 0 && !yield(e.key, e.val) {
				return
			}
		}
	}
}

func (t *u64Table) clone() u64Table {
	c := *t
	c.slots = append([]tableEntry(nil), t.slots...)
	return c
}

// resetFor empties the table and sizes it for hint entries without
// growing. It keeps its slots unless they are too few, or both large and
// more than four times what hint needs (so one huge event does not make
// every later reset clear a huge table, and events of varying length do
// not reallocate).
func (t *u64Table) resetFor(hint int) {
	want := newU64TableSize(hint)
	if n := uint64(len(t.slots)); n < want || n > max(4*want, scratchKeepSlots) {
		*t = makeU64Table(want)
		return
	}
	t.reset()
}

// reset empties the table, keeping its capacity.
func (t *u64Table) reset() {
	clear(t.slots)
	t.n, t.hasZero, t.zeroVal = 0, false, 0
}
