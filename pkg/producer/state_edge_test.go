package producer

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// TestAStoredEventWithoutBlocksCreatesNoMember: in both modes an empty
// stored event (for a new member or a known one) changes no ownership and
// lists no member that owns nothing.
func TestAStoredEventWithoutBlocksCreatesNoMember(t *testing.T) {
	for _, cfg := range []ckf.Config{verbatimConfig(64), ckf.NewConfig(64)} {
		s := mustState(t, cfg)
		s.ApplyEvent(storedEv(1, 0, 5))
		for _, ev := range []*routerevent.RouterEvent{storedEv(2, 0), storedEv(1, 0), chainEv(3, 1, nil)} {
			if out := s.ApplyEvent(ev); out.FirstError != nil {
				t.Fatalf("%s: %v", cfg.Mode, out.FirstError)
			}
		}
		if got := s.Members(); !slices.Equal(got, []Member{{WorkerID: 1}}) {
			t.Fatalf("%s: members %v", cfg.Mode, got)
		}
		if st := s.Stats(); st.Members != 1 || st.Contributions != 1 {
			t.Fatalf("%s: %v", cfg.Mode, st)
		}
		if err := checkInvariants(s); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRemovalsAfterTheLastOwnedBlockAreUnknown: once a removed event has
// taken a member's last block, every later hash of the event is an unknown
// removal, in the same 16-hash chunk and in later ones.
func TestRemovalsAfterTheLastOwnedBlockAreUnknown(t *testing.T) {
	for _, cfg := range []ckf.Config{verbatimConfig(64), ckf.NewConfig(64)} {
		for _, tail := range []int{0, 1, 5, 14, 15, 16, 40} {
			s := mustState(t, cfg)
			s.ApplyEvent(storedEv(1, 0, 7, 8))
			s.ApplyEvent(storedEv(2, 0, 8))
			hs := []uint64{8, 7}
			for i := range tail {
				hs = append(hs, 100+uint64(i))
			}
			out := s.ApplyEvent(removedEv(1, 0, hs...))
			if out.FirstError != nil || out.UnknownRemovals != uint64(tail) || s.Stats().UnknownRemovals != uint64(tail) {
				t.Fatalf("%s tail %d: outcome %+v, stats %v", cfg.Mode, tail, out, s.Stats())
			}
			if s.MemberBlockCount(Member{WorkerID: 1}) != 0 || !mustOwn(s, 8) || mustOwn(s, 7) {
				t.Fatalf("%s tail %d: ownership after the removal", cfg.Mode, tail)
			}
			// A removal for a member that owns nothing counts every hash.
			if out := s.ApplyEvent(removedEv(9, 0, hs...)); out.UnknownRemovals != uint64(len(hs)) {
				t.Fatalf("%s: removal by a stranger: %+v", cfg.Mode, out)
			}
		}
	}
}

// TestOwnershipLookupsSurviveChurn: under FIFO churn at a constant size
// near the tables' load limit (long probe runs that wrap around the end of
// the slots), every block still owned is found by Ownership with its
// refcount and by a removal, and every removed block is gone: deletion
// must keep every remaining entry reachable from its home slot.
func TestOwnershipLookupsSurviveChurn(t *testing.T) {
	cfg := verbatimConfig(1 << 14)
	s := mustState(t, cfg)
	r := rand.New(rand.NewPCG(7, 8))
	const live = 3000 // 3000 of 4096 member slots, and of the owner table's
	var fifo []uint64
	owned := map[uint64]uint32{}
	check := func(step int) {
		for h, n := range owned {
			if o, ok := s.Ownership(h); !ok || o.Refcount != n {
				t.Fatalf("step %d: hash %#x ownership %+v %v, want refcount %d", step, h, o, ok, n)
			}
		}
		if s.UniqueBlocks() != len(owned) {
			t.Fatalf("step %d: %d unique blocks, want %d", step, s.UniqueBlocks(), len(owned))
		}
	}
	for step := range 20000 {
		h := r.Uint64()
		if _, dup := owned[h]; dup {
			continue
		}
		// Member 1 owns every live block, member 2 every third one.
		s.ApplyEvent(storedEv(1, 0, h))
		owned[h] = 1
		if step%3 == 0 {
			s.ApplyEvent(storedEv(2, 0, h))
			owned[h] = 2
		}
		fifo = append(fifo, h)
		if len(fifo) > live {
			old := fifo[0]
			fifo = fifo[1:]
			for _, w := range []uint64{1, 2} {
				out := s.ApplyEvent(removedEv(w, 0, old))
				if want := uint64(0); w == 2 && owned[old] == 1 {
					want = 1
					if out.UnknownRemovals != want {
						t.Fatalf("step %d: removal of %#x by worker 2: %+v", step, old, out)
					}
				} else if out.UnknownRemovals != 0 || out.FirstError != nil {
					t.Fatalf("step %d: removal of %#x by worker %d: %+v", step, old, w, out)
				}
			}
			delete(owned, old)
			if _, ok := s.Ownership(old); ok {
				t.Fatalf("step %d: removed hash %#x still owned", step, old)
			}
		}
		if step%500 == 0 {
			check(step)
		}
	}
	check(-1)
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

// TestACutWithoutChangesStillClosesTheWindow: a window holding only events
// that changed no bucket publishes nothing when cut, and the cut still
// resets the pending count, so the next window starts from zero events.
func TestACutWithoutChangesStillClosesTheWindow(t *testing.T) {
	cfg := verbatimConfig(64)
	cfg.PublishEveryNEvents = 3
	s := mustState(t, cfg)
	s.ApplyEvent(removedEv(1, 0, 5)) // unknown: no bucket changes
	if !s.HasPendingPublication() {
		t.Fatal("an applied event left no pending publication")
	}
	if b := s.Flush(); !b.Empty() {
		t.Fatalf("published %v", b.Images)
	}
	if s.HasPendingPublication() || s.Stats().PendingEvents != 0 {
		t.Fatalf("the cut left the window open: %v", s.Stats())
	}
	// Two more events: below the cadence of three, so no boundary.
	for i := range 2 {
		if out := s.ApplyEvent(storedEv(1, 0, 7+uint64(i))); out.PublicationBoundary {
			t.Fatalf("event %d after the cut reached the boundary", i+1)
		}
	}
	if out := s.ApplyEvent(storedEv(1, 0, 9)); !out.PublicationBoundary || len(out.Publication.Images) == 0 {
		t.Fatalf("third event after the cut: %+v", out)
	}
}

// TestBatchCloneOwnsItsImages: a clone keeps the published images after
// the state reuses its buffer for the next window; an empty batch clones
// to an empty one.
func TestBatchCloneOwnsItsImages(t *testing.T) {
	cfg := verbatimConfig(64)
	cfg.PublishEveryNEvents = 10
	s := mustState(t, cfg)
	s.ApplyEvent(storedEv(1, 0, 5, 6))
	b := s.Flush()
	want := slices.Clone(b.Images)
	c := b.Clone()
	s.ApplyEvent(removedEv(1, 0, 5, 6))
	s.Flush()
	if len(want) == 0 || !slices.Equal(c.Images, want) {
		t.Fatalf("clone %v, published %v", c.Images, want)
	}
	if e := (Batch{}).Clone(); !e.Empty() {
		t.Fatalf("clone of an empty batch: %v", e.Images)
	}
}
