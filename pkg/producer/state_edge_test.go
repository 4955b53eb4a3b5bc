package producer

import (
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
