package wire

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/zeebo/xxh3"
)

// SnapshotMarker is published on ckf.<domain>.<dc>.snap once the snapshot
// body object is complete in the Object Store. Its position in the lane's
// subject order is the barrier: deltas after it continue Sequence.
type SnapshotMarker struct {
	Identity ckf.ProducerIdentity
	Lease    WireLease
	Sequence uint64
	// BucketCount must equal Identity.Format.BucketCount; it is repeated so a
	// reader can size the body before fetching it.
	BucketCount uint64
	// ObjectBucket and ObjectName locate the body (EncodeSnapshotBody).
	ObjectBucket string
	ObjectName   string
	// Digest is the SHA-256 of the whole body object, the same digest the
	// NATS Object Store records (see ObjectDigest).
	Digest [sha256.Size]byte
	// Size is the body's length in bytes, always SnapshotBodySize(BucketCount).
	Size uint64
}

// NewSnapshotMarker describes body (the output of EncodeSnapshotBody for s)
// stored as objectBucket/objectName. s.Lease (consumer-local) is not carried.
func NewSnapshotMarker(s *ckf.Snapshot, lease WireLease, objectBucket, objectName string, body []byte) SnapshotMarker {
	return SnapshotMarker{
		Identity:     s.Identity,
		Lease:        lease,
		Sequence:     s.Sequence,
		BucketCount:  s.Identity.Format.BucketCount,
		ObjectBucket: objectBucket,
		ObjectName:   objectName,
		Digest:       sha256.Sum256(body),
		Size:         uint64(len(body)),
	}
}

// ToCkf returns the consumer's ckf.Snapshot for words (decoded from the body)
// under the consumer's local lane lease. The result shares words.
func (m *SnapshotMarker) ToCkf(lane ckf.LaneLease, words []uint64) ckf.Snapshot {
	return ckf.Snapshot{Identity: m.Identity, Lease: lane, Sequence: m.Sequence, Buckets: words}
}

// VerifyBody checks a fetched body against the marker's size and digest
// (ErrChecksum). It does not decode the body: use DecodeSnapshotBody.
func (m *SnapshotMarker) VerifyBody(body []byte) error {
	if uint64(len(body)) != m.Size {
		return decodeErr(ErrChecksum, "snapshot.size", "body of %d bytes, marker says %d", len(body), m.Size)
	}
	sum := sha256.Sum256(body)
	if subtle.ConstantTimeCompare(sum[:], m.Digest[:]) != 1 {
		return decodeErr(ErrChecksum, "snapshot.digest", "body SHA-256 %x, marker says %x", sum, m.Digest)
	}
	return nil
}

// VerifyDigest checks the SHA-256 accumulated in h (fed with the body as
// it was streamed) against the marker's digest (ErrChecksum).
func (m *SnapshotMarker) VerifyDigest(h hash.Hash) error {
	var sum [sha256.Size]byte
	if h.Size() != len(sum) {
		return decodeErr(ErrChecksum, "snapshot.digest", "hash of %d bytes, want SHA-256", h.Size())
	}
	h.Sum(sum[:0])
	if subtle.ConstantTimeCompare(sum[:], m.Digest[:]) != 1 {
		return decodeErr(ErrChecksum, "snapshot.digest", "body SHA-256 %x, marker says %x", sum, m.Digest)
	}
	return nil
}

// ObjectDigest formats a SHA-256 digest the way the NATS Object Store reports
// it in ObjectInfo.Digest ("SHA-256=" + base64url), for comparison with a
// marker's Digest.
func ObjectDigest(sum [sha256.Size]byte) string {
	return "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
}

func checkSnapshotMarker(m *SnapshotMarker) error {
	if err := checkIdentity(&m.Identity); err != nil {
		return err
	}
	if err := checkLease(&m.Lease); err != nil {
		return err
	}
	if m.BucketCount != m.Identity.Format.BucketCount {
		return decodeErr(ErrFormatMismatch, "snapshot.bucket_count", "%d, identity format says %d", m.BucketCount, m.Identity.Format.BucketCount)
	}
	if err := checkObjectBucket(m.ObjectBucket); err != nil {
		return err
	}
	if len(m.ObjectName) > MaxObjectNameBytes {
		return decodeErr(ErrTooLarge, "snapshot.object_name", "%d bytes, limit %d", len(m.ObjectName), MaxObjectNameBytes)
	}
	if err := checkText(m.ObjectName, "snapshot.object_name"); err != nil {
		return err
	}
	if want := SnapshotBodySize(m.BucketCount); m.Size != want {
		return decodeErr(ErrMalformed, "snapshot.size", "%d bytes, a body of %d buckets is %d", m.Size, m.BucketCount, want)
	}
	return nil
}

