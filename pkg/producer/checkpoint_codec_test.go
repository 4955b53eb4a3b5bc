package producer

import (
	"bytes"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// writeSizes records the length of every Write it is handed.
type writeSizes struct {
	buf   bytes.Buffer
	sizes []int
}

func (w *writeSizes) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.buf.Write(p)
}

// TestCheckpointWritesInChunks: Checkpoint hands its writer chunks of at
// most checkpointChunk bytes (the object store's part size), filling each
// one as far as the next field allows: the header and the lane words are
// 8-byte aligned, so with more than a chunk of lane the first write is a
// whole chunk. The 8-byte checksum is the last write.
func TestCheckpointWritesInChunks(t *testing.T) {
	cfg := verbatimConfig(1 << 15) // 16384 buckets: 128 KiB of lane words
	s := mustState(t, cfg)
	if bc := s.Format().BucketCount; 8*bc < 2*checkpointChunk {
		t.Fatalf("fixture lane of %d buckets is not over two chunks", bc)
	}
	storeRange(s, 1, 0, 3000)
	s.Flush()
	w := &writeSizes{}
	if err := s.Checkpoint(w); err != nil {
		t.Fatal(err)
	}
	n := len(w.sizes)
	if n < 4 {
		t.Fatalf("writes %v: want at least three chunks and the checksum", w.sizes)
	}
	if w.sizes[0] != checkpointChunk {
		t.Fatalf("first write %d bytes, want a whole chunk of %d", w.sizes[0], checkpointChunk)
	}
	for i, sz := range w.sizes[:n-2] {
		// A chunk ends early only when the next field (at most 8 bytes)
		// does not fit.
		if sz > checkpointChunk || sz <= checkpointChunk-8 {
			t.Fatalf("write %d of %v: %d bytes", i, w.sizes, sz)
		}
	}
	if last := w.sizes[n-1]; last != 8 {
		t.Fatalf("last write %d bytes, want the 8-byte checksum", last)
	}
	got := restore(t, w.buf.Bytes(), cfg)
	if err := sameState(s, got); err != nil {
		t.Fatal(err)
	}
}

// roundTrip checkpoints s, restores it with cfg and checks that the
// restored state is s and re-encodes to the same bytes.
func roundTrip(t *testing.T, s *State, cfg ckf.Config) *State {
	t.Helper()
	b := checkpointBytes(t, s)
	got := restore(t, b, cfg)
	if err := sameState(s, got); err != nil {
		t.Fatal(err)
	}
	if err := checkInvariants(got); err != nil {
		t.Fatal(err)
	}
	if again := checkpointBytes(t, got); !bytes.Equal(again, b) {
		t.Fatal("restored state re-encodes differently")
	}
	return got
}

// TestCheckpointsOfMinimalSections round-trips states whose sections are
// as small as the encoding allows, so each length check meets a section
// that ends exactly at its bound: verbatim members owning only hash 0 (29
// bytes each, the smallest member), a canonical last member whose entries
// end 8 bytes before the body (only the empty pool count follows), a
// member of worker 0 rank 0 (the zero Member, first in order) and a
// member table holding 6 entries in 8 slots (the most before it grows).
func TestCheckpointsOfMinimalSections(t *testing.T) {
	t.Run("verbatim members owning hash 0", func(t *testing.T) {
		cfg := verbatimConfig(64)
		for members := uint64(1); members <= 3; members++ {
			s := mustState(t, cfg)
			for w := range members {
				s.ApplyEvent(storedEv(w+1, 0, 0))
			}
			s.Flush()
			got := roundTrip(t, s, cfg)
			if o, ok := got.Ownership(0); !ok || o.Refcount != uint32(members) || got.MemberBlockCount(Member{WorkerID: members}) != 1 {
				t.Fatalf("%d members: hash 0 %+v %v", members, o, ok)
			}
		}
	})
	t.Run("canonical member last without pool", func(t *testing.T) {
		cfg := ckf.NewConfig(64)
		for n := uint64(1); n <= 7; n++ {
			s := mustState(t, cfg)
			hs := make([]uint64, n)
			for i := range hs {
				hs[i] = 100 + uint64(i)
			}
			s.ApplyEvent(storedEv(3, 1, hs...))
			s.Flush()
			if len(s.freeMember) != 0 {
				t.Fatal("fixture has a pool")
			}
			got := roundTrip(t, s, cfg)
			if got.MemberBlockCount(Member{WorkerID: 3, DpRank: 1}) != int(n) {
				t.Fatalf("%d blocks: restored member owns %d", n, got.MemberBlockCount(Member{WorkerID: 3, DpRank: 1}))
			}
		}
	})
	t.Run("the zero member with a full small table", func(t *testing.T) {
		for _, cfg := range []ckf.Config{verbatimConfig(64), ckf.NewConfig(64)} {
			s := mustState(t, cfg)
			s.ApplyEvent(storedEv(0, 0, 1, 2, 3, 4, 5, 6))
			s.ApplyEvent(storedEv(0, 1, 1))
			s.Flush()
			if c := s.members[Member{}].lineage.capacity(); c != tableMinSlots {
				t.Fatalf("fixture table has %d slots", c)
			}
			got := roundTrip(t, s, cfg)
			if got.MemberBlockCount(Member{}) != 6 {
				t.Fatalf("%s: zero member owns %d", cfg.Mode, got.MemberBlockCount(Member{}))
			}
		}
	})
}
