package cbi1

import (
	"encoding/binary"
	"slices"

	"github.com/zeebo/xxh3"
)

// AppendDelta appends the delta frame that moves a lane of format f from
// baseEpoch to epoch by the absolute images, and returns the extended buffer.
// It rejects more than MaxDeltaImages images (ErrDeltaImageCount) and any
// image outside the lane (ErrBucketIndex) before writing anything, so on error
// dst is returned unchanged. It allocates only if dst lacks capacity for
// DeltaFrameLen(len(images)) more bytes.
func AppendDelta(dst []byte, f Format, dcID, baseEpoch, epoch uint64, images []Image) ([]byte, error) {
	if !f.valid() {
		return dst, fail(ErrBucketCount, f.bucketCount, MaxBucketCount)
	}
	if len(images) > MaxDeltaImages {
		return dst, fail(ErrDeltaImageCount, uint64(len(images)), MaxDeltaImages)
	}
	for _, im := range images {
		if uint64(im.Bucket) >= f.bucketCount {
			return dst, fail(ErrBucketIndex, uint64(im.Bucket), f.bucketCount)
		}
	}
	start := len(dst)
	dst, frame := extend(dst, DeltaFrameLen(len(images)))
	putHeader(frame, KindDelta, f, dcID, epoch)
	body := frame[HeaderLen:]
	binary.LittleEndian.PutUint64(body[0:], baseEpoch)
	binary.LittleEndian.PutUint32(body[8:], uint32(len(images)))
	// Reslicing to exactly the image area lets the compiler drop the bounds
	// checks inside the loop.
	area := body[DeltaBodyPrefix:]
	for i, im := range images {
		rec := area[i*DeltaImageBytes : i*DeltaImageBytes+DeltaImageBytes]
		binary.LittleEndian.PutUint32(rec[0:4], im.Bucket)
		binary.LittleEndian.PutUint64(rec[4:12], im.Word)
	}
	sealChecksum(dst[start:])
	return dst, nil
}

// AppendSnapshotChunk appends chunk index of the snapshot of lane, a full
// word table of format f, at the given epoch. lane must hold exactly
// f.BucketCount() words (ErrSnapshotBucketCount) and index must be below
// f.ChunkCount() (ErrChunkIndex). Chunk k carries buckets
// [k·SnapshotChunkBuckets, min((k+1)·SnapshotChunkBuckets, bucket_count)).
func AppendSnapshotChunk(dst []byte, f Format, dcID, epoch uint64, lane []uint64, index uint32) ([]byte, error) {
	if !f.valid() {
		return dst, fail(ErrBucketCount, f.bucketCount, MaxBucketCount)
	}
	if uint64(len(lane)) != f.bucketCount {
		return dst, fail(ErrSnapshotBucketCount, uint64(len(lane)), f.bucketCount)
	}
	count := f.ChunkCount()
	if index >= count {
		return dst, fail(ErrChunkIndex, uint64(index), uint64(count))
	}
	lo := uint64(index) * SnapshotChunkBuckets
	hi := min(lo+SnapshotChunkBuckets, f.bucketCount)
	words := lane[lo:hi]

	start := len(dst)
	dst, frame := extend(dst, ChunkFrameLen(len(words)))
	putHeader(frame, KindSnapshotChunk, f, dcID, epoch)
	body := frame[HeaderLen:]
	binary.LittleEndian.PutUint32(body[0:], index)
	binary.LittleEndian.PutUint32(body[4:], count)
	binary.LittleEndian.PutUint64(body[8:], lo)
	area := body[ChunkBodyPrefix:]
	area = area[:len(words)*8]
	for i, w := range words {
		binary.LittleEndian.PutUint64(area[i*8:i*8+8], w)
	}
	sealChecksum(dst[start:])
	return dst, nil
}

// EncodeSnapshot encodes every chunk of the snapshot of lane in order and
// hands each to emit. All chunks are built in buf, which is reused from one
// chunk to the next, so emit must copy or fully consume frame before
// returning. It returns the (possibly grown) buffer for the next snapshot and
// stops at the first error, from validation or from emit (returned as is).
func EncodeSnapshot(buf []byte, f Format, dcID, epoch uint64, lane []uint64, emit func(index, count uint32, frame []byte) error) ([]byte, error) {
	if !f.valid() {
		return buf, fail(ErrBucketCount, f.bucketCount, MaxBucketCount)
	}
	count := f.ChunkCount()
	for i := range count {
		var err error
		buf, err = AppendSnapshotChunk(buf[:0], f, dcID, epoch, lane, i)
		if err != nil {
			return buf, err
		}
		if err := emit(i, count, buf); err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// extend grows dst by n bytes and returns it with the new region.
func extend(dst []byte, n int) ([]byte, []byte) {
	dst = slices.Grow(dst, n)
	l := len(dst)
	dst = dst[:l+n]
	return dst, dst[l:]
}

// putHeader writes everything but the checksum, which depends on the body.
func putHeader(frame []byte, kind Kind, f Format, dcID, epoch uint64) {
	h := frame[:HeaderLen]
	copy(h[0:4], magic)
	binary.LittleEndian.PutUint16(h[4:6], WireVersion)
	binary.LittleEndian.PutUint16(h[6:8], uint16(kind))
	h[8] = FingerprintBits
	h[9] = SlotsPerBucket
	binary.LittleEndian.PutUint16(h[10:12], FormatVersion)
	binary.LittleEndian.PutUint64(h[12:20], f.seed)
	binary.LittleEndian.PutUint64(h[20:28], f.bucketCount)
	binary.LittleEndian.PutUint64(h[28:36], dcID)
	binary.LittleEndian.PutUint64(h[36:44], epoch)
}

func sealChecksum(frame []byte) {
	binary.LittleEndian.PutUint32(frame[HeaderLen-4:HeaderLen], Checksum(frame[HeaderLen:]))
}

// Checksum is the CBI1 body checksum: the low 32 bits of XXH3-64 with seed 0.
func Checksum(body []byte) uint32 { return uint32(xxh3.Hash(body)) }