// checkObjectBucket applies the Object Store's bucket name rule
// ([A-Za-z0-9_-]+) and MaxBucketNameBytes.
func checkObjectBucket(s string) error {
	const field = "snapshot.object_bucket"
	if len(s) > MaxBucketNameBytes {
		return decodeErr(ErrTooLarge, field, "%d bytes, limit %d", len(s), MaxBucketNameBytes)
	}
	if s == "" {
		return decodeErr(ErrMalformed, field, "empty bucket name")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return decodeErr(ErrMalformed, field, "byte %d (%q) is not in [A-Za-z0-9_-]", i, c)
		}
	}
	return nil
}

// AppendSnapshotMarker appends the encoding of m to dst. On error it returns
// dst unchanged and an *EncodeError.
func AppendSnapshotMarker(dst []byte, m *SnapshotMarker) ([]byte, error) {
	if err := checkSnapshotMarker(m); err != nil {
		return dst, asEncodeError(err)
	}
	dst = appendPreamble(dst, KindSnapshotMarker, snapshotFields, &m.Identity, &m.Lease)
	dst = appendUint(dst, m.Sequence)
	dst = appendUint(dst, m.BucketCount)
	dst = appendStr(dst, m.ObjectBucket)
	dst = appendStr(dst, m.ObjectName)
	dst = appendBin(dst, m.Digest[:])
	return appendUint(dst, m.Size), nil
}

// DecodeSnapshotMarker decodes one snapshot marker. See DecodeSnapshotMarkerInto.
func DecodeSnapshotMarker(b []byte) (SnapshotMarker, error) {
	var m SnapshotMarker
	err := DecodeSnapshotMarkerInto(b, &m)
	return m, err
}

// DecodeSnapshotMarkerInto decodes one snapshot marker into m. On error it
// returns a *DecodeError and m's contents are unspecified.
func DecodeSnapshotMarkerInto(b []byte, m *SnapshotMarker) error {
	r := reader{b: b}
	if err := r.preamble(KindSnapshotMarker, snapshotFields, &m.Identity, &m.Lease); err != nil {
		return err
	}
	var err error
	if m.Sequence, err = r.uint("snapshot.sequence"); err != nil {
		return err
	}
	if m.BucketCount, err = r.uint("snapshot.bucket_count"); err != nil {
		return err
	}
	p, err := r.str(MaxBucketNameBytes, "snapshot.object_bucket")
	if err != nil {
		return err
	}
	setString(&m.ObjectBucket, p)
	if p, err = r.str(MaxObjectNameBytes, "snapshot.object_name"); err != nil {
		return err
	}
	setString(&m.ObjectName, p)
	if p, err = r.bin(digestBytes, "snapshot.digest"); err != nil {
		return err
	}
	if len(p) != digestBytes {
		return decodeErr(ErrMalformed, "snapshot.digest", "digest of %d bytes, want %d", len(p), digestBytes)
	}
	copy(m.Digest[:], p)
	if m.Size, err = r.uint("snapshot.size"); err != nil {
		return err
	}
	if err := r.end(); err != nil {
		return err
	}
	return checkSnapshotMarker(m)
}

// Snapshot body object layout (all integers little-endian):
//
//	offset size field
//	0      4    magic "CKS1"
//	4      2    body version = 1
//	6      2    format_version
//	8      1    fingerprint_bits
//	9      1    slots_per_bucket
//	10     6    reserved, zero
//	16     8    seed
//	24     8    bucket_count
//	32     8·n  bucket words, n = bucket_count
//	32+8n  8    XXH3-64 (unseeded) of the word bytes
const (
	snapshotMagic       = "CKS1"
	SnapshotBodyVersion = 1
	// SnapshotHeaderBytes is the size of the body header.
	SnapshotHeaderBytes = 32
	snapshotTrailer     = 8
	// MaxSnapshotBodyBytes is the body size at MaxBucketCount (128 MiB + 40).
	MaxSnapshotBodyBytes = SnapshotHeaderBytes + 8*MaxBucketCount + snapshotTrailer
)

