package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/zeebo/xxh3"
)

func testWords(n uint64) []uint64 {
	w := make([]uint64, n)
	for i := range w {
		if i%3 != 0 {
			w[i] = uint64(i+1) * 0x9E3779B97F4A7C15
		}
	}
	return w
}

func TestSnapshotBodyRoundTrip(t *testing.T) {
	for _, n := range []uint64{2, 1024, snapshotChunk/8 + 3} {
		f := ckf.NewFormatIdentity(0x5EED, n)
		if n&(n-1) != 0 {
			f.BucketCount = 1 << 14 // a count that spans several read chunks
			n = f.BucketCount
		}
		words := testWords(n)
		body, err := EncodeSnapshotBody([]byte("hdr"), f, words)
		if err != nil {
			t.Fatal(err)
		}
		if string(body[:3]) != "hdr" {
			t.Fatal("dst not kept")
		}
		body = body[3:]
		if uint64(len(body)) != SnapshotBodySize(n) {
			t.Fatalf("body %d bytes, SnapshotBodySize %d", len(body), SnapshotBodySize(n))
		}
		if got, err := SnapshotBodyFormat(body); err != nil || got != f {
			t.Fatalf("SnapshotBodyFormat = %+v, %v", got, err)
		}
		got, err := DecodeSnapshotBody(body, f, nil)
		if err != nil || !slices.Equal(got, words) {
			t.Fatalf("DecodeSnapshotBody: %v", err)
		}
		reuse := make([]uint64, 0, n)
		got, err = DecodeSnapshotBody(body, f, reuse)
		if err != nil || &got[0] != &reuse[:1][0] {
			t.Fatalf("dst capacity not reused: %v", err)
		}
		for name, r := range map[string]io.Reader{
			"reader":   bytes.NewReader(body),
			"one byte": iotest.OneByteReader(bytes.NewReader(body)),
			"half":     iotest.HalfReader(bytes.NewReader(body)),
		} {
			got, err := ReadSnapshotBody(r, f, nil)
			if err != nil || !slices.Equal(got, words) {
				t.Fatalf("ReadSnapshotBody(%s): %v", name, err)
			}
		}
	}
}

func TestSnapshotBodyGolden(t *testing.T) {
	f := ckf.NewFormatIdentity(0x5EED, 2)
	body, err := EncodeSnapshotBody(nil, f, []uint64{0x1122334455667788, 0})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("CKS1\x01\x00\x01\x00\x10\x04\x00\x00\x00\x00\x00\x00" +
		"\xed\x5e\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00" +
		"\x88\x77\x66\x55\x44\x33\x22\x11\x00\x00\x00\x00\x00\x00\x00\x00")
	if !bytes.Equal(body[:len(want)], want) {
		t.Fatalf("header/words drifted:\n got %x\nwant %x", body[:len(want)], want)
	}
	if len(body) != len(want)+8 {
		t.Fatalf("length %d", len(body))
	}
	const wantSum = 0x8b8566a12c9ec55b // pinned: XXH3-64 of the 16 word bytes
	if got := binary.LittleEndian.Uint64(body[len(want):]); got != wantSum {
		t.Fatalf("checksum %#x, want %#x", got, uint64(wantSum))
	}
}

// TestChecksumIsUnseededXXH3 pins the checksum function against the spec's
// CBI1 vector (§18.8), whose checksum is the low 32 bits of unseeded XXH3-64
// over bytes 48.. of the frame.
func TestChecksumIsUnseededXXH3(t *testing.T) {
	frame, err := hex.DecodeString("434249310100020010040100ed5e000000000000000400000000000007000000" +
		"0000000005000000000000004ef6466104000000000000000200000003000000" +
		"ddddccccbbbbaaaae80300002a00000000000000")
	if err != nil {
		t.Fatal(err)
	}
	if got := uint32(xxh3.Hash(frame[48:])); got != 0x6146F64E {
		t.Fatalf("xxh3 low 32 bits %#x, want 0x6146F64E", got)
	}
}

func TestSnapshotBodyRejects(t *testing.T) {
	f := testIdentity().Format
	body, err := EncodeSnapshotBody(nil, f, testWords(f.BucketCount))
	if err != nil {
		t.Fatal(err)
	}
	mut := func(off int, v byte) []byte {
		b := bytes.Clone(body)
		b[off] = v
		return b
	}
	other := f
	other.Seed++
	huge := mut(24+3, 0x01) // bucket count 1024 + 2^24: not a power of two
	bigCount := bytes.Clone(body[:SnapshotHeaderBytes])
	binary.LittleEndian.PutUint64(bigCount[24:], MaxBucketCount)
	cases := []struct {
		name  string
		body  []byte
		want  ckf.FormatIdentity
		kind  ErrorKind
		field string
	}{
		{"empty", nil, f, ErrTruncated, "snapshot_body.header"},
		{"header only", body[:SnapshotHeaderBytes], f, ErrTruncated, "snapshot_body"},
		{"last byte missing", body[:len(body)-1], f, ErrTruncated, "snapshot_body"},
		{"trailing", append(bytes.Clone(body), 0), f, ErrTrailingBytes, "snapshot_body"},
		{"magic", mut(3, '2'), f, ErrMalformed, "snapshot_body.magic"},
		{"version", mut(4, 2), f, ErrVersion, "snapshot_body.version"},
		{"reserved", mut(15, 1), f, ErrMalformed, "snapshot_body.reserved"},
		{"fingerprint bits", mut(8, 8), f, ErrFormatMismatch, "identity.format.fingerprint_bits"},
		{"bucket count", huge, f, ErrFormatMismatch, "identity.format.bucket_count"},
		{"other seed wanted", body, other, ErrFormatMismatch, "snapshot_body.format"},
		// A header claiming 2^24 buckets over a tiny input is truncated,
		// decided before any allocation.
		{"max count, no words", bigCount, ckf.NewFormatIdentity(f.Seed, MaxBucketCount), ErrTruncated, "snapshot_body"},
		{"checksum", mut(SnapshotHeaderBytes, body[SnapshotHeaderBytes]^0xff), f, ErrChecksum, "snapshot_body.checksum"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeSnapshotBody(c.body, c.want, nil)
			wantDecodeError(t, err, c.kind, c.field)
			_, err = ReadSnapshotBody(bytes.NewReader(c.body), c.want, nil)
			field := c.field
			if c.name == "max count, no words" || c.name == "header only" || c.name == "last byte missing" {
				field = "" // the stream reader names the part that ran out
			}
			wantDecodeError(t, err, c.kind, field)
		})
	}
}

func TestReadSnapshotBodyIOError(t *testing.T) {
	f := testIdentity().Format
	body, _ := EncodeSnapshotBody(nil, f, testWords(f.BucketCount))
	boom := errors.New("boom")
	r := io.MultiReader(bytes.NewReader(body[:100]), iotest.ErrReader(boom))
	_, err := ReadSnapshotBody(r, f, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want wrapped boom", err)
	}
	var de *DecodeError
	if errors.As(err, &de) {
		t.Fatal("an I/O error must not pose as a decode error")
	}
}

func TestObjectDigest(t *testing.T) {
	body := []byte("snapshot body")
	sum := sha256.Sum256(body)
	want := "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
	if got := ObjectDigest(sum); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
