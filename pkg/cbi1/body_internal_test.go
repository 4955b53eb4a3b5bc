package cbi1

import (
	"encoding/binary"
	"errors"
	"testing"
)

// §8.2 scenario 22, body level: these bodies cannot appear inside a frame of
// at most MaxFrameBytes, so the frame checks would name them FrameTooLarge;
// the body decoders must still bound them on their own.
func TestBodyDecodersBoundCountsBeforeReading(t *testing.T) {
	const n = MaxDeltaImages + 1 // 349 526
	body := make([]byte, DeltaBodyPrefix+n*DeltaImageBytes)
	binary.LittleEndian.PutUint32(body[8:], n)
	_, err := decodeDeltaBody(1024, body)
	var e *Error
	if !errors.As(err, &e) || e.Kind != ErrDeltaImageCount || e.Got != n || e.Limit != MaxDeltaImages {
		t.Fatalf("delta of %d images: %v", n, err)
	}

	const words = SnapshotChunkBuckets + 1 // 524 289
	chunk := make([]byte, ChunkBodyPrefix+words*8)
	binary.LittleEndian.PutUint32(chunk[4:], 1)
	_, err = decodeChunkBody(MaxBucketCount, chunk)
	if !errors.As(err, &e) || e.Kind != ErrSnapshotChunkWordCount || e.Got != words || e.Limit != SnapshotChunkBuckets {
		t.Fatalf("chunk of %d words: %v", words, err)
	}
}

func TestLimitsMatchSpec(t *testing.T) {
	if MaxFrameBytes != 4_194_368 || MaxDeltaImages != 349_525 || SnapshotChunkBuckets != 524_288 || MaxBucketCount != 16_777_216 {
		t.Fatalf("limits %d %d %d %d", MaxFrameBytes, MaxDeltaImages, SnapshotChunkBuckets, MaxBucketCount)
	}
	// The largest delta fits in a frame, one more image would not.
	if DeltaFrameLen(MaxDeltaImages) > MaxFrameBytes || DeltaFrameLen(MaxDeltaImages+1) <= MaxFrameBytes {
		t.Fatal("MaxDeltaImages is not the frame bound")
	}
	if ChunkFrameLen(SnapshotChunkBuckets) != MaxFrameBytes {
		t.Fatal("a full chunk is not the largest frame")
	}
}