// SnapshotBodySize is the body length for a bucket count.
func SnapshotBodySize(bucketCount uint64) uint64 {
	return SnapshotHeaderBytes + 8*bucketCount + snapshotTrailer
}

// EncodeSnapshotBody appends the snapshot body object of words to dst. The
// format must be supported and len(words) must equal format.BucketCount
// (*EncodeError with ErrFormatMismatch otherwise); dst is then unchanged.
func EncodeSnapshotBody(dst []byte, format ckf.FormatIdentity, words []uint64) ([]byte, error) {
	if err := checkFormat(&format); err != nil {
		return dst, asEncodeError(err)
	}
	if uint64(len(words)) != format.BucketCount {
		return dst, &EncodeError{Kind: ErrFormatMismatch, Field: "snapshot_body.words", Detail: fmt.Sprintf("%d words, bucket count %d", len(words), format.BucketCount)}
	}
	size := int(SnapshotBodySize(format.BucketCount))
	start := len(dst)
	dst = append(dst, make([]byte, size)...)
	out := dst[start:]
	putSnapshotHeader(out[:SnapshotHeaderBytes], &format)
	body := out[SnapshotHeaderBytes : size-snapshotTrailer]
	for i, w := range words {
		binary.LittleEndian.PutUint64(body[i*8:], w)
	}
	binary.LittleEndian.PutUint64(out[size-snapshotTrailer:], xxh3.Hash(body))
	return dst, nil
}

func putSnapshotHeader(h []byte, f *ckf.FormatIdentity) {
	copy(h[0:4], snapshotMagic)
	binary.LittleEndian.PutUint16(h[4:6], SnapshotBodyVersion)
	binary.LittleEndian.PutUint16(h[6:8], f.FormatVersion)
	h[8] = f.FingerprintBits
	h[9] = f.SlotsPerBucket
	clear(h[10:16])
	binary.LittleEndian.PutUint64(h[16:24], f.Seed)
	binary.LittleEndian.PutUint64(h[24:32], f.BucketCount)
}

// parseSnapshotHeader checks the 32-byte header and returns its format.
func parseSnapshotHeader(h []byte) (ckf.FormatIdentity, error) {
	if len(h) < SnapshotHeaderBytes {
		return ckf.FormatIdentity{}, decodeErr(ErrTruncated, "snapshot_body.header", "%d bytes, want %d", len(h), SnapshotHeaderBytes)
	}
	if string(h[0:4]) != snapshotMagic {
		return ckf.FormatIdentity{}, decodeErr(ErrMalformed, "snapshot_body.magic", "%q, want %q", h[0:4], snapshotMagic)
	}
	if v := binary.LittleEndian.Uint16(h[4:6]); v != SnapshotBodyVersion {
		return ckf.FormatIdentity{}, decodeErr(ErrVersion, "snapshot_body.version", "body version %d, want %d", v, SnapshotBodyVersion)
	}
	for i := 10; i < 16; i++ {
		if h[i] != 0 {
			return ckf.FormatIdentity{}, decodeErr(ErrMalformed, "snapshot_body.reserved", "byte %d is 0x%02x, want 0", i, h[i])
		}
	}
	f := ckf.FormatIdentity{
		FormatVersion:   binary.LittleEndian.Uint16(h[6:8]),
		FingerprintBits: h[8],
		SlotsPerBucket:  h[9],
		Seed:            binary.LittleEndian.Uint64(h[16:24]),
		BucketCount:     binary.LittleEndian.Uint64(h[24:32]),
	}
	if err := checkFormat(&f); err != nil {
		return ckf.FormatIdentity{}, err
	}
	return f, nil
}

func checkWant(got, want *ckf.FormatIdentity) error {
	if *got != *want {
		return decodeErr(ErrFormatMismatch, "snapshot_body.format", "body format %+v, want %+v", *got, *want)
	}
	return nil
}

// SnapshotBodyFormat checks a body's header and returns the format it
// declares, without reading the words.
func SnapshotBodyFormat(b []byte) (ckf.FormatIdentity, error) {
	return parseSnapshotHeader(b)
}

