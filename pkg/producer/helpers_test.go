package producer

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

func verbatimConfig(n uint64) ckf.Config {
	c := ckf.NewConfig(n)
	c.Mode = ckf.HashModeVerbatim
	return c
}

func mustState(t testing.TB, cfg ckf.Config) *State {
	t.Helper()
	s, err := NewState(cfg)
	if err != nil {
		t.Fatalf("NewState: %v", err)
	}
	return s
}

// storedEv builds a parentless stored event whose blocks carry block_hash =
// tokens_hash = h (a Dynamo-native root-style fixture).
func storedEv(worker uint64, rank uint32, hashes ...uint64) *routerevent.RouterEvent {
	blocks := make([]routerevent.StoredBlock, len(hashes))
	for i, h := range hashes {
		blocks[i] = routerevent.StoredBlock{BlockHash: h, TokensHash: h}
	}
	return &routerevent.RouterEvent{WorkerID: worker, Event: routerevent.KvCacheEvent{DpRank: rank,
		Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{Blocks: blocks}}}}
}

// chainEv builds a stored event with explicit parent and (ext, tokens) blocks.
func chainEv(worker uint64, rank uint32, parent *uint64, blocks ...routerevent.StoredBlock) *routerevent.RouterEvent {
	return &routerevent.RouterEvent{WorkerID: worker, Event: routerevent.KvCacheEvent{DpRank: rank,
		Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{ParentHash: parent, Blocks: blocks}}}}
}

func removedEv(worker uint64, rank uint32, hashes ...uint64) *routerevent.RouterEvent {
	return &routerevent.RouterEvent{WorkerID: worker, Event: routerevent.KvCacheEvent{DpRank: rank,
		Data: routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{BlockHashes: hashes}}}}
}

func clearedEv(worker uint64, rank uint32) *routerevent.RouterEvent {
	return &routerevent.RouterEvent{WorkerID: worker, Event: routerevent.KvCacheEvent{DpRank: rank, Data: routerevent.EventData{Kind: routerevent.EventCleared}}}
}

func ptr[T any](v T) *T { return &v }

// applyBatch writes a batch's absolute images onto words.
func applyBatch(words []uint64, b Batch) {
	for _, img := range b.Images {
		words[img.Bucket] = img.Value
	}
}

// findCollision brute-forces two distinct hashes with the same probe.
func findCollision(t testing.TB, addr ckf.Addressing) (uint64, uint64) {
	t.Helper()
	seen := make(map[ckf.Probe]uint64)
	for h := uint64(1); h < 1<<22; h++ {
		p := addr.Prepare(h)
		if prev, ok := seen[p]; ok {
			return prev, h
		}
		seen[p] = h
	}
	t.Fatal("no representation collision found")
	return 0, 0
}

func (s *State) addressing() ckf.Addressing { return s.mut.addr }

// checkInvariants verifies the §6.1 invariants: refcounts equal the edges
// mapping to each hash, no empty member, every resident hash has exactly one
// accounted copy (occupied slots = resident hashes) and is Contained.
func checkInvariants(s *State) error {
	edges := make(map[uint64]uint32)
	for m, ms := range s.members {
		if ms.lineage.len() == 0 {
			return fmt.Errorf("member %+v is empty but present", m)
		}
		for ext, h := range ms.lineage.all() {
			if s.cfg.Mode == ckf.HashModeVerbatim && ext != h {
				return fmt.Errorf("verbatim edge %#x -> %#x", ext, h)
			}
			edges[h]++
		}
	}
	if len(edges) != s.owners.len() {
		return fmt.Errorf("%d hashes with edges, %d owner entries", len(edges), s.owners.len())
	}
	resident := 0
	for h, o := range s.ExactBlocks() {
		if o.Refcount != edges[h] || o.Refcount == 0 {
			return fmt.Errorf("hash %#x refcount %d, edges %d", h, o.Refcount, edges[h])
		}
		if s.cfg.Mode == ckf.HashModeVerbatim && !o.Resident {
			return fmt.Errorf("verbatim hash %#x not resident", h)
		}
		if o.Resident {
			resident++
			if !s.Contains(h) {
				return fmt.Errorf("resident hash %#x not contained", h)
			}
		}
	}
	if st := s.Stats(); st.OccupiedSlots != resident {
		return fmt.Errorf("occupied slots %d, resident hashes %d", st.OccupiedSlots, resident)
	}
	return nil
}

// recordingSink keeps a deep copy of every accepted delta and fails while
// fail is set.
type recordingSink struct {
	deltas []ckf.Delta
	fail   error
	calls  int
}

var errSinkDown = errors.New("test sink down")

func (r *recordingSink) Enqueue(d ckf.Delta) error {
	r.calls++
	if r.fail != nil {
		return r.fail
	}
	d.Images = slices.Clone(d.Images)
	r.deltas = append(r.deltas, d)
	return nil
}

func testIdentity(s *State) ckf.ProducerIdentity {
	return ckf.ProducerIdentity{Pool: ckf.PoolID{Dc: 11}, ProducerIncarnation: 19, LayoutGeneration: 1, Format: s.Format()}
}

func lease(epoch uint64) ckf.LaneLease {
	return ckf.LaneLease{ConsumerInstance: 17, PhysicalLane: 3, AssignmentEpoch: epoch}
}
