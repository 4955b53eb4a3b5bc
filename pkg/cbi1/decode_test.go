package cbi1_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
)

// reseal recomputes the checksum so a test can reach the checks after it.
func reseal(frame []byte) []byte {
	binary.LittleEndian.PutUint32(frame[44:48], cbi1.Checksum(frame[cbi1.HeaderLen:]))
	return frame
}

func kindOf(t *testing.T, err error) cbi1.ErrorKind {
	t.Helper()
	var e *cbi1.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *cbi1.Error", err, err)
	}
	return e.Kind
}

// Each case breaks one check and, where possible, every later check too, so
// that only the §5.1 order decides which error is reported.
func TestDecodeCheckOrder(t *testing.T) {
	f := mustFormat(t, 0x5EED, 1024)
	v1 := mustHex(t, vectorV1)
	mut := func(edit func(b []byte) []byte) []byte { return edit(bytes.Clone(v1)) }
	badLater := func(b []byte) []byte {
		// Breaks format version, fingerprint bits, slots, seed and flags.
		b[6], b[7] = 9, 9
		b[8], b[9], b[10] = 17, 5, 2
		b[12] ^= 1
		return b
	}
	cases := []struct {
		name  string
		frame []byte
		want  cbi1.ErrorKind
	}{
		{"truncated 47 bytes", v1[:47], cbi1.ErrTruncated},
		{"empty", nil, cbi1.ErrTruncated},
		{"too large beats bad magic", make([]byte, cbi1.MaxFrameBytes+1), cbi1.ErrFrameTooLarge},
		{"magic beats version", mut(func(b []byte) []byte { b[0] = 'X'; b[4] = 2; return badLater(b) }), cbi1.ErrMagic},
		{"wire version beats checksum", mut(func(b []byte) []byte { b[4] = 2; b[60] ^= 1; return badLater(b) }), cbi1.ErrWireVersion},
		{"checksum beats format", mut(func(b []byte) []byte { b[60] ^= 1; return badLater(b) }), cbi1.ErrChecksum},
		{"format version beats fingerprint", mut(func(b []byte) []byte { return reseal(badLater(b)) }), cbi1.ErrFormatVersion},
		{"fingerprint beats slots", mut(func(b []byte) []byte { b = badLater(b); b[10] = 1; return reseal(b) }), cbi1.ErrFingerprintBits},
		{"slots beat seed", mut(func(b []byte) []byte { b = badLater(b); b[10], b[8] = 1, 16; return reseal(b) }), cbi1.ErrSlotsPerBucket},
		{"seed mismatch beats flags", mut(func(b []byte) []byte { b = badLater(b); b[10], b[8], b[9] = 1, 16, 4; return reseal(b) }), cbi1.ErrFormatMismatch},
		{"bucket count mismatch", mut(func(b []byte) []byte { b[21] = 8; return b }), cbi1.ErrFormatMismatch},
		{"flags", mut(func(b []byte) []byte { b[6], b[7] = 3, 0; return b }), cbi1.ErrFlags},
		{"flags 0", mut(func(b []byte) []byte { b[6] = 0; return b }), cbi1.ErrFlags},
		{"flags both", mut(func(b []byte) []byte { b[6] = 3; return b }), cbi1.ErrFlags},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := cbi1.Decode(f, c.frame)
			if got := kindOf(t, err); got != c.want {
				t.Fatalf("got %v (%v), want %v", got, err, c.want)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("errors.Is(%v, %v) = false", err, c.want)
			}
		})
	}
}

func deltaFrame(t *testing.T, f cbi1.Format, body []byte) []byte {
	t.Helper()
	b, err := cbi1.AppendDelta(nil, f, 7, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return reseal(append(b[:cbi1.HeaderLen], body...))
}

func chunkFrame(t *testing.T, f cbi1.Format, body []byte) []byte {
	t.Helper()
	b, err := cbi1.AppendSnapshotChunk(nil, f, 7, 1, make([]uint64, f.BucketCount()), 0)
	if err != nil {
		t.Fatal(err)
	}
	return reseal(append(b[:cbi1.HeaderLen], body...))
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestDecodeDeltaBodyChecks(t *testing.T) {
	f := mustFormat(t, 0x5EED, 1024)
	image := func(bucket uint32, word uint64) []byte { return cat(le32(bucket), le64(word)) }
	cases := []struct {
		name string
		body []byte
		want cbi1.ErrorKind
	}{
		{"no prefix", make([]byte, 11), cbi1.ErrDeltaBodyTruncated},
		{"count over max beats length", cat(le64(0), le32(cbi1.MaxDeltaImages+1)), cbi1.ErrDeltaImageCount},
		{"count max u32", cat(le64(0), le32(^uint32(0))), cbi1.ErrDeltaImageCount},
		{"short by one byte", cat(le64(0), le32(1), image(1, 1)[:11]), cbi1.ErrDeltaBodyLength},
		{"one byte extra", cat(le64(0), le32(1), image(1, 1), []byte{0}), cbi1.ErrDeltaBodyLength},
		{"empty delta with trailing image", cat(le64(0), le32(0), image(1, 1)), cbi1.ErrDeltaBodyLength},
		{"bucket = bucket_count", cat(le64(0), le32(2), image(5, 1), image(1024, 1)), cbi1.ErrBucketIndex},
		{"bucket max u32", cat(le64(0), le32(1), image(^uint32(0), 1)), cbi1.ErrBucketIndex},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := cbi1.Decode(f, deltaFrame(t, f, c.body))
			if got := kindOf(t, err); got != c.want {
				t.Fatalf("got %v (%v), want %v", got, err, c.want)
			}
		})
	}
	// The last legal bucket decodes.
	fr, err := cbi1.Decode(f, deltaFrame(t, f, cat(le64(9), le32(1), image(1023, 77))))
	if err != nil || fr.Delta.BaseEpoch != 9 || fr.Delta.At(0) != (cbi1.Image{Bucket: 1023, Word: 77}) {
		t.Fatalf("bucket 1023: %+v %v", fr.Delta, err)
	}
}

