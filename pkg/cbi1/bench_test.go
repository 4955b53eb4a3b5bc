package cbi1_test

import (
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
)

// A 4 194 304-bucket lane (32 MiB of words) is 8 full chunks.
func BenchmarkSnapshotEncode4M(b *testing.B) {
	f := mustFormat(b, 0x5EED, 1<<22)
	lane := make([]uint64, f.BucketCount())
	for i := range lane {
		lane[i] = uint64(i) * 0x9E3779B97F4A7C15
	}
	buf := make([]byte, 0, cbi1.MaxFrameBytes)
	chunks := 0
	emit := func(uint32, uint32, []byte) error { chunks++; return nil }
	b.SetBytes(int64(len(lane) * 8))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, err = cbi1.EncodeSnapshot(buf, f, 7, 1, lane, emit)
		if err != nil {
			b.Fatal(err)
		}
	}
	if chunks%8 != 0 {
		b.Fatalf("%d chunks emitted", chunks)
	}
}

// Per-image cost of encoding a delta; b.N counts images, in deltas of 1 000.
func BenchmarkDeltaEncodePerImage(b *testing.B) {
	benchDelta(b, func(f cbi1.Format, images []cbi1.Image, buf []byte, frame []byte, lane []uint64) {
		if _, err := cbi1.AppendDelta(buf[:0], f, 7, 41, 42, images); err != nil {
			b.Fatal(err)
		}
	})
}

// Per-image cost of decoding (validating every image) and applying a delta.
func BenchmarkDeltaDecodePerImage(b *testing.B) {
	benchDelta(b, func(f cbi1.Format, images []cbi1.Image, buf []byte, frame []byte, lane []uint64) {
		fr, err := cbi1.Decode(f, frame)
		if err != nil {
			b.Fatal(err)
		}
		if err := fr.Delta.ApplyTo(lane); err != nil {
			b.Fatal(err)
		}
	})
}

func benchDelta(b *testing.B, op func(f cbi1.Format, images []cbi1.Image, buf, frame []byte, lane []uint64)) {
	const perDelta = 1000
	f := mustFormat(b, 0x5EED, 1<<20)
	images := deltaImages(perDelta, f.BucketCount())
	buf := make([]byte, 0, cbi1.DeltaFrameLen(perDelta))
	frame, err := cbi1.AppendDelta(nil, f, 7, 41, 42, images)
	if err != nil {
		b.Fatal(err)
	}
	lane := make([]uint64, f.BucketCount())
	b.SetBytes(cbi1.DeltaImageBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += perDelta {
		op(f, images, buf, frame, lane)
	}
}
