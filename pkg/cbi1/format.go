package cbi1

import (
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Fixed values of the CBI1 wire format (§5.1, §5.2).
const (
	// HeaderLen is the size of the frame header.
	HeaderLen = 48
	// WireVersion is the only CBI1 header version.
	WireVersion uint16 = 1
	// FormatVersion, FingerprintBits and SlotsPerBucket are the only CKF
	// format this codec carries.
	FormatVersion   uint16 = 1
	FingerprintBits uint8  = 16
	SlotsPerBucket  uint8  = 4

	// SnapshotChunkBuckets bounds the words of one snapshot chunk (4 MiB).
	SnapshotChunkBuckets = 512 * 1024
	// MaxBucketCount is the largest lane a format may declare.
	MaxBucketCount = 1 << 24
	// ChunkBodyPrefix is chunk_index, chunk_count and bucket_offset.
	ChunkBodyPrefix = 16
	// DeltaBodyPrefix is base_epoch and image_count.
	DeltaBodyPrefix = 12
	// DeltaImageBytes is one (u32 bucket, u64 word) image.
	DeltaImageBytes = 12
	// MaxFrameBytes is the largest frame: a full snapshot chunk.
	MaxFrameBytes = HeaderLen + ChunkBodyPrefix + SnapshotChunkBuckets*8
	// MaxDeltaImages is how many images fit in MaxFrameBytes (349 525). A
	// publication with more images must be sent as a snapshot instead.
	MaxDeltaImages = (MaxFrameBytes - HeaderLen - DeltaBodyPrefix) / DeltaImageBytes
)

// magic is the frame's first four bytes, "CBI1".
const magic = "CBI1"

// Kind is the header flags field: what the body is.
type Kind uint16

const (
	// KindSnapshotChunk marks one chunk of a snapshot.
	KindSnapshotChunk Kind = 1
	// KindDelta marks a delta of absolute bucket images.
	KindDelta Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindSnapshotChunk:
		return "snapshot_chunk"
	case KindDelta:
		return "delta"
	}
	return fmt.Sprintf("Kind(%#04x)", uint16(k))
}

// Format is the part of the CKF format a frame must agree with: the
// addressing seed and the lane size. Its fields are unexported so that every
// Format in use went through NewFormat; the zero Format is invalid and every
// encoder and decoder rejects it.
type Format struct {
	seed        uint64
	bucketCount uint64
}

// NewFormat returns the format of a lane of bucketCount buckets addressed with
// seed. bucketCount must be a power of two in 2..=MaxBucketCount.
func NewFormat(seed, bucketCount uint64) (Format, error) {
	if !validBucketCount(bucketCount) {
		return Format{}, &Error{Kind: ErrBucketCount, Got: bucketCount, Limit: MaxBucketCount}
	}
	return Format{seed: seed, bucketCount: bucketCount}, nil
}

// FormatOf converts a ckf format identity, rejecting any format CBI1 cannot
// carry (another version, fingerprint width or slot count).
func FormatOf(id ckf.FormatIdentity) (Format, error) {
	switch {
	case id.FormatVersion != FormatVersion:
		return Format{}, &Error{Kind: ErrFormatVersion, Got: uint64(id.FormatVersion), Limit: uint64(FormatVersion)}
	case id.FingerprintBits != FingerprintBits:
		return Format{}, &Error{Kind: ErrFingerprintBits, Got: uint64(id.FingerprintBits), Limit: uint64(FingerprintBits)}
	case id.SlotsPerBucket != SlotsPerBucket:
		return Format{}, &Error{Kind: ErrSlotsPerBucket, Got: uint64(id.SlotsPerBucket), Limit: uint64(SlotsPerBucket)}
	}
	return NewFormat(id.Seed, id.BucketCount)
}

// Seed is the CKF addressing seed.
func (f Format) Seed() uint64 { return f.seed }

// BucketCount is the number of buckets of the lane.
func (f Format) BucketCount() uint64 { return f.bucketCount }

// Identity returns the equivalent ckf format identity.
func (f Format) Identity() ckf.FormatIdentity { return ckf.NewFormatIdentity(f.seed, f.bucketCount) }

// ChunkCount is how many chunks a snapshot of this lane has.
func (f Format) ChunkCount() uint32 { return ChunkCount(f.bucketCount) }

func (f Format) String() string {
	return fmt.Sprintf("cbi1.Format{seed: %#x, buckets: %d}", f.seed, f.bucketCount)
}

func (f Format) valid() bool { return validBucketCount(f.bucketCount) }

func validBucketCount(n uint64) bool {
	return n >= 2 && n <= MaxBucketCount && n&(n-1) == 0
}

// ChunkCount is ceil(bucketCount / SnapshotChunkBuckets): the chunks of one
// snapshot of a bucketCount-bucket lane.
func ChunkCount(bucketCount uint64) uint32 {
	return uint32((bucketCount + SnapshotChunkBuckets - 1) / SnapshotChunkBuckets)
}

// DeltaFrameLen is the encoded size of a delta of n images.
func DeltaFrameLen(n int) int { return HeaderLen + DeltaBodyPrefix + n*DeltaImageBytes }

// ChunkFrameLen is the encoded size of a snapshot chunk of n words.
func ChunkFrameLen(n int) int { return HeaderLen + ChunkBodyPrefix + n*8 }

// Image is one absolute bucket word of a delta.
type Image struct {
	Bucket uint32
	Word   uint64
}

// Header is the decoded, validated 48-byte frame header. The constant fields
// (magic, versions, fingerprint width, slot count) are not kept: a Header only
// exists once they matched.
type Header struct {
	Kind        Kind
	Seed        uint64
	BucketCount uint64
	DcID        uint64
	Epoch       uint64
	Checksum    uint32
}
