package wire

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Each test below covers one ErrorKind across the messages it can arise in.

type decodeCase struct {
	name  string
	kind  MessageKind
	input []byte
	field string
}

func runDecodeCases(t *testing.T, want ErrorKind, cases []decodeCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decoders[c.kind](c.input)
			wantDecodeError(t, err, want, c.field)
		})
	}
}

func TestDecodeTruncated(t *testing.T) {
	for k, mk := range validArrs {
		b := pack(mk())
		if _, err := decoders[k](b); err != nil {
			t.Fatalf("%v: valid input refused: %v", k, err)
		}
		for n := range len(b) {
			_, err := decoders[k](b[:n])
			if err == nil {
				t.Fatalf("%v: prefix of %d/%d bytes accepted", k, n, len(b))
			}
			wantDecodeError(t, err, ErrTruncated, "")
		}
	}
	runDecodeCases(t, ErrTruncated, []decodeCase{
		// The bin announces 12 images but only one follows.
		{"images shorter than announced", KindDelta, pack(set(deltaArr(), 6, raw(append([]byte{0xc4, 24}, imagesBin(ckf.BucketImage{Bucket: 1})...)))), "images"},
		// A bin32 announcing 4 MB in a 100-byte message must fail without allocating it.
		{"huge bin header", KindDelta, pack(set(deltaArr(), 6, raw{0xc6, 0x00, 0x3f, 0xff, 0xf0})), "images"},
		{"string shorter than announced", KindHeartbeat, pack(set(heartbeatArr(), 5, raw{0xbf, 'r', '1'})), "heartbeat.relay_instance"},
	})
}

func TestDecodeTrailingBytes(t *testing.T) {
	for k, mk := range validArrs {
		for _, tail := range [][]byte{{0}, {0xc0}, pack(mk())} {
			_, err := decoders[k](append(pack(mk()), tail...))
			wantDecodeError(t, err, ErrTrailingBytes, "message")
		}
	}
}

func TestDecodeVersion(t *testing.T) {
	for k, mk := range validArrs {
		for _, v := range []any{0, 2, 255, uint64(math.MaxUint64)} {
			_, err := decoders[k](pack(set(mk(), 0, v)))
			wantDecodeError(t, err, ErrVersion, "version")
		}
		// A future version may change the shape; it is still ErrVersion.
		_, err := decoders[k](pack(arr{2, int(k)}))
		wantDecodeError(t, err, ErrVersion, "version")
	}
}

func TestDecodeKind(t *testing.T) {
	for k, mk := range validArrs {
		for _, bad := range []any{0, 5, 200, uint64(math.MaxUint64)} {
			_, err := decoders[k](pack(set(mk(), 1, bad)))
			wantDecodeError(t, err, ErrKind, "kind")
		}
	}
}

