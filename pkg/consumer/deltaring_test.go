package consumer

import (
	"slices"
	"testing"
)

// ringIDs lists the ring's ids from head to tail.
func ringIDs(r *deltaRing) []uint64 {
	var ids []uint64
	for i := range r.n {
		ids = append(ids, r.at(i).id)
	}
	return ids
}

// The outstanding-delta ring is a FIFO that also removes its tail (a failed
// enqueue) and, on teardown, any entry, keeping the others in order across
// wrap-around and growth.
func TestDeltaRingRemovesAnyEntryInOrder(t *testing.T) {
	var r deltaRing
	if _, ok := r.remove(1); ok {
		t.Fatal("remove from an empty ring succeeded")
	}
	// Wrap the head around a grown buffer: push 10, pop 6, push 8 more.
	id := uint64(0)
	push := func(n int) {
		for range n {
			id++
			r.push(outstandingDelta{id: id, images: id * 10})
		}
	}
	push(10)
	for want := uint64(1); want <= 6; want++ {
		if images, ok := r.remove(want); !ok || images != want*10 {
			t.Fatalf("pop head %d = %d, %v", want, images, ok)
		}
	}
	push(8)
	if got, want := ringIDs(&r), []uint64{7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}; !slices.Equal(got, want) {
		t.Fatalf("ring = %v; want %v", got, want)
	}
	if f, ok := r.front(); !ok || f.id != 7 {
		t.Fatalf("front = %+v, %v; want id 7", f, ok)
	}
	steps := []struct {
		id   uint64
		want []uint64
	}{
		{18, []uint64{7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}}, // tail
		{8, []uint64{7, 9, 10, 11, 12, 13, 14, 15, 16, 17}},     // second
		{16, []uint64{7, 9, 10, 11, 12, 13, 14, 15, 17}},        // second to last
		{12, []uint64{7, 9, 10, 11, 13, 14, 15, 17}},            // middle
		{7, []uint64{9, 10, 11, 13, 14, 15, 17}},                // head
	}
	for _, s := range steps {
		images, ok := r.remove(s.id)
		if !ok || images != s.id*10 {
			t.Fatalf("remove %d = %d, %v; want %d", s.id, images, ok, s.id*10)
		}
		if got := ringIDs(&r); !slices.Equal(got, s.want) {
			t.Fatalf("after removing %d: ring = %v; want %v", s.id, got, s.want)
		}
	}
	for _, absent := range []uint64{7, 12, 99} {
		if _, ok := r.remove(absent); ok {
			t.Fatalf("removed absent id %d", absent)
		}
	}
	if got := ringIDs(&r); !slices.Equal(got, []uint64{9, 10, 11, 13, 14, 15, 17}) {
		t.Fatalf("absent removals changed the ring: %v", got)
	}
}

// An id removed from the tail is gone: removing it again fails and leaves
// the ring as it was, even though its old slot still holds it.
func TestDeltaRingRemovedTailIsGone(t *testing.T) {
	var r deltaRing
	for id := uint64(1); id <= 3; id++ {
		r.push(outstandingDelta{id: id, images: id})
	}
	if _, ok := r.remove(3); !ok {
		t.Fatal("remove tail 3 failed")
	}
	if _, ok := r.remove(3); ok {
		t.Fatal("tail 3 removed twice")
	}
	if got := ringIDs(&r); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("ring = %v; want [1 2]", got)
	}
}

// Removing a middle entry from a full, wrapped ring keeps every other entry,
// the head included.
func TestDeltaRingRemoveFromFullWrappedRing(t *testing.T) {
	var r deltaRing
	for id := uint64(1); id <= 8; id++ { // fills the initial 8 slots
		r.push(outstandingDelta{id: id, images: id})
	}
	for id := uint64(1); id <= 3; id++ {
		if _, ok := r.remove(id); !ok {
			t.Fatalf("pop head %d failed", id)
		}
	}
	for id := uint64(9); id <= 11; id++ { // wraps; the ring is full again
		r.push(outstandingDelta{id: id, images: id})
	}
	if r.n != len(r.buf) {
		t.Fatalf("ring holds %d of %d slots; the test needs it full", r.n, len(r.buf))
	}
	if images, ok := r.remove(7); !ok || images != 7 {
		t.Fatalf("remove 7 = %d, %v", images, ok)
	}
	if got, want := ringIDs(&r), []uint64{4, 5, 6, 8, 9, 10, 11}; !slices.Equal(got, want) {
		t.Fatalf("ring = %v; want %v", got, want)
	}
	if f, ok := r.front(); !ok || f.id != 4 {
		t.Fatalf("front = %+v, %v; want id 4", f, ok)
	}
}
