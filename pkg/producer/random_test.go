package producer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// opSource yields the bytes that drive a random scenario; ok=false ends it.
type opSource interface{ next() (byte, bool) }

type rngSource struct {
	r    *rand.Rand
	left int
}

func (s *rngSource) next() (byte, bool) {
	if s.left <= 0 {
		return 0, false
	}
	s.left--
	return byte(s.r.Uint32()), true
}

type bytesSource struct{ b []byte }

func (s *bytesSource) next() (byte, bool) {
	if len(s.b) == 0 {
		return 0, false
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c, true
}

// scenario drives one State with small events and checks, after every step,
// the exact invariants and that the published history (initial barrier
// snapshot + every drained batch) equals the lane outside the open window.
type scenario struct {
	s        *State
	replayed []uint64
	src      opSource
	peak     int
}

func newScenario(mode ckf.HashMode, cadence uint64, src opSource) (*scenario, error) {
	cfg := ckf.NewConfig(8) // 4 buckets, 16 slots: capacity failures happen
	cfg.Mode = mode
	cfg.MaxKicks = 8
	cfg.PublishEveryNEvents = cadence
	s, err := NewState(cfg)
	if err != nil {
		return nil, err
	}
	tail, words, err := s.BarrierSnapshot()
	if err != nil || !tail.Empty() {
		return nil, fmt.Errorf("initial snapshot: %v %v", tail, err)
	}
	return &scenario{s: s, replayed: words, src: src}, nil
}

func (sc *scenario) byte() (byte, bool) { return sc.src.next() }

func (sc *scenario) publish(b Batch) {
	for _, img := range b.Images {
		sc.replayed[img.Bucket] = img.Value
	}
}

func (sc *scenario) check() error {
	sc.peak = max(sc.peak, sc.s.owners.len())
	if err := checkInvariants(sc.s); err != nil {
		return err
	}
	words := sc.s.Words()
	for b := range words {
		want := words[b]
		if sc.s.dirty.isDirty(uint64(b)) {
			i := slices.Index(sc.s.dirty.order, uint64(b))
			want = sc.s.dirty.originals[i]
		}
		if sc.replayed[b] != want {
			return fmt.Errorf("bucket %d: replayed %#x, want %#x (lane %#x)", b, sc.replayed[b], want, words[b])
		}
	}
	return nil
}

// step performs one operation; ok=false when the source is exhausted.
func (sc *scenario) step() (bool, error) {
	op, ok := sc.byte()
	if !ok {
		return false, nil
	}
	arg, ok := sc.byte()
	if !ok {
		return false, nil
	}
	worker, rank := uint64(arg&3), uint32(arg>>2&1)
	m := Member{worker, rank}
	hash := func() uint64 { b, _ := sc.byte(); return uint64(b % 48) }
	switch op % 10 {
	case 0, 1, 2, 3: // store 1..4 blocks
		n := int(arg>>3&3) + 1
		blocks := make([]routerevent.StoredBlock, n)
		for i := range blocks {
			// Mostly consistent engine ids (tokens follow the id) so lineage
			// grows; sometimes arbitrary tokens to provoke conflicts.
			ext := hash()
			tokens := ext
			if arg&0x80 != 0 {
				tokens = hash() % 8
			}
			blocks[i] = routerevent.StoredBlock{BlockHash: ext, TokensHash: tokens}
		}
		var parent *uint64
		if arg&0x20 != 0 {
			parent = ptr(hash())
		}
		ev := chainEv(worker, rank, parent, blocks...)
		if arg&0x40 != 0 {
			ev.StorageTier = routerevent.TierHostPinned
		}
		out := sc.s.ApplyEvent(ev)
		if out.FirstError != nil && !errors.Is(out.FirstError, ckf.ErrCapacityExhausted) &&
			!errors.Is(out.FirstError, ckf.ErrParentBlockNotFound) && !errors.Is(out.FirstError, ckf.ErrInvalidBlockSequence) {
			return true, fmt.Errorf("store: %w", out.FirstError)
		}
		sc.publish(out.Publication)
	case 4, 5:
		out := sc.s.ApplyEvent(removedEv(worker, rank, hash(), hash()))
		if out.FirstError != nil {
			return true, fmt.Errorf("remove: %w", out.FirstError)
		}
		sc.publish(out.Publication)
	case 6:
		out := sc.s.ApplyEvent(clearedEv(worker, rank))
		if out.FirstError != nil {
			return true, fmt.Errorf("clear: %w", out.FirstError)
		}
		sc.publish(out.Publication)
	case 7:
		var b Batch
		var err error
		switch arg >> 6 {
		case 0:
			b, err = sc.s.RemoveRank(m)
		case 1:
			b, err = sc.s.RemoveWorker(worker)
		default:
			b = sc.s.Flush()
		}
		if err != nil {
			return true, fmt.Errorf("lifecycle: %w", err)
		}
		sc.publish(b)
	case 8:
		set := []uint64{hash(), hash()}
		b, err := sc.s.ReplaceRank(m, set[:arg>>6%3])
		if err != nil && !errors.Is(err, ckf.ErrCapacityExhausted) && !errors.Is(err, ckf.ErrInvalidBlockSequence) {
			return true, fmt.Errorf("replace: %w", err)
		}
		sc.publish(b)
	case 9:
		tail, words, err := sc.s.BarrierSnapshot()
		if err != nil {
			return true, err
		}
		sc.publish(tail)
		if !slices.Equal(words, sc.replayed) {
			return true, errors.New("barrier snapshot differs from replayed history + tail")
		}
	}
	return true, sc.check()
}

func (sc *scenario) run() error {
	for i := 0; ; i++ {
		more, err := sc.step()
		if err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		if !more {
			break
		}
	}
	sc.publish(sc.s.Flush())
	if !slices.Equal(sc.replayed, sc.s.Words()) {
		return errors.New("final flush: replayed history differs from lane")
	}
	return nil
}

func TestRandomizedMembersKeepExactInvariantsAndReplayConverges(t *testing.T) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		for _, cadence := range []uint64{1, 3, 16} {
			t.Run(fmt.Sprintf("%s/cadence=%d", mode, cadence), func(t *testing.T) {
				var capacity, unknown, publications, maxUnique uint64
				for seed := range uint64(20) {
					src := &rngSource{r: rand.New(rand.NewPCG(seed, cadence)), left: 3000}
					sc, err := newScenario(mode, cadence, src)
					if err != nil {
						t.Fatal(err)
					}
					if err := sc.run(); err != nil {
						t.Fatalf("seed %d: %v", seed, err)
					}
					st := sc.s.Stats()
					capacity += st.CapacityFailures
					unknown += st.UnknownRemovals
					publications += st.Publications
					maxUnique = max(maxUnique, uint64(sc.peak))
				}
				// The scenario must actually reach the interesting regimes.
				if capacity == 0 || unknown == 0 || publications == 0 || maxUnique < 16 {
					t.Fatalf("weak scenario: capacity %d unknown %d publications %d peak unique %d", capacity, unknown, publications, maxUnique)
				}
			})
		}
	}
}

func FuzzApplyEvents(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0, 0x18, 1, 2, 3, 4, 5, 6, 7, 8, 4, 0, 1, 3, 6, 0})
	f.Add([]byte{1, 0x20, 5, 5, 2, 0x00, 5, 1, 8, 0x40, 3, 4, 9, 0, 7, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		mode := ckf.HashMode(data[0] & 1)
		cadence := uint64(data[0]>>1&7) + 1
		sc, err := newScenario(mode, cadence, &bytesSource{b: data[1:]})
		if err != nil {
			t.Fatal(err)
		}
		if err := sc.run(); err != nil {
			t.Fatal(err)
		}
	})
}
