package producer

import (
	"bytes"
	"testing"
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
