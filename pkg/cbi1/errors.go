package cbi1

import "fmt"

// ErrorKind names one check of the codec. Every kind is itself an error, so
// callers match with errors.Is(err, cbi1.ErrChecksum); the *Error returned by
// the codec wraps exactly one kind and carries the offending value.
type ErrorKind uint8

// Frame checks, in the order Decode applies them (§5.1).
const (
	// ErrTruncated: the frame is shorter than the header.
	ErrTruncated ErrorKind = iota + 1
	// ErrFrameTooLarge: the frame exceeds MaxFrameBytes.
	ErrFrameTooLarge
	// ErrMagic: the frame does not start with "CBI1".
	ErrMagic
	// ErrWireVersion: the header version is not WireVersion.
	ErrWireVersion
	// ErrChecksum: the body does not hash to the header checksum.
	ErrChecksum
	// ErrFormatVersion: the CKF format version is not 1.
	ErrFormatVersion
	// ErrFingerprintBits: the fingerprint width is not 16.
	ErrFingerprintBits
	// ErrSlotsPerBucket: the slot count is not 4.
	ErrSlotsPerBucket
	// ErrFormatMismatch: seed or bucket_count differ from the expected format.
	ErrFormatMismatch
	// ErrFlags: the flags are neither snapshot chunk nor delta.
	ErrFlags
)

// Delta body checks, in order.
const (
	// ErrDeltaBodyTruncated: the body is shorter than base_epoch+image_count.
	ErrDeltaBodyTruncated ErrorKind = iota + 20
	// ErrDeltaImageCount: more than MaxDeltaImages images (also an encoder
	// input error).
	ErrDeltaImageCount
	// ErrDeltaBodyLength: the body is not exactly 12 + 12·image_count bytes.
	ErrDeltaBodyLength
	// ErrBucketIndex: an image names a bucket outside the lane (also an
	// encoder input error).
	ErrBucketIndex
)

// Snapshot chunk body checks, in order.
const (
	// ErrChunkBodyTruncated: the body is shorter than the chunk prefix.
	ErrChunkBodyTruncated ErrorKind = iota + 40
	// ErrChunkCount: chunk_count is 0.
	ErrChunkCount
	// ErrChunkIndex: chunk_index is not below chunk_count (also an encoder
	// input error).
	ErrChunkIndex
	// ErrChunkWordAlignment: the word area is not a multiple of 8 bytes.
	ErrChunkWordAlignment
	// ErrSnapshotChunkWordCount: more than SnapshotChunkBuckets words.
	ErrSnapshotChunkWordCount
	// ErrChunkRange: bucket_offset + words exceeds bucket_count.
	ErrChunkRange
)

// Encoder input and format construction checks.
const (
	// ErrBucketCount: a bucket count is not a power of two in 2..=2^24.
	ErrBucketCount ErrorKind = iota + 60
	// ErrSnapshotBucketCount: the lane handed to the snapshot encoder does not
	// have bucket_count words.
	ErrSnapshotBucketCount
)

// Snapshot assembly checks (§5.3).
const (
	// ErrChunkSequence: a chunk does not continue the snapshot being
	// assembled (gap, overlap, reorder, other epoch, chunk count, lane or DC),
	// or the frame is not a snapshot chunk. The assembly is discarded.
	ErrChunkSequence ErrorKind = iota + 80
	// ErrIncompleteCoverage: the last chunk arrived but the chunks did not
	// cover every bucket of the lane.
	ErrIncompleteCoverage
)

// Groups. They are never returned on their own; errors.Is matches them
// against every kind of the group, mirroring Dynamo's coarser error enum
// (Malformed and Format(..)) for callers that only need that distinction.
const (
	// ErrMalformed groups the structural body checks.
	ErrMalformed ErrorKind = iota + 100
	// ErrFormat groups the CKF format checks.
	ErrFormat
)

