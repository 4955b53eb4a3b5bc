package cbi1_test

import (
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
)

func deltaImages(n int, buckets uint64) []cbi1.Image {
	images := make([]cbi1.Image, n)
	for i := range images {
		images[i] = cbi1.Image{Bucket: uint32((uint64(i) * 2654435761) % buckets), Word: uint64(i)*0x9E3779B97F4A7C15 | 1}
	}
	return images
}

// The delta hot paths (relay encoding a publication, consumer decoding and
// applying one) must not allocate once the caller's buffer has capacity.
func TestDeltaPathsDoNotAllocate(t *testing.T) {
	f := mustFormat(t, 0x5EED, 1<<20)
	images := deltaImages(1000, f.BucketCount())
	buf := make([]byte, 0, cbi1.DeltaFrameLen(len(images)))
	frame, err := cbi1.AppendDelta(buf, f, 7, 41, 42, images)
	if err != nil {
		t.Fatal(err)
	}
	lane := make([]uint64, f.BucketCount())

	if n := testing.AllocsPerRun(100, func() {
		var err error
		buf, err = cbi1.AppendDelta(buf[:0], f, 7, 41, 42, images)
		if err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("AppendDelta allocates %.1f times per call", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		fr, err := cbi1.Decode(f, frame)
		if err != nil {
			t.Fatal(err)
		}
		if err := fr.Delta.ApplyTo(lane); err != nil {
			t.Fatal(err)
		}
		var sum uint64
		for i := range fr.Delta.Len() {
			sum += fr.Delta.At(i).Word
		}
		_ = sum
	}); n != 0 {
		t.Errorf("Decode+apply of a delta allocates %.1f times per call", n)
	}
}

// Snapshot chunks are encoded into a reused buffer and decoded as views, so a
// steady-state snapshot costs no allocation either (the Assembler allocates
// its table once, or never with Recycle).
func TestSnapshotPathsDoNotAllocate(t *testing.T) {
	f := mustFormat(t, 0x5EED, 1<<20)
	lane := make([]uint64, f.BucketCount())
	lane[5] = 5
	var frames [][]byte
	buf, err := cbi1.EncodeSnapshot(nil, f, 7, 3, lane, func(_, _ uint32, b []byte) error {
		frames = append(frames, append([]byte(nil), b...))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	emit := func(uint32, uint32, []byte) error { return nil }
	if n := testing.AllocsPerRun(10, func() {
		var err error
		buf, err = cbi1.EncodeSnapshot(buf, f, 7, 3, lane, emit)
		if err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("EncodeSnapshot allocates %.1f times per snapshot", n)
	}
	a := mustAssembler(t, f)
	a.Recycle(make([]uint64, f.BucketCount()))
	if n := testing.AllocsPerRun(10, func() {
		for _, b := range frames {
			fr, err := cbi1.Decode(f, b)
			if err != nil {
				t.Fatal(err)
			}
			s, done, err := a.Add(fr)
			if err != nil {
				t.Fatal(err)
			}
			if done {
				a.Recycle(s.Words)
			}
		}
	}); n != 0 {
		t.Errorf("decode+assemble allocates %.1f times per snapshot", n)
	}
}
