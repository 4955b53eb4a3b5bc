package cbi1_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
)

// Byte vectors of docs/kvrelay-v1.md §8.3.
const (
	vectorV1 = "434249310100020010040100ed5e0000000000000004000000000000070000000000000005000000000000004ef6466104000000000000000200000003000000ddddccccbbbbaaaae80300002a00000000000000"
	vectorV2 = "434249310100020010040100ed5e000000000000000400000000000007000000000000000100000000000000f0a4c269000000000000000000000000"
	vectorV3 = "434249310100010010040100ed5e0000000000000200000000000000070000000000000006000000000000009dc0f2370000000001000000000000000000000034120000cdab01000000000000000000"
	vectorV5 = "4342493101000200100401002a0000000000000000040000000000000700000000000000020000000000000098893935010000000000000001000000000000000000000000000000"
	// V4 is 8 256 bytes: this header, the chunk prefix, then 8 192 zero bytes.
	vectorV4Header = "4342493101000100100401002a000000000000000004000000000000070000000000000001000000000000001907caf3"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustFormat(t testing.TB, seed, buckets uint64) cbi1.Format {
	t.Helper()
	f, err := cbi1.NewFormat(seed, buckets)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func vectorV4(t testing.TB) []byte {
	b := mustHex(t, vectorV4Header)
	b = append(b, mustHex(t, "0000000001000000"+"0000000000000000")...)
	return append(b, make([]byte, 8192)...)
}

func TestChecksumIsUnseededXXH3Low32(t *testing.T) {
	// XXH3-64("") = 2d06800538d394c2, XXH3-64("abc") = 78af5f94892f3950.
	if got := cbi1.Checksum(nil); got != 0x38d394c2 {
		t.Errorf("Checksum(\"\") = %#x", got)
	}
	if got := cbi1.Checksum([]byte("abc")); got != 0x892f3950 {
		t.Errorf("Checksum(\"abc\") = %#x", got)
	}
}

func TestVectorV1Delta(t *testing.T) {
	f := mustFormat(t, 0x5EED, 1024)
	images := []cbi1.Image{{Bucket: 3, Word: 0xAAAABBBBCCCCDDDD}, {Bucket: 1000, Word: 42}}
	want := mustHex(t, vectorV1)
	got, err := cbi1.AppendDelta(nil, f, 7, 4, 5, images)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("V1 encode:\n got %x\nwant %x", got, want)
	}
	if len(got) != 84 {
		t.Fatalf("V1 length %d", len(got))
	}
	fr, err := cbi1.Decode(f, want)
	if err != nil {
		t.Fatal(err)
	}
	wantHdr := cbi1.Header{Kind: cbi1.KindDelta, Seed: 0x5EED, BucketCount: 1024, DcID: 7, Epoch: 5, Checksum: 0x6146f64e}
	if fr.Header != wantHdr {
		t.Fatalf("V1 header = %+v, want %+v", fr.Header, wantHdr)
	}
	if fr.Delta.BaseEpoch != 4 {
		t.Fatalf("V1 base epoch = %d", fr.Delta.BaseEpoch)
	}
	gotImages := fr.Delta.AppendImages(nil)
	if len(gotImages) != 2 || gotImages[0] != images[0] || gotImages[1] != images[1] {
		t.Fatalf("V1 images = %+v", gotImages)
	}
}

func TestVectorV2EmptyDelta(t *testing.T) {
	f := mustFormat(t, 0x5EED, 1024)
	want := mustHex(t, vectorV2)
	got, err := cbi1.AppendDelta(nil, f, 7, 0, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("V2 encode:\n got %x\nwant %x", got, want)
	}
	fr, err := cbi1.Decode(f, want)
	if err != nil {
		t.Fatal(err)
	}
	if fr.Header.Checksum != 0x69c2a4f0 || fr.Header.Epoch != 1 || fr.Delta.BaseEpoch != 0 || fr.Delta.Len() != 0 {
		t.Fatalf("V2 decoded = %+v", fr)
	}

	// V2 ‖ 01 fails the checksum.
	_, err = cbi1.Decode(f, append(bytes.Clone(want), 0x01))
	if !errors.Is(err, cbi1.ErrChecksum) {
		t.Errorf("V2||01: %v, want ErrChecksum", err)
	}
	// V2 with flags 0x8000 fails with Flags(0x8000): flags are in the header,
	// outside the checksummed body.
	flags := bytes.Clone(want)
	flags[6], flags[7] = 0x00, 0x80
	_, err = cbi1.Decode(f, flags)
	var e *cbi1.Error
	if !errors.As(err, &e) || e.Kind != cbi1.ErrFlags || e.Got != 0x8000 {
		t.Errorf("V2 flags 0x8000: %v, want Flags(0x8000)", err)
	}
}

func TestVectorV3SnapshotChunk(t *testing.T) {
	f := mustFormat(t, 0x5EED, 2)
	lane := []uint64{0x0001ABCD00001234, 0}
	want := mustHex(t, vectorV3)
	got, err := cbi1.AppendSnapshotChunk(nil, f, 7, 6, lane, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("V3 encode:\n got %x\nwant %x", got, want)
	}
	fr, err := cbi1.Decode(f, want)
	if err != nil {
		t.Fatal(err)
	}
	c := fr.Chunk
	if fr.Header.Kind != cbi1.KindSnapshotChunk || fr.Header.Checksum != 0x37f2c09d || fr.Header.Epoch != 6 ||
		c.Index != 0 || c.Count != 1 || c.BucketOffset != 0 || c.Len() != 2 ||
		c.Word(0) != 0x0001ABCD00001234 || c.Word(1) != 0 {
		t.Fatalf("V3 decoded = %+v", fr)
	}
	// §5.3: slot k is (word >> 16k) & 0xFFFF; bytes 34 12 00 00 cd ab 01 00.
	w := c.Word(0)
	for k, slot := range []uint16{0x1234, 0, 0xABCD, 0x0001} {
		if uint16(w>>(16*k)) != slot {
			t.Errorf("slot %d = %#x, want %#x", k, uint16(w>>(16*k)), slot)
		}
	}
}

func TestVectorV4ZeroSnapshot(t *testing.T) {
	f := mustFormat(t, 42, 1024)
	want := vectorV4(t)
	if len(want) != 8256 {
		t.Fatalf("V4 fixture length %d", len(want))
	}
	got, err := cbi1.AppendSnapshotChunk(nil, f, 7, 1, make([]uint64, 1024), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("V4 encode differs (header %x)", got[:48])
	}
	fr, err := cbi1.Decode(f, want)
	if err != nil {
		t.Fatal(err)
	}
	if fr.Header.Checksum != 0xf3ca0719 || fr.Chunk.Len() != 1024 || fr.Chunk.Count != 1 {
		t.Fatalf("V4 decoded = %+v", fr.Header)
	}
}

func TestVectorV5Delta(t *testing.T) {
	f := mustFormat(t, 42, 1024)
	want := mustHex(t, vectorV5)
	got, err := cbi1.AppendDelta(nil, f, 7, 1, 2, []cbi1.Image{{Bucket: 0, Word: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("V5 encode:\n got %x\nwant %x", got, want)
	}
	fr, err := cbi1.Decode(f, want)
	if err != nil {
		t.Fatal(err)
	}
	if fr.Header.Checksum != 0x35398998 || fr.Delta.BaseEpoch != 1 || fr.Header.Epoch != 2 ||
		fr.Delta.Len() != 1 || fr.Delta.At(0) != (cbi1.Image{}) {
		t.Fatalf("V5 decoded = %+v", fr)
	}
}

// Encoders append: a frame written after existing bytes is the same frame,
// and the existing bytes survive.
func TestAppendKeepsPrefix(t *testing.T) {
	f := mustFormat(t, 0x5EED, 1024)
	prefix := []byte("prefix")
	got, err := cbi1.AppendDelta(bytes.Clone(prefix), f, 7, 4, 5,
		[]cbi1.Image{{Bucket: 3, Word: 0xAAAABBBBCCCCDDDD}, {Bucket: 1000, Word: 42}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:len(prefix)], prefix) || !bytes.Equal(got[len(prefix):], mustHex(t, vectorV1)) {
		t.Fatalf("append changed bytes: %x", got)
	}
}