// DecodeSnapshotBody decodes a snapshot body whose format must equal want
// (the marker identity's format), appending the words to dst[:0] (its
// capacity is reused). Errors (*DecodeError): ErrTruncated, ErrMalformed
// (magic, reserved bytes), ErrVersion, ErrFormatMismatch, ErrTrailingBytes,
// ErrChecksum. The words are allocated only after the input is known to
// hold all of them.
func DecodeSnapshotBody(b []byte, want ckf.FormatIdentity, dst []uint64) ([]uint64, error) {
	f, err := parseSnapshotHeader(b)
	if err != nil {
		return dst, err
	}
	if err := checkWant(&f, &want); err != nil {
		return dst, err
	}
	size := SnapshotBodySize(f.BucketCount)
	if uint64(len(b)) < size {
		return dst, decodeErr(ErrTruncated, "snapshot_body", "%d bytes, a body of %d buckets is %d", len(b), f.BucketCount, size)
	}
	if uint64(len(b)) > size {
		return dst, decodeErr(ErrTrailingBytes, "snapshot_body", "%d bytes after the body end at byte %d", uint64(len(b))-size, size)
	}
	body := b[SnapshotHeaderBytes : size-snapshotTrailer]
	if got, sum := xxh3.Hash(body), binary.LittleEndian.Uint64(b[size-snapshotTrailer:]); got != sum {
		return dst, decodeErr(ErrChecksum, "snapshot_body.checksum", "words hash to %#016x, body says %#016x", got, sum)
	}
	n := int(f.BucketCount)
	words := dst[:0]
	if cap(words) < n {
		words = make([]uint64, n)
	}
	words = words[:n]
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(body[i*8:])
	}
	return words, nil
}

// snapshotChunk is the read size of ReadSnapshotBody.
const snapshotChunk = 64 << 10

// ReadSnapshotBody is DecodeSnapshotBody over a stream (an Object Store
// reader), without holding the body bytes in memory. The words slice is sized
// from want, which the caller trusts, not from the stream. I/O errors are
// returned wrapped; a stream that ends early is ErrTruncated.
func ReadSnapshotBody(r io.Reader, want ckf.FormatIdentity, dst []uint64) ([]uint64, error) {
	var h [SnapshotHeaderBytes]byte
	if err := readFull(r, h[:], "snapshot_body.header"); err != nil {
		return dst, err
	}
	f, err := parseSnapshotHeader(h[:])
	if err != nil {
		return dst, err
	}
	if err := checkWant(&f, &want); err != nil {
		return dst, err
	}
	n := int(f.BucketCount)
	words := dst[:0]
	if cap(words) < n {
		words = make([]uint64, n)
	}
	words = words[:n]
	hasher := xxh3.New()
	buf := make([]byte, snapshotChunk)
	for i := 0; i < n; {
		k := min(n-i, snapshotChunk/8)
		p := buf[:k*8]
		if err := readFull(r, p, "snapshot_body.words"); err != nil {
			return dst, err
		}
		_, _ = hasher.Write(p) // never fails
		for j := range k {
			words[i+j] = binary.LittleEndian.Uint64(p[j*8:])
		}
		i += k
	}
	var tail [snapshotTrailer + 1]byte
	if err := readFull(r, tail[:snapshotTrailer], "snapshot_body.checksum"); err != nil {
		return dst, err
	}
	if got, sum := hasher.Sum64(), binary.LittleEndian.Uint64(tail[:snapshotTrailer]); got != sum {
		return dst, decodeErr(ErrChecksum, "snapshot_body.checksum", "words hash to %#016x, body says %#016x", got, sum)
	}
	k, err := io.ReadFull(r, tail[snapshotTrailer:])
	if k > 0 {
		return dst, decodeErr(ErrTrailingBytes, "snapshot_body", "bytes after the body end at byte %d", SnapshotBodySize(f.BucketCount))
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return dst, fmt.Errorf("wire: read snapshot body: %w", err)
	}
	return words, nil
}

func readFull(r io.Reader, p []byte, field string) error {
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return decodeErr(ErrTruncated, field, "stream ended early")
		}
		return fmt.Errorf("wire: read snapshot body: %w", err)
	}
	return nil
}
