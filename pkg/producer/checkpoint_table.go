package producer

import "iter"

// Table operations only the checkpoint needs.

// capacity is the table's slot count; a pooled table restored from a
// checkpoint has no slots yet but knows its capacity.
func (t *u64Table) capacity() uint64 {
	if t.slots == nil {
		return t.mask + 1
	}
	return uint64(len(t.slots))
}

// lowestEmpty returns the lowest-index empty slot. The load limit (at most
// 3/4 of the slots used) guarantees one; a full table would yield the last
// slot, which still makes layoutOrder visit every slot once.
func (t *u64Table) lowestEmpty() uint64 {
	for i := range t.slots {
		if t.slots[i].key == 0 {
			return uint64(i)
		}
	}
	return t.mask
}

// layoutOrder iterates the non-zero keys in slot order, cyclically from
// just after the lowest empty slot. Every probe run then comes whole and in
// order, so inserting the keys in this order into an empty table of the
// same capacity reproduces the layout (see place).
func (t *u64Table) layoutOrder() iter.Seq2[uint64, uint64] {
	return func(yield func(uint64, uint64) bool) {
		if t.n == 0 {
			return
		}
		start := t.lowestEmpty() + 1
		for j := range uint64(len(t.slots)) {
			e := &t.slots[(start+j)&t.mask]
			if e.key != 0 && !yield(e.key, e.val) {
				return
			}
		}
	}
}

// place inserts non-zero k into the first free slot of its probe run and
// returns the slot, without growing; dup reports that k was already
// present (nothing changed). The caller keeps the load below the limit.
func (t *u64Table) place(k, v uint64) (slot uint64, dup bool) {
	for i := t.home(k); ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if e.key == k {
			return i, true
		}
		if e.key == 0 {
			*e = tableEntry{key: k, val: v}
			t.n++
			return i, false
		}
	}
}

// entry returns a pointer to k's value for an in-place update (put could
// grow the table), or nil.
func (t *u64Table) entry(k uint64) *uint64 {
	if k == 0 {
		if t.hasZero {
			return &t.zeroVal
		}
		return nil
	}
	for i := t.home(k); ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if e.key == k {
			return &e.val
		}
		if e.key == 0 {
			return nil
		}
	}
}
