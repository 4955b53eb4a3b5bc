package cbi1

import (
	"encoding/binary"
	"fmt"
)

// Frame is a decoded CBI1 frame. Exactly one of Delta and Chunk is meaningful,
// selected by Header.Kind. Both are views into the decoded bytes.
type Frame struct {
	Header Header
	Delta  Delta
	Chunk  Chunk
}

// Delta is a validated delta body: every image is inside the lane.
type Delta struct {
	// BaseEpoch is the epoch the delta applies to (= FilterUpdate.base_sequence).
	BaseEpoch uint64
	// images is exactly Len()·DeltaImageBytes bytes of the input.
	images []byte
}

// Len is the number of images.
func (d Delta) Len() int { return len(d.images) / DeltaImageBytes }

// At returns image i, 0 ≤ i < Len().
func (d Delta) At(i int) Image {
	rec := d.images[i*DeltaImageBytes : i*DeltaImageBytes+DeltaImageBytes]
	return Image{Bucket: binary.LittleEndian.Uint32(rec[0:4]), Word: binary.LittleEndian.Uint64(rec[4:12])}
}

// AppendImages appends every image to dst in wire order.
func (d Delta) AppendImages(dst []Image) []Image {
	for i := range d.Len() {
		dst = append(dst, d.At(i))
	}
	return dst
}

// ApplyTo writes every image into lane, whose length must be the format's
// bucket count (the decoder already bounded every bucket by it). Images are
// absolute, so applying in wire order gives the last image of a bucket.
func (d Delta) ApplyTo(lane []uint64) error {
	n := d.Len()
	for i := range n {
		im := d.At(i)
		if uint64(im.Bucket) >= uint64(len(lane)) {
			return fail(ErrBucketIndex, uint64(im.Bucket), uint64(len(lane)))
		}
		lane[im.Bucket] = im.Word
	}
	return nil
}

// Chunk is a validated snapshot chunk body.
type Chunk struct {
	Index        uint32
	Count        uint32
	BucketOffset uint64
	// words is exactly Len()·8 bytes of the input.
	words []byte
}

// Len is the number of bucket words.
func (c Chunk) Len() int { return len(c.words) / 8 }

// Word returns the word of bucket BucketOffset+i, 0 ≤ i < Len().
func (c Chunk) Word(i int) uint64 { return binary.LittleEndian.Uint64(c.words[i*8 : i*8+8]) }

// CopyWords decodes min(Len(), len(dst)) words into dst and returns how many.
func (c Chunk) CopyWords(dst []uint64) int {
	n := min(c.Len(), len(dst))
	src := c.words[:n*8]
	dst = dst[:n]
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint64(src[i*8 : i*8+8])
	}
	return n
}

// Decode validates frame against the expected format and returns a view of
// it. Checks run in this order, and the first failure is returned:
//
//	length ≥ HeaderLen (ErrTruncated) → length ≤ MaxFrameBytes (ErrFrameTooLarge)
//	→ magic (ErrMagic) → wire version (ErrWireVersion) → checksum (ErrChecksum)
//	→ format version, fingerprint bits, slots per bucket (ErrFormatVersion,
//	ErrFingerprintBits, ErrSlotsPerBucket) → seed and bucket_count equal to
//	expected (ErrFormatMismatch) → flags (ErrFlags) → body.
//
// The checksum is verified before any format field is trusted, so a corrupted
// frame is reported as corrupt rather than as a format drift. Decode does not
// allocate unless it fails. An invalid expected Format (the zero value) is
// reported as ErrBucketCount before the frame is looked at.
func Decode(expected Format, frame []byte) (Frame, error) {
	if !expected.valid() {
		return Frame{}, fail(ErrBucketCount, expected.bucketCount, MaxBucketCount)
	}
	if len(frame) < HeaderLen {
		return Frame{}, &Error{Kind: ErrTruncated, Got: uint64(len(frame)), Limit: HeaderLen}
	}
	if len(frame) > MaxFrameBytes {
		return Frame{}, fail(ErrFrameTooLarge, uint64(len(frame)), MaxFrameBytes)
	}
	h := frame[:HeaderLen]
	if string(h[0:4]) != magic {
		return Frame{}, fail(ErrMagic, uint64(binary.LittleEndian.Uint32(h[0:4])), 0)
	}
	if v := binary.LittleEndian.Uint16(h[4:6]); v != WireVersion {
		return Frame{}, fail(ErrWireVersion, uint64(v), uint64(WireVersion))
	}
	body := frame[HeaderLen:]
	sum := binary.LittleEndian.Uint32(h[44:48])
	if got := Checksum(body); got != sum {
		return Frame{}, fail(ErrChecksum, uint64(got), uint64(sum))
	}
	if v := binary.LittleEndian.Uint16(h[10:12]); v != FormatVersion {
		return Frame{}, fail(ErrFormatVersion, uint64(v), uint64(FormatVersion))
	}
	if h[8] != FingerprintBits {
		return Frame{}, fail(ErrFingerprintBits, uint64(h[8]), uint64(FingerprintBits))
	}
	if h[9] != SlotsPerBucket {
		return Frame{}, fail(ErrSlotsPerBucket, uint64(h[9]), uint64(SlotsPerBucket))
	}
	hdr := Header{
		Kind:        Kind(binary.LittleEndian.Uint16(h[6:8])),
		Seed:        binary.LittleEndian.Uint64(h[12:20]),
		BucketCount: binary.LittleEndian.Uint64(h[20:28]),
		DcID:        binary.LittleEndian.Uint64(h[28:36]),
		Epoch:       binary.LittleEndian.Uint64(h[36:44]),
		Checksum:    sum,
	}
	if hdr.Seed != expected.seed || hdr.BucketCount != expected.bucketCount {
		return Frame{}, &Error{Kind: ErrFormatMismatch, Got: hdr.BucketCount, Limit: expected.bucketCount,
			Detail: fmt.Sprintf("expected seed %#x buckets %d, frame has seed %#x buckets %d",
				expected.seed, expected.bucketCount, hdr.Seed, hdr.BucketCount)}
	}
	switch hdr.Kind {
	case KindDelta:
		d, err := decodeDeltaBody(hdr.BucketCount, body)
		return Frame{Header: hdr, Delta: d}, err
	case KindSnapshotChunk:
		c, err := decodeChunkBody(hdr.BucketCount, body)
		return Frame{Header: hdr, Chunk: c}, err
	}
	return Frame{}, fail(ErrFlags, uint64(hdr.Kind), 0)
}

