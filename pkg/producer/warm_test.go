package producer

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// TestWarmedEventsMatchBlockByBlockApplication pins that the warmed-up
// multi-block paths (chunks of warmBatch, a member emptied mid-event,
// duplicate and unknown hashes, relocation and capacity failures) behave
// exactly like the same blocks applied one event at a time. Verbatim stores
// and removals in both modes are per-block operations, so the two states
// must agree on outcomes, exact ownership, lane and window.
func TestWarmedEventsMatchBlockByBlockApplication(t *testing.T) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		// The scenario's coverage is checked over all seeds of a mode.
		sawDrop, sawLong, sawFailure := false, false, false
		for seed := range uint64(12) {
			t.Run(fmt.Sprintf("%s/seed=%d", mode, seed), func(t *testing.T) {
				// 32 buckets: a few hundred hashes force relocations and
				// capacity failures.
				cfg := ckf.NewConfig(64)
				cfg.Mode = mode
				cfg.PublishEveryNEvents = 1 << 40
				batched, single := mustState(t, cfg), mustState(t, cfg)
				r := rand.New(rand.NewPCG(seed, 7))
				for step := range 400 {
					worker := r.Uint64N(4)
					n := 1 + r.IntN(3*warmBatch)
					sawLong = sawLong || n > warmBatch
					hashes := make([]uint64, n)
					for i := range hashes {
						hashes[i] = r.Uint64N(400)
					}
					switch op := r.IntN(10); {
					case op < 5:
						ev := storedEv(worker, 0, hashes...)
						got := batched.ApplyEvent(ev)
						if mode == ckf.HashModeCanonical {
							// A canonical store is one event-level operation:
							// apply it identically to both.
							want := single.ApplyEvent(ev)
							compareOutcomes(t, step, got, want.FirstError, want.UnknownRemovals)
							break
						}
						var first error
						for _, h := range hashes {
							if out := single.ApplyEvent(storedEv(worker, 0, h)); out.FirstError != nil && first == nil {
								first = out.FirstError
							}
						}
						sawFailure = sawFailure || first != nil
						compareOutcomes(t, step, got, first, 0)
					case op < 9:
						before := batched.MemberBlockCount(Member{WorkerID: worker})
						// Mostly hashes the member owns, so members empty
						// mid-event; some unknown ones and duplicates.
						for i := range hashes {
							for ext := range batched.MemberBlocks(Member{WorkerID: worker}) {
								if r.IntN(3) != 0 {
									hashes[i] = ext
									break
								}
							}
						}
						got := batched.ApplyEvent(removedEv(worker, 0, hashes...))
						sawDrop = sawDrop || (before > 0 && batched.MemberBlockCount(Member{WorkerID: worker}) == 0 && got.UnknownRemovals > 0)
						var first error
						var unknown uint64
						for _, h := range hashes {
							out := single.ApplyEvent(removedEv(worker, 0, h))
							unknown += out.UnknownRemovals
							if out.FirstError != nil && first == nil {
								first = out.FirstError
							}
						}
						compareOutcomes(t, step, got, first, unknown)
					default:
						got, want := batched.ApplyEvent(clearedEv(worker, 0)), single.ApplyEvent(clearedEv(worker, 0))
						compareOutcomes(t, step, got, want.FirstError, want.UnknownRemovals)
					}
					if err := compareStates(batched, single); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					if step%7 == 0 {
						if a, b := batched.Flush(), single.Flush(); !slices.Equal(a.Images, b.Images) {
							t.Fatalf("step %d: windows differ:\n%v\n%v", step, a.Images, b.Images)
						}
					}
				}
				if err := checkInvariants(batched); err != nil {
					t.Fatal(err)
				}
			})
		}
		if !sawDrop || !sawLong || (mode == ckf.HashModeVerbatim && !sawFailure) {
			t.Fatalf("%s: scenario too tame: drop=%v long=%v failure=%v", mode, sawDrop, sawLong, sawFailure)
		}
	}
}

func compareOutcomes(t *testing.T, step int, got EventOutcome, wantErr error, wantUnknown uint64) {
	t.Helper()
	if got.FirstError != wantErr || got.UnknownRemovals != wantUnknown {
		t.Fatalf("step %d: outcome (%v, %d unknown), block by block (%v, %d unknown)",
			step, got.FirstError, got.UnknownRemovals, wantErr, wantUnknown)
	}
}

func compareStates(a, b *State) error {
	if !slices.Equal(a.Words(), b.Words()) {
		return fmt.Errorf("lanes differ")
	}
	if a.mut.RNGState() != b.mut.RNGState() {
		return fmt.Errorf("relocation RNG states differ")
	}
	if !maps.Equal(maps.Collect(a.ExactBlocks()), maps.Collect(b.ExactBlocks())) {
		return fmt.Errorf("exact ownership differs")
	}
	if !slices.Equal(a.Members(), b.Members()) {
		return fmt.Errorf("members differ: %v vs %v", a.Members(), b.Members())
	}
	for _, m := range a.Members() {
		if !maps.Equal(maps.Collect(a.MemberBlocks(m)), maps.Collect(b.MemberBlocks(m))) {
			return fmt.Errorf("member %+v edges differ", m)
		}
	}
	sa, sb := a.Stats(), b.Stats()
	sa.PendingEvents, sb.PendingEvents = 0, 0 // one event vs one per block
	if sa != sb {
		return fmt.Errorf("stats differ:\n%v\n%v", sa, sb)
	}
	return nil
}

func TestUniqueBlocksMatchesStats(t *testing.T) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		cfg := ckf.NewConfig(256)
		cfg.Mode = mode
		s, err := NewState(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range uint64(40) {
			ev := routerevent.RouterEvent{WorkerID: i % 3, Event: routerevent.KvCacheEvent{Data: routerevent.EventData{Kind: routerevent.EventStored,
				Stored: routerevent.StoreData{Blocks: []routerevent.StoredBlock{{BlockHash: i + 1, TokensHash: i + 1}}}}}}
			s.ApplyEvent(&ev)
			if s.UniqueBlocks() != s.Stats().UniqueBlocks || s.UniqueBlocks() != int(i+1) {
				t.Fatalf("%s: unique %d, stats %d, want %d", mode, s.UniqueBlocks(), s.Stats().UniqueBlocks, i+1)
			}
		}
	}
}