// text is a switch, not a package map, so the package holds no mutable state.
func (k ErrorKind) text() string {
	switch k {
	case ErrTruncated:
		return "frame shorter than the CBI1 header"
	case ErrFrameTooLarge:
		return "frame exceeds the CBI1 maximum"
	case ErrMagic:
		return "bad CBI1 magic"
	case ErrWireVersion:
		return "unsupported CBI1 wire version"
	case ErrChecksum:
		return "CBI1 body checksum mismatch"
	case ErrFormatVersion:
		return "unsupported CKF format version"
	case ErrFingerprintBits:
		return "unsupported fingerprint width"
	case ErrSlotsPerBucket:
		return "unsupported slots per bucket"
	case ErrFormatMismatch:
		return "CKF format mismatch"
	case ErrFlags:
		return "unknown CBI1 frame flags"
	case ErrDeltaBodyTruncated:
		return "delta body shorter than its prefix"
	case ErrDeltaImageCount:
		return "delta image count exceeds the CBI1 maximum"
	case ErrDeltaBodyLength:
		return "delta body length does not match its image count"
	case ErrBucketIndex:
		return "bucket outside the lane"
	case ErrChunkBodyTruncated:
		return "snapshot chunk body shorter than its prefix"
	case ErrChunkCount:
		return "snapshot chunk count is zero"
	case ErrChunkIndex:
		return "snapshot chunk index not below chunk count"
	case ErrChunkWordAlignment:
		return "snapshot chunk word area not a multiple of 8 bytes"
	case ErrSnapshotChunkWordCount:
		return "snapshot chunk word count exceeds the CBI1 maximum"
	case ErrChunkRange:
		return "snapshot chunk extends past the lane"
	case ErrBucketCount:
		return "bucket count is not a power of two in 2..=16777216"
	case ErrSnapshotBucketCount:
		return "snapshot lane length differs from the format's bucket count"
	case ErrChunkSequence:
		return "snapshot chunk sequence violation"
	case ErrIncompleteCoverage:
		return "snapshot chunks do not cover the lane"
	case ErrMalformed:
		return "CBI1 frame body is malformed"
	case ErrFormat:
		return "CKF format not accepted"
	}
	return ""
}

func (k ErrorKind) Error() string {
	if s := k.text(); s != "" {
		return "cbi1: " + s
	}
	return fmt.Sprintf("cbi1: error kind %d", uint8(k))
}

// Is lets errors.Is match a kind against its group.
func (k ErrorKind) Is(target error) bool {
	switch target {
	case ErrMalformed:
		switch k {
		case ErrDeltaBodyTruncated, ErrDeltaBodyLength, ErrBucketIndex,
			ErrChunkBodyTruncated, ErrChunkCount, ErrChunkIndex, ErrChunkWordAlignment, ErrChunkRange:
			return true
		}
	case ErrFormat:
		switch k {
		case ErrFormatVersion, ErrFingerprintBits, ErrSlotsPerBucket, ErrFormatMismatch, ErrBucketCount:
			return true
		}
	}
	return false
}

// Error is a failed codec check with the value that failed it. Got and Limit
// are meaningful per kind (for example the frame length and MaxFrameBytes, or
// the flags for ErrFlags); Detail names what an assembly check compared.
type Error struct {
	Kind   ErrorKind
	Got    uint64
	Limit  uint64
	Detail string
}

func (e *Error) Error() string {
	msg := e.Kind.Error()
	if e.Detail != "" {
		return msg + ": " + e.Detail
	}
	switch e.Kind {
	case ErrTruncated:
		return fmt.Sprintf("%s: %d bytes, need %d", msg, e.Got, e.Limit)
	case ErrChecksum:
		return fmt.Sprintf("%s: body hashes to %#08x, header says %#08x", msg, e.Got, e.Limit)
	case ErrMagic, ErrChunkSequence, ErrChunkCount:
		return msg
	case ErrWireVersion, ErrFormatVersion, ErrFingerprintBits, ErrSlotsPerBucket:
		return fmt.Sprintf("%s %d (expected %d)", msg, e.Got, e.Limit)
	case ErrFlags:
		return fmt.Sprintf("%s %#06x", msg, e.Got)
	case ErrIncompleteCoverage:
		return fmt.Sprintf("%s: covered %d of %d buckets", msg, e.Got, e.Limit)
	}
	return fmt.Sprintf("%s: %d (limit %d)", msg, e.Got, e.Limit)
}

// Unwrap exposes the kind to errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Kind }

func fail(k ErrorKind, got, limit uint64) error {
	return &Error{Kind: k, Got: got, Limit: limit}
}
