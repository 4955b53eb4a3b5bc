package cbi1_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// §8.2 scenario 22 (the frame-level parts; the body-level ones are in
// body_internal_test.go).
func TestScenario22(t *testing.T) {
	f := mustFormat(t, 0x5EED, 1024)
	images := []cbi1.Image{{Bucket: 3, Word: 0xAAAABBBBCCCCDDDD}, {Bucket: 1000, Word: 42}}

	t.Run("delta round trip", func(t *testing.T) {
		b, err := cbi1.AppendDelta(nil, f, 7, 4, 5, images)
		if err != nil {
			t.Fatal(err)
		}
		fr, err := cbi1.Decode(f, b)
		if err != nil {
			t.Fatal(err)
		}
		want := cbi1.Header{Kind: cbi1.KindDelta, Seed: 0x5EED, BucketCount: 1024, DcID: 7, Epoch: 5, Checksum: fr.Header.Checksum}
		if fr.Header != want || fr.Delta.BaseEpoch != 4 || !slices.Equal(fr.Delta.AppendImages(nil), images) {
			t.Fatalf("round trip = %+v %+v", fr.Header, fr.Delta.AppendImages(nil))
		}
	})
	t.Run("encode 349526 images", func(t *testing.T) {
		dst := []byte("keep")
		out, err := cbi1.AppendDelta(dst, f, 7, 0, 1, make([]cbi1.Image, cbi1.MaxDeltaImages+1))
		if !errors.Is(err, cbi1.ErrDeltaImageCount) || string(out) != "keep" {
			t.Fatalf("err %v, dst %q", err, out)
		}
		if _, err := cbi1.AppendDelta(nil, f, 7, 0, 1, make([]cbi1.Image, cbi1.MaxDeltaImages)); err != nil {
			t.Fatalf("exactly MaxDeltaImages: %v", err)
		}
	})
	t.Run("encode bucket 1024", func(t *testing.T) {
		_, err := cbi1.AppendDelta(nil, f, 7, 0, 1, []cbi1.Image{{Bucket: 1024, Word: 1}})
		var e *cbi1.Error
		if !errors.As(err, &e) || e.Kind != cbi1.ErrBucketIndex || e.Got != 1024 || e.Limit != 1024 {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("snapshot of 1 word for 1024 buckets", func(t *testing.T) {
		_, err := cbi1.AppendSnapshotChunk(nil, f, 7, 1, []uint64{0}, 0)
		if !errors.Is(err, cbi1.ErrSnapshotBucketCount) {
			t.Fatalf("err %v", err)
		}
		_, err = cbi1.EncodeSnapshot(nil, f, 7, 1, []uint64{0}, func(uint32, uint32, []byte) error { return nil })
		if !errors.Is(err, cbi1.ErrSnapshotBucketCount) {
			t.Fatalf("EncodeSnapshot err %v", err)
		}
	})
	t.Run("decode 4194369 bytes", func(t *testing.T) {
		_, err := cbi1.Decode(f, make([]byte, 4_194_369))
		var e *cbi1.Error
		if !errors.As(err, &e) || e.Kind != cbi1.ErrFrameTooLarge || e.Got != 4_194_369 || e.Limit != 4_194_368 {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("decode 47 bytes", func(t *testing.T) {
		if _, err := cbi1.Decode(f, make([]byte, 47)); !errors.Is(err, cbi1.ErrTruncated) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("empty delta plus one byte", func(t *testing.T) {
		b, _ := cbi1.AppendDelta(nil, f, 7, 0, 1, nil)
		if _, err := cbi1.Decode(f, append(b, 0)); !errors.Is(err, cbi1.ErrChecksum) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("seed xor 1", func(t *testing.T) {
		b, _ := cbi1.AppendDelta(nil, f, 7, 0, 1, nil)
		other := mustFormat(t, 0x5EED^1, 1024)
		_, err := cbi1.Decode(other, b)
		if !errors.Is(err, cbi1.ErrFormatMismatch) || !errors.Is(err, cbi1.ErrFormat) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("flags 0x8000", func(t *testing.T) {
		b, _ := cbi1.AppendDelta(nil, f, 7, 0, 1, nil)
		b[6], b[7] = 0x00, 0x80
		_, err := cbi1.Decode(f, b)
		var e *cbi1.Error
		if !errors.As(err, &e) || e.Kind != cbi1.ErrFlags || e.Got != 0x8000 {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("format version 2", func(t *testing.T) {
		b, _ := cbi1.AppendDelta(nil, f, 7, 0, 1, nil)
		b[10] = 2
		_, err := cbi1.Decode(f, b)
		var e *cbi1.Error
		if !errors.As(err, &e) || e.Kind != cbi1.ErrFormatVersion || e.Got != 2 {
			t.Fatalf("err %v", err)
		}
	})
}

// §8.2 scenario 23: a 1 048 576-bucket lane is two chunks; chunk 1 first is a
// sequence error; in order they rebuild the exact lane at epoch 6.
func TestScenario23(t *testing.T) {
	const buckets = 1 << 20
	f := mustFormat(t, 0x5EED, buckets)
	lane := make([]uint64, buckets)
	lane[0], lane[cbi1.SnapshotChunkBuckets+1], lane[buckets-1] = 11, 22, 33
	frames := encodeAll(t, f, 9, 6, lane)
	if len(frames) != 2 {
		t.Fatalf("%d chunks, want 2", len(frames))
	}
	decoded := make([]cbi1.Frame, len(frames))
	for i, b := range frames {
		fr, err := cbi1.Decode(f, b)
		if err != nil {
			t.Fatal(err)
		}
		if fr.Chunk.Index != uint32(i) || fr.Chunk.Count != 2 || fr.Chunk.BucketOffset != uint64(i)*cbi1.SnapshotChunkBuckets {
			t.Fatalf("chunk %d = %+v", i, fr.Chunk)
		}
		decoded[i] = fr
	}

	reordered := mustAssembler(t, f)
	if _, _, err := reordered.Add(decoded[1]); !errors.Is(err, cbi1.ErrChunkSequence) {
		t.Fatalf("chunk 1 first: %v", err)
	}

	a := mustAssembler(t, f)
	s, done, err := a.Add(decoded[0])
	if err != nil || done {
		t.Fatalf("chunk 0: done=%v err=%v", done, err)
	}
	if !a.InProgress() {
		t.Fatal("not in progress after chunk 0")
	}
	s, done, err = a.Add(decoded[1])
	if err != nil || !done {
		t.Fatalf("chunk 1: done=%v err=%v", done, err)
	}
	if s.Epoch != 6 || s.DcID != 9 || !slices.Equal(s.Words, lane) {
		t.Fatalf("snapshot epoch %d dc %d, equal=%v", s.Epoch, s.DcID, slices.Equal(s.Words, lane))
	}
	if a.InProgress() {
		t.Fatal("still in progress after completion")
	}
}

func encodeAll(t testing.TB, f cbi1.Format, dc, epoch uint64, lane []uint64) [][]byte {
	t.Helper()
	var frames [][]byte
	_, err := cbi1.EncodeSnapshot(nil, f, dc, epoch, lane, func(index, count uint32, frame []byte) error {
		if int(index) != len(frames) || count != f.ChunkCount() {
			t.Fatalf("emit(%d, %d) after %d frames", index, count, len(frames))
		}
		frames = append(frames, slices.Clone(frame))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return frames
}

func mustAssembler(t testing.TB, f cbi1.Format) *cbi1.Assembler {
	t.Helper()
	a, err := cbi1.NewAssembler(f)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestNewFormat(t *testing.T) {
	for _, n := range []uint64{2, 4, 1024, 1 << 24} {
		f, err := cbi1.NewFormat(1, n)
		if err != nil || f.BucketCount() != n || f.Seed() != 1 {
			t.Errorf("NewFormat(1, %d) = %v, %v", n, f, err)
		}
	}
	for _, n := range []uint64{0, 1, 3, 1000, 1<<24 + 1, 1 << 25, 1 << 63} {
		if _, err := cbi1.NewFormat(1, n); !errors.Is(err, cbi1.ErrBucketCount) {
			t.Errorf("NewFormat(1, %d): %v", n, err)
		}
	}
	zero := cbi1.Format{}
	if _, err := cbi1.AppendDelta(nil, zero, 0, 0, 0, nil); !errors.Is(err, cbi1.ErrBucketCount) {
		t.Errorf("AppendDelta(zero format): %v", err)
	}
	if _, err := cbi1.AppendSnapshotChunk(nil, zero, 0, 0, nil, 0); !errors.Is(err, cbi1.ErrBucketCount) {
		t.Errorf("AppendSnapshotChunk(zero format): %v", err)
	}
	if _, err := cbi1.NewAssembler(zero); !errors.Is(err, cbi1.ErrBucketCount) {
		t.Errorf("NewAssembler(zero format): %v", err)
	}
}

func TestFormatOfCKF(t *testing.T) {
	id := ckf.NewFormatIdentity(ckf.DefaultSeed, 1024)
	f, err := cbi1.FormatOf(id)
	if err != nil || f.Seed() != ckf.DefaultSeed || f.BucketCount() != 1024 || f.Identity() != id {
		t.Fatalf("FormatOf = %v, %v", f, err)
	}
	bad := []struct {
		edit func(*ckf.FormatIdentity)
		want cbi1.ErrorKind
	}{
		{func(i *ckf.FormatIdentity) { i.FormatVersion = 2 }, cbi1.ErrFormatVersion},
		{func(i *ckf.FormatIdentity) { i.FingerprintBits = 17 }, cbi1.ErrFingerprintBits},
		{func(i *ckf.FormatIdentity) { i.SlotsPerBucket = 5 }, cbi1.ErrSlotsPerBucket},
		{func(i *ckf.FormatIdentity) { i.BucketCount = 3 }, cbi1.ErrBucketCount},
	}
	for _, b := range bad {
		i := id
		b.edit(&i)
		if _, err := cbi1.FormatOf(i); !errors.Is(err, b.want) {
			t.Errorf("%+v: %v, want %v", i, err, b.want)
		}
	}
}

func TestChunkCount(t *testing.T) {
	cases := map[uint64]uint32{2: 1, 1024: 1, 1 << 19: 1, 1 << 20: 2, 1 << 22: 8, 1 << 24: 32}
	for n, want := range cases {
		if got := cbi1.ChunkCount(n); got != want {
			t.Errorf("ChunkCount(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestAppendSnapshotChunkIndex(t *testing.T) {
	f := mustFormat(t, 1, 1<<20)
	lane := make([]uint64, 1<<20)
	if _, err := cbi1.AppendSnapshotChunk(nil, f, 0, 0, lane, 2); !errors.Is(err, cbi1.ErrChunkIndex) {
		t.Fatalf("index 2 of 2: %v", err)
	}
}

func TestEncodeSnapshotStopsOnEmitError(t *testing.T) {
	f := mustFormat(t, 1, 1<<20)
	stop := errors.New("stop")
	calls := 0
	_, err := cbi1.EncodeSnapshot(nil, f, 0, 0, make([]uint64, 1<<20), func(uint32, uint32, []byte) error {
		calls++
		return stop
	})
	if err != stop || calls != 1 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
}
