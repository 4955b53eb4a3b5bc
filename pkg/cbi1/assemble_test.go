package cbi1_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
)

// A four-chunk lane keeps these tests cheap while exercising every transition.
const asmBuckets = 4 * cbi1.SnapshotChunkBuckets // 2^21

func asmFixture(t *testing.T) (cbi1.Format, []uint64, []cbi1.Frame) {
	t.Helper()
	f := mustFormat(t, 0x5EED, asmBuckets)
	lane := make([]uint64, asmBuckets)
	for i := range lane {
		lane[i] = uint64(i) * 0x9E3779B97F4A7C15
	}
	return f, lane, decodeAll(t, f, encodeAll(t, f, 3, 10, lane))
}

func decodeAll(t *testing.T, f cbi1.Format, frames [][]byte) []cbi1.Frame {
	t.Helper()
	out := make([]cbi1.Frame, len(frames))
	for i, b := range frames {
		fr, err := cbi1.Decode(f, b)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = fr
	}
	return out
}

func feed(a *cbi1.Assembler, frames ...cbi1.Frame) (cbi1.Snapshot, bool, error) {
	var (
		s    cbi1.Snapshot
		done bool
		err  error
	)
	for _, fr := range frames {
		s, done, err = a.Add(fr)
		if err != nil {
			return s, done, err
		}
	}
	return s, done, err
}

func TestAssemblerInOrder(t *testing.T) {
	f, lane, chunks := asmFixture(t)
	a := mustAssembler(t, f)
	for i, fr := range chunks[:3] {
		if _, done, err := a.Add(fr); err != nil || done {
			t.Fatalf("chunk %d: done=%v err=%v", i, done, err)
		}
	}
	s, done, err := a.Add(chunks[3])
	if err != nil || !done || s.Epoch != 10 || s.DcID != 3 || !slices.Equal(s.Words, lane) {
		t.Fatalf("final: done=%v err=%v epoch=%d", done, err, s.Epoch)
	}
	// The returned table belongs to the caller: another assembly must not
	// write into it.
	s.Words[0] = 12345
	s2, done, err := feed(a, chunks...)
	if err != nil || !done || s2.Words[0] != lane[0] || &s2.Words[0] == &s.Words[0] {
		t.Fatalf("second assembly aliases the first table (err %v)", err)
	}
	// A recycled table is reused.
	a.Recycle(s.Words)
	s3, _, err := feed(a, chunks...)
	if err != nil || &s3.Words[0] != &s.Words[0] || !slices.Equal(s3.Words, lane) {
		t.Fatalf("recycled table not reused or wrong (err %v)", err)
	}
	a.Recycle(make([]uint64, 5)) // wrong size: ignored
}

func TestAssemblerRejects(t *testing.T) {
	f, _, chunks := asmFixture(t)
	other := func(edit func(*cbi1.Frame)) cbi1.Frame {
		fr := chunks[1]
		edit(&fr)
		return fr
	}
	delta, err := cbi1.AppendDelta(nil, f, 3, 9, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	deltaFrame, err := cbi1.Decode(f, delta)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		frames []cbi1.Frame
	}{
		{"gap 0,2", []cbi1.Frame{chunks[0], chunks[2]}},
		{"repeat 0,1,1", []cbi1.Frame{chunks[0], chunks[1], chunks[1]}},
		{"start at 1", []cbi1.Frame{chunks[1]}},
		{"delta", []cbi1.Frame{chunks[0], deltaFrame}},
		{"other epoch", []cbi1.Frame{chunks[0], other(func(fr *cbi1.Frame) { fr.Header.Epoch++ })}},
		{"other dc", []cbi1.Frame{chunks[0], other(func(fr *cbi1.Frame) { fr.Header.DcID++ })}},
		{"other chunk count", []cbi1.Frame{chunks[0], other(func(fr *cbi1.Frame) { fr.Chunk.Count = 5 })}},
		{"overlapping offset", []cbi1.Frame{chunks[0], other(func(fr *cbi1.Frame) { fr.Chunk.BucketOffset-- })}},
		{"gap offset", []cbi1.Frame{chunks[0], other(func(fr *cbi1.Frame) { fr.Chunk.BucketOffset++ })}},
		{"other seed", []cbi1.Frame{chunks[0], other(func(fr *cbi1.Frame) { fr.Header.Seed++ })}},
		{"other bucket count", []cbi1.Frame{chunks[0], other(func(fr *cbi1.Frame) { fr.Header.BucketCount *= 2 })}},
		{"index beyond count", []cbi1.Frame{chunks[0], other(func(fr *cbi1.Frame) { fr.Chunk.Index = 4 })}},
		{"zero count", []cbi1.Frame{other(func(fr *cbi1.Frame) { fr.Chunk.Count = 0 })}},
		{"hand-built zero frame", []cbi1.Frame{{}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := mustAssembler(t, f)
			_, done, err := feed(a, c.frames...)
			if !errors.Is(err, cbi1.ErrChunkSequence) || done {
				t.Fatalf("done=%v err=%v, want ErrChunkSequence", done, err)
			}
			if a.InProgress() {
				t.Fatal("a failed assembly must be discarded")
			}
			// After the failure only a fresh chunk 0 is accepted.
			if _, _, err := a.Add(chunks[1]); !errors.Is(err, cbi1.ErrChunkSequence) {
				t.Fatalf("chunk 1 after failure: %v", err)
			}
			if _, done, err := feed(a, chunks...); err != nil || !done {
				t.Fatalf("fresh assembly after failure: done=%v err=%v", done, err)
			}
		})
	}
}

// Chunk 0 restarts an assembly, even in the middle of another one (a relay
// that restarted its snapshot).
func TestAssemblerChunkZeroRestarts(t *testing.T) {
	f, lane, chunks := asmFixture(t)
	a := mustAssembler(t, f)
	if _, _, err := feed(a, chunks[0], chunks[1]); err != nil {
		t.Fatal(err)
	}
	s, done, err := feed(a, chunks...)
	if err != nil || !done || !slices.Equal(s.Words, lane) {
		t.Fatalf("restart: done=%v err=%v", done, err)
	}
}

// Chunks that are each valid but stop short of the lane fail coverage.
func TestAssemblerIncompleteCoverage(t *testing.T) {
	f := mustFormat(t, 1, 8)
	frame := func(index, count uint32, offset uint64, words int) cbi1.Frame {
		b := cat(le32(index), le32(count), le64(offset), make([]byte, 8*words))
		fr, err := cbi1.Decode(f, chunkFrame(t, f, b))
		if err != nil {
			t.Fatal(err)
		}
		return fr
	}
	a := mustAssembler(t, f)
	_, done, err := feed(a, frame(0, 2, 0, 3), frame(1, 2, 3, 4))
	var e *cbi1.Error
	if !errors.As(err, &e) || e.Kind != cbi1.ErrIncompleteCoverage || e.Got != 7 || e.Limit != 8 || done {
		t.Fatalf("done=%v err=%v", done, err)
	}
	// Uneven but complete chunks are accepted: the rule is contiguity and
	// coverage, not the encoder's chunk size.
	if _, done, err := feed(a, frame(0, 2, 0, 3), frame(1, 2, 3, 5)); err != nil || !done {
		t.Fatalf("uneven chunks: done=%v err=%v", done, err)
	}
}