func TestDecodeTooLarge(t *testing.T) {
	big := make([]byte, MaxMessageBytes+1)
	copy(big, pack(deltaArr()))
	tooManyImages := raw{0xc6, 0, 0, 0, 0}
	n := (MaxDeltaImages + 1) * ImageBytes
	tooManyImages[1], tooManyImages[2], tooManyImages[3], tooManyImages[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	runDecodeCases(t, ErrTooLarge, []decodeCase{
		{"message", KindDelta, big, "message"},
		// Only the header of the oversize bin is present: the limit is checked first.
		{"images", KindDelta, pack(set(deltaArr(), 6, tooManyImages)), "images"},
		{"lease instance", KindDrainMarker, pack(set(drainArr(), 3, arr{3, strings.Repeat("i", MaxInstanceBytes+1)})), "lease.instance"},
		{"relay instance", KindHeartbeat, pack(set(heartbeatArr(), 5, strings.Repeat("i", MaxInstanceBytes+1))), "heartbeat.relay_instance"},
		{"object bucket", KindSnapshotMarker, pack(set(snapshotArr(), 6, strings.Repeat("b", MaxBucketNameBytes+1))), "snapshot.object_bucket"},
		{"object name", KindSnapshotMarker, pack(set(snapshotArr(), 7, strings.Repeat("n", MaxObjectNameBytes+1))), "snapshot.object_name"},
		{"digest", KindSnapshotMarker, pack(set(snapshotArr(), 8, make([]byte, 33))), "snapshot.digest"},
		{"identity digest", KindDelta, pack(withIdentity(deltaArr(), func(id arr) { id[0] = make([]byte, 17) })), "identity.cache_semantics.digest"},
	})
	if _, err := PeekKind(big); err == nil {
		t.Fatal("PeekKind accepted an oversize message")
	}
}

func TestDecodeMalformed(t *testing.T) {
	d := deltaArr()
	runDecodeCases(t, ErrMalformed, []decodeCase{
		{"not an array", KindDelta, pack(1), "message"},
		{"map", KindDelta, raw{0x80}, "message"},
		{"too few elements", KindDelta, pack(d[:6]), "message"},
		{"too many elements", KindDelta, pack(append(clone(d).(arr), 0)), "message"},
		{"nil sequence", KindDelta, pack(set(d, 5, raw{0xc0})), "sequence"},
		{"negative sequence", KindDelta, pack(set(d, 4, raw{0xff})), "base_sequence"},
		{"int64 sequence", KindDelta, pack(set(d, 4, raw{0xd3, 0, 0, 0, 0, 0, 0, 0, 4})), "base_sequence"},
		{"non-minimal uint8", KindDelta, pack(set(d, 4, raw{0xcc, 4})), "base_sequence"},
		{"non-minimal uint16", KindDelta, pack(set(d, 4, raw{0xcd, 0, 4})), "base_sequence"},
		{"non-minimal uint32", KindDelta, pack(set(d, 4, raw{0xce, 0, 0, 0xff, 0xff})), "base_sequence"},
		{"non-minimal uint64", KindDelta, pack(set(d, 4, raw{0xcf, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})), "base_sequence"},
		{"non-minimal array16", KindDelta, append(raw{0xdc, 0, 7}, pack(d)[1:]...), "message"},
		{"non-minimal bin16", KindDelta, pack(set(d, 6, append(raw{0xc5, 0, 24}, imagesBin(testDelta().Images...)...))), "images"},
		{"non-minimal str8", KindHeartbeat, pack(set(heartbeatArr(), 5, raw{0xd9, 2, 'r', '1'})), "heartbeat.relay_instance"},
		{"images as str", KindDelta, pack(set(d, 6, "images")), "images"},
		{"images as array", KindDelta, pack(set(d, 6, arr{3, 7})), "images"},
		{"images not multiple of 12", KindDelta, pack(set(d, 6, make([]byte, 13))), "images"},
		{"images descending", KindDelta, pack(set(d, 6, imagesBin(ckf.BucketImage{Bucket: 9}, ckf.BucketImage{Bucket: 2}))), "images"},
		{"identity not array", KindDelta, pack(set(d, 2, 7)), "identity"},
		{"identity short", KindDelta, pack(set(d, 2, identityArr(testIdentity())[:7])), "identity"},
		{"format short", KindDelta, pack(withIdentity(d, func(id arr) { id[7] = id[7].(arr)[:4] })), "identity.format"},
		{"digest short", KindDelta, pack(withIdentity(d, func(id arr) { id[2] = make([]byte, 15) })), "identity.routing_scope.digest"},
		{"lease short", KindDelta, pack(set(d, 3, arr{3})), "lease"},
		{"instance empty", KindDelta, pack(set(d, 3, arr{3, ""})), "lease.instance"},
		{"instance bin", KindDelta, pack(set(d, 3, arr{3, []byte("r1")})), "lease.instance"},
		{"instance invalid utf8", KindDelta, pack(set(d, 3, arr{3, "r\xc3"})), "lease.instance"},
		{"instance control", KindDelta, pack(set(d, 3, arr{3, "r\x00"})), "lease.instance"},
		{"instance C1 control", KindDelta, pack(set(d, 3, arr{3, "r\u0085"})), "lease.instance"},
		{"digest 31 bytes", KindSnapshotMarker, pack(set(snapshotArr(), 8, make([]byte, 31))), "snapshot.digest"},
		{"bucket name charset", KindSnapshotMarker, pack(set(snapshotArr(), 6, "ckf.snap")), "snapshot.object_bucket"},
		{"object name empty", KindSnapshotMarker, pack(set(snapshotArr(), 7, "")), "snapshot.object_name"},
		{"size", KindSnapshotMarker, pack(set(snapshotArr(), 9, SnapshotBodySize(1024)-8)), "snapshot.size"},
		{"heartbeat time past int64", KindHeartbeat, pack(set(heartbeatArr(), 6, uint64(math.MaxInt64)+1)), "heartbeat.time"},
		{"drain sequence string", KindDrainMarker, pack(set(drainArr(), 4, "5")), "expected_sequence"},
	})
}

func TestDecodeUnknownEnum(t *testing.T) {
	runDecodeCases(t, ErrUnknownEnum, []decodeCase{
		{"cache semantics source", KindDelta, pack(withIdentity(deltaArr(), func(id arr) { id[1] = 2 })), "identity.cache_semantics.source"},
		{"routing scope source", KindDrainMarker, pack(withIdentity(drainArr(), func(id arr) { id[3] = 255 })), "identity.routing_scope.source"},
		{"wide source", KindHeartbeat, pack(withIdentity(heartbeatArr(), func(id arr) { id[3] = 256 })), "identity.routing_scope.source"},
	})
}

func TestDecodeFormatMismatch(t *testing.T) {
	format := func(i int, v any) func(arr) {
		return func(id arr) { id[7].(arr)[i] = v }
	}
	cases := []decodeCase{
		{"format version", KindDelta, pack(withIdentity(deltaArr(), format(0, 2))), "identity.format.format_version"},
		{"format version overflow", KindDelta, pack(withIdentity(deltaArr(), format(0, 0x10001))), "identity.format.format_version"},
		{"fingerprint bits", KindDelta, pack(withIdentity(deltaArr(), format(3, 8))), "identity.format.fingerprint_bits"},
		{"slots", KindDelta, pack(withIdentity(deltaArr(), format(4, 2))), "identity.format.slots_per_bucket"},
		{"slots overflow", KindDelta, pack(withIdentity(deltaArr(), format(4, 0x104))), "identity.format.slots_per_bucket"},
		{"bucket count not power of two", KindDelta, pack(withIdentity(deltaArr(), format(2, 1000))), "identity.format.bucket_count"},
		{"bucket count 1", KindDrainMarker, pack(withIdentity(drainArr(), format(2, 1))), "identity.format.bucket_count"},
		{"bucket count 0", KindDrainMarker, pack(withIdentity(drainArr(), format(2, 0))), "identity.format.bucket_count"},
		{"bucket count 2^25", KindHeartbeat, pack(withIdentity(heartbeatArr(), format(2, 1<<25))), "identity.format.bucket_count"},
		{"marker bucket count differs", KindSnapshotMarker, pack(set(snapshotArr(), 5, 2048)), "snapshot.bucket_count"},
	}
	runDecodeCases(t, ErrFormatMismatch, cases)
	// The limits themselves are accepted.
	for _, n := range []uint64{MinBucketCount, MaxBucketCount} {
		if _, err := DecodeDelta(pack(withIdentity(set(deltaArr(), 6, []byte{}), format(2, n)))); err != nil {
			t.Errorf("bucket count %d refused: %v", n, err)
		}
	}
}

func TestDecodeOutOfRange(t *testing.T) {
	runDecodeCases(t, ErrOutOfRange, []decodeCase{
		{"bucket = count", KindDelta, pack(set(deltaArr(), 6, imagesBin(ckf.BucketImage{Bucket: 1024}))), "images"},
		{"bucket u32 max", KindDelta, pack(set(deltaArr(), 6, imagesBin(ckf.BucketImage{Bucket: 1}, ckf.BucketImage{Bucket: math.MaxUint32}))), "images"},
	})
	if _, err := DecodeDelta(pack(set(deltaArr(), 6, imagesBin(ckf.BucketImage{Bucket: 1023})))); err != nil {
		t.Fatalf("last bucket refused: %v", err)
	}
}

func TestDecodeDuplicateBucket(t *testing.T) {
	runDecodeCases(t, ErrDuplicateBucket, []decodeCase{
		{"bucket 0 twice", KindDelta, pack(set(deltaArr(), 6, imagesBin(ckf.BucketImage{Bucket: 0, Value: 1}, ckf.BucketImage{Bucket: 0, Value: 2}))), "images"},
		{"later pair", KindDelta, pack(set(deltaArr(), 6, imagesBin(ckf.BucketImage{Bucket: 1}, ckf.BucketImage{Bucket: 5}, ckf.BucketImage{Bucket: 5}))), "images"},
	})
}

func TestDecodeSequence(t *testing.T) {
	runDecodeCases(t, ErrSequence, []decodeCase{
		{"gap", KindDelta, pack(set(deltaArr(), 5, 6)), "sequence"},
		{"equal", KindDelta, pack(set(deltaArr(), 5, 4)), "sequence"},
		{"backwards", KindDelta, pack(set(deltaArr(), 5, 3)), "sequence"},
		{"base max", KindDelta, pack(set(set(deltaArr(), 4, uint64(math.MaxUint64)), 5, 0)), "sequence"},
	})
}

func TestDecodeChecksum(t *testing.T) {
	f := testIdentity().Format
	words := make([]uint64, f.BucketCount)
	for i := range words {
		words[i] = uint64(i) * 0x9E3779B97F4A7C15
	}
	body, err := EncodeSnapshotBody(nil, f, words)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(body)
	flipped[SnapshotHeaderBytes+100] ^= 1
	_, err = DecodeSnapshotBody(flipped, f, nil)
	wantDecodeError(t, err, ErrChecksum, "snapshot_body.checksum")
	_, err = ReadSnapshotBody(bytes.NewReader(flipped), f, nil)
	wantDecodeError(t, err, ErrChecksum, "snapshot_body.checksum")
	sum := bytes.Clone(body)
	sum[len(sum)-1] ^= 0x80
	_, err = DecodeSnapshotBody(sum, f, nil)
	wantDecodeError(t, err, ErrChecksum, "snapshot_body.checksum")

	m := testSnapshotMarker()
	m.Size = uint64(len(body))
	err = m.VerifyBody(body)
	wantDecodeError(t, err, ErrChecksum, "snapshot.digest")
	err = m.VerifyBody(body[:len(body)-1])
	wantDecodeError(t, err, ErrChecksum, "snapshot.size")
}