func TestDecodeChunkBodyChecks(t *testing.T) {
	f := mustFormat(t, 0x5EED, 4)
	prefix := func(index, count uint32, offset uint64) []byte { return cat(le32(index), le32(count), le64(offset)) }
	cases := []struct {
		name string
		body []byte
		want cbi1.ErrorKind
	}{
		{"no prefix", make([]byte, 15), cbi1.ErrChunkBodyTruncated},
		{"count zero beats index", cat(prefix(3, 0, 0), make([]byte, 7)), cbi1.ErrChunkCount},
		{"index = count beats alignment", cat(prefix(1, 1, 0), make([]byte, 7)), cbi1.ErrChunkIndex},
		{"unaligned words beats range", cat(prefix(0, 1, 1<<62), make([]byte, 9)), cbi1.ErrChunkWordAlignment},
		{"offset + words > buckets", cat(prefix(0, 1, 1), make([]byte, 32)), cbi1.ErrChunkRange},
		{"more words than buckets", cat(prefix(0, 1, 0), make([]byte, 40)), cbi1.ErrChunkRange},
		{"offset wraps", cat(prefix(0, 1, ^uint64(0)), make([]byte, 8)), cbi1.ErrChunkRange},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := cbi1.Decode(f, chunkFrame(t, f, c.body))
			if got := kindOf(t, err); got != c.want {
				t.Fatalf("got %v (%v), want %v", got, err, c.want)
			}
		})
	}
	// A partial chunk inside the lane and an empty chunk are structurally valid.
	for _, body := range [][]byte{cat(prefix(0, 2, 2), le64(5), le64(6)), prefix(0, 1, 4)} {
		if _, err := cbi1.Decode(f, chunkFrame(t, f, body)); err != nil {
			t.Errorf("body %x: %v", body, err)
		}
	}
}

// The groups mirror Dynamo's coarse Malformed and Format errors.
func TestErrorGroups(t *testing.T) {
	malformed := []cbi1.ErrorKind{cbi1.ErrDeltaBodyTruncated, cbi1.ErrDeltaBodyLength, cbi1.ErrBucketIndex,
		cbi1.ErrChunkBodyTruncated, cbi1.ErrChunkCount, cbi1.ErrChunkIndex, cbi1.ErrChunkWordAlignment, cbi1.ErrChunkRange}
	format := []cbi1.ErrorKind{cbi1.ErrFormatVersion, cbi1.ErrFingerprintBits, cbi1.ErrSlotsPerBucket, cbi1.ErrFormatMismatch, cbi1.ErrBucketCount}
	other := []cbi1.ErrorKind{cbi1.ErrTruncated, cbi1.ErrFrameTooLarge, cbi1.ErrMagic, cbi1.ErrWireVersion, cbi1.ErrChecksum,
		cbi1.ErrFlags, cbi1.ErrDeltaImageCount, cbi1.ErrSnapshotChunkWordCount, cbi1.ErrSnapshotBucketCount,
		cbi1.ErrChunkSequence, cbi1.ErrIncompleteCoverage}
	check := func(kinds []cbi1.ErrorKind, wantMalformed, wantFormat bool) {
		for _, k := range kinds {
			err := error(&cbi1.Error{Kind: k})
			if errors.Is(err, cbi1.ErrMalformed) != wantMalformed || errors.Is(err, cbi1.ErrFormat) != wantFormat {
				t.Errorf("%v: malformed=%v format=%v", k, errors.Is(err, cbi1.ErrMalformed), errors.Is(err, cbi1.ErrFormat))
			}
			if !errors.Is(err, k) {
				t.Errorf("%v does not match itself", k)
			}
			if k.Error() == "" || err.Error() == "" {
				t.Errorf("%d has no text", k)
			}
		}
	}
	check(malformed, true, false)
	check(format, false, true)
	check(other, false, false)
}

func TestDecodeRejectsInvalidExpectedFormat(t *testing.T) {
	_, err := cbi1.Decode(cbi1.Format{}, mustHex(t, vectorV1))
	if !errors.Is(err, cbi1.ErrBucketCount) {
		t.Fatalf("zero format: %v", err)
	}
}

// Decoded views alias the input rather than copying it.
func TestDecodeViewsAliasInput(t *testing.T) {
	f := mustFormat(t, 0x5EED, 1024)
	frame := mustHex(t, vectorV1)
	fr, err := cbi1.Decode(f, frame)
	if err != nil {
		t.Fatal(err)
	}
	frame[cbi1.HeaderLen+12+4] = 0xEE
	if got := fr.Delta.At(0).Word & 0xFF; got != 0xEE {
		t.Fatalf("view does not alias input: %#x", got)
	}
}

func TestDeltaApplyTo(t *testing.T) {
	f := mustFormat(t, 0x5EED, 1024)
	fr, err := cbi1.Decode(f, mustHex(t, vectorV1))
	if err != nil {
		t.Fatal(err)
	}
	lane := make([]uint64, 1024)
	if err := fr.Delta.ApplyTo(lane); err != nil {
		t.Fatal(err)
	}
	if lane[3] != 0xAAAABBBBCCCCDDDD || lane[1000] != 42 {
		t.Fatalf("lane[3]=%#x lane[1000]=%d", lane[3], lane[1000])
	}
	if err := fr.Delta.ApplyTo(make([]uint64, 16)); !errors.Is(err, cbi1.ErrBucketIndex) {
		t.Fatalf("short lane: %v", err)
	}
}