// decodeDeltaBody checks, in order: prefix present, image count within
// MaxDeltaImages, exact body length, every bucket inside the lane. The count
// is bounded before the length so that an absurd count is named as such.
func decodeDeltaBody(bucketCount uint64, body []byte) (Delta, error) {
	if len(body) < DeltaBodyPrefix {
		return Delta{}, fail(ErrDeltaBodyTruncated, uint64(len(body)), DeltaBodyPrefix)
	}
	base := binary.LittleEndian.Uint64(body[0:8])
	count := uint64(binary.LittleEndian.Uint32(body[8:12]))
	if count > MaxDeltaImages {
		return Delta{}, fail(ErrDeltaImageCount, count, MaxDeltaImages)
	}
	// count ≤ MaxDeltaImages keeps this far from overflow on any platform.
	want := DeltaBodyPrefix + count*DeltaImageBytes
	if uint64(len(body)) != want {
		return Delta{}, fail(ErrDeltaBodyLength, uint64(len(body)), want)
	}
	images := body[DeltaBodyPrefix:]
	for i := 0; i+DeltaImageBytes <= len(images); i += DeltaImageBytes {
		if b := binary.LittleEndian.Uint32(images[i : i+4]); uint64(b) >= bucketCount {
			return Delta{}, fail(ErrBucketIndex, uint64(b), bucketCount)
		}
	}
	return Delta{BaseEpoch: base, images: images}, nil
}

// decodeChunkBody checks, in order: prefix present, chunk_count ≠ 0,
// chunk_index < chunk_count, word area a multiple of 8, at most
// SnapshotChunkBuckets words, bucket_offset + words ≤ bucket_count.
func decodeChunkBody(bucketCount uint64, body []byte) (Chunk, error) {
	if len(body) < ChunkBodyPrefix {
		return Chunk{}, fail(ErrChunkBodyTruncated, uint64(len(body)), ChunkBodyPrefix)
	}
	index := binary.LittleEndian.Uint32(body[0:4])
	count := binary.LittleEndian.Uint32(body[4:8])
	offset := binary.LittleEndian.Uint64(body[8:16])
	if count == 0 {
		return Chunk{}, fail(ErrChunkCount, 0, 0)
	}
	if index >= count {
		return Chunk{}, fail(ErrChunkIndex, uint64(index), uint64(count))
	}
	words := body[ChunkBodyPrefix:]
	if len(words)%8 != 0 {
		return Chunk{}, fail(ErrChunkWordAlignment, uint64(len(words)), 8)
	}
	n := uint64(len(words) / 8)
	if n > SnapshotChunkBuckets {
		return Chunk{}, fail(ErrSnapshotChunkWordCount, n, SnapshotChunkBuckets)
	}
	// Written as a subtraction so a huge offset cannot wrap around.
	if n > bucketCount || offset > bucketCount-n {
		return Chunk{}, &Error{Kind: ErrChunkRange, Got: offset, Limit: bucketCount,
			Detail: fmt.Sprintf("offset %d + %d words > %d buckets", offset, n, bucketCount)}
	}
	return Chunk{Index: index, Count: count, BucketOffset: offset, words: words}, nil
}
