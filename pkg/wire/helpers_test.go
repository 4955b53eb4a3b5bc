package wire

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// testIdentity is a fixed identity with readable digests (0x01.. and 0x11..)
// and the spec §18.8 format (seed 0x5EED, 1024 buckets).
func testIdentity() ckf.ProducerIdentity {
	var cs, rs ckf.Digest16
	for i := range cs {
		cs[i] = byte(i + 1)
		rs[i] = byte(i + 0x11)
	}
	return ckf.ProducerIdentity{
		Pool: ckf.PoolID{
			Domain: ckf.IndexerDomainID{
				CacheSemantics: ckf.CacheSemanticsID{Digest: cs, Source: ckf.SourceExplicit},
				RoutingScope:   ckf.RoutingScopeID{Digest: rs, Source: ckf.SourceDefaultDerived},
			},
			Dc: 7,
		},
		ProducerIncarnation: 2,
		LayoutGeneration:    1,
		Format:              ckf.NewFormatIdentity(0x5EED, 1024),
	}
}

func testLease() WireLease { return WireLease{Epoch: 3, Instance: "r1"} }

func testDelta() Delta {
	return Delta{
		Identity:     testIdentity(),
		Lease:        testLease(),
		BaseSequence: 4,
		Sequence:     5,
		Images:       []ckf.BucketImage{{Bucket: 3, Value: 0xAAAABBBBCCCCDDDD}, {Bucket: 1000, Value: 42}},
	}
}

// bigDelta has n images spread over a 2^20-bucket format.
func bigDelta(n int) Delta {
	id := testIdentity()
	id.Format = ckf.NewFormatIdentity(ckf.DefaultSeed, 1<<20)
	d := Delta{Identity: id, Lease: WireLease{Epoch: 1 << 40, Instance: "relay-instance-0123456789"}, BaseSequence: 1 << 33, Sequence: 1<<33 + 1}
	d.Images = make([]ckf.BucketImage, n)
	stride := uint64((1 << 20) / n)
	for i := range d.Images {
		d.Images[i] = ckf.BucketImage{Bucket: uint64(i) * stride, Value: 0x0123456789ABCDEF ^ uint64(i)*0x9E3779B97F4A7C15}
	}
	return d
}

func testSnapshotMarker() SnapshotMarker {
	m := SnapshotMarker{
		Identity:     testIdentity(),
		Lease:        testLease(),
		Sequence:     9,
		BucketCount:  1024,
		ObjectBucket: SnapshotBucket,
		ObjectName:   "snap/prod/dc-a/3-9",
		Size:         SnapshotBodySize(1024),
	}
	for i := range m.Digest {
		m.Digest[i] = byte(0xA0 + i)
	}
	return m
}

func testDrainMarker() DrainMarker {
	return DrainMarker{Identity: testIdentity(), Lease: testLease(), ExpectedSequence: 5}
}

func testHeartbeat() Heartbeat {
	return Heartbeat{
		Identity:      testIdentity(),
		Lease:         testLease(),
		Sequence:      5,
		RelayInstance: "r1",
		Time:          time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC),
	}
}

// A tiny msgpack builder for hand-made (often invalid) messages. It uses the
// package's appenders, whose bytes msgpack_compat_test.go checks against the
// msgpack library.
type (
	arr []any  // msgpack array of its elements
	raw []byte // bytes inserted as they are
)

func pack(v any) []byte { return packTo(nil, v) }

func packTo(dst []byte, v any) []byte {
	switch x := v.(type) {
	case int:
		return appendUint(dst, uint64(x))
	case uint64:
		return appendUint(dst, x)
	case string:
		return appendStr(dst, x)
	case []byte:
		return appendBin(dst, x)
	case raw:
		return append(dst, x...)
	case arr:
		dst = appendArrayLen(dst, len(x))
		for _, e := range x {
			dst = packTo(dst, e)
		}
		return dst
	}
	panic("pack: unsupported type")
}

func identityArr(id ckf.ProducerIdentity) arr {
	d := id.Pool.Domain
	f := id.Format
	return arr{
		d.CacheSemantics.Digest[:], int(d.CacheSemantics.Source),
		d.RoutingScope.Digest[:], int(d.RoutingScope.Source),
		uint64(id.Pool.Dc), id.ProducerIncarnation, id.LayoutGeneration,
		arr{int(f.FormatVersion), f.Seed, f.BucketCount, int(f.FingerprintBits), int(f.SlotsPerBucket)},
	}
}

func leaseArr(l WireLease) arr { return arr{l.Epoch, l.Instance} }

func imagesBin(images ...ckf.BucketImage) []byte {
	var b []byte
	for _, im := range images {
		b = append(b, byte(im.Bucket), byte(im.Bucket>>8), byte(im.Bucket>>16), byte(im.Bucket>>24))
		for s := 0; s < 64; s += 8 {
			b = append(b, byte(im.Value>>s))
		}
	}
	return b
}

// deltaArr is the positional form of testDelta, for tests to mutate.
func deltaArr() arr {
	d := testDelta()
	return arr{WireVersion, int(KindDelta), identityArr(d.Identity), leaseArr(d.Lease), 4, 5, imagesBin(d.Images...)}
}

func snapshotArr() arr {
	m := testSnapshotMarker()
	return arr{WireVersion, int(KindSnapshotMarker), identityArr(m.Identity), leaseArr(m.Lease), m.Sequence, m.BucketCount, m.ObjectBucket, m.ObjectName, m.Digest[:], m.Size}
}

func drainArr() arr {
	m := testDrainMarker()
	return arr{WireVersion, int(KindDrainMarker), identityArr(m.Identity), leaseArr(m.Lease), m.ExpectedSequence}
}

func heartbeatArr() arr {
	h := testHeartbeat()
	return arr{WireVersion, int(KindHeartbeat), identityArr(h.Identity), leaseArr(h.Lease), h.Sequence, h.RelayInstance, uint64(h.Time.UnixNano())}
}

// withIdentity returns a copy of a with its identity element (index 2)
// mutated by f.
func withIdentity(a arr, f func(id arr)) arr {
	out := clone(a).(arr)
	f(out[2].(arr))
	return out
}

// clone deep-copies nested arrs so cases do not share mutations.
func clone(v any) any {
	switch x := v.(type) {
	case arr:
		out := make(arr, len(x))
		for i, e := range x {
			out[i] = clone(e)
		}
		return out
	case []byte:
		return bytes.Clone(x)
	case raw:
		return raw(bytes.Clone(x))
	}
	return v
}

func set(a arr, i int, v any) arr {
	out := clone(a).(arr)
	out[i] = v
	return out
}

// wantKind asserts err is a *DecodeError (or *EncodeError when encode) of
// kind k whose Field contains field.
func wantDecodeError(t *testing.T, err error, k ErrorKind, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v in %q", k, field)
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("got %T %v, want *DecodeError", err, err)
	}
	if !errors.Is(err, k) || de.Kind != k {
		t.Fatalf("got kind %v (%v), want %v", de.Kind, err, k)
	}
	if field != "" && de.Field != field {
		t.Fatalf("got field %q (%v), want %q", de.Field, err, field)
	}
}

func wantEncodeError(t *testing.T, err error, k ErrorKind, field string) {
	t.Helper()
	var ee *EncodeError
	if !errors.As(err, &ee) {
		t.Fatalf("got %T %v, want *EncodeError", err, err)
	}
	if !errors.Is(err, k) || ee.Kind != k {
		t.Fatalf("got kind %v (%v), want %v", ee.Kind, err, k)
	}
	if field != "" && ee.Field != field {
		t.Fatalf("got field %q (%v), want %q", ee.Field, err, field)
	}
}

// decoders maps each kind to a decode-then-re-encode function, for tests
// that treat all messages alike.
var decoders = map[MessageKind]func([]byte) ([]byte, error){
	KindDelta: func(b []byte) ([]byte, error) {
		d, err := DecodeDelta(b)
		if err != nil {
			return nil, err
		}
		return AppendDelta(nil, &d)
	},
	KindSnapshotMarker: func(b []byte) ([]byte, error) {
		m, err := DecodeSnapshotMarker(b)
		if err != nil {
			return nil, err
		}
		return AppendSnapshotMarker(nil, &m)
	},
	KindDrainMarker: func(b []byte) ([]byte, error) {
		m, err := DecodeDrainMarker(b)
		if err != nil {
			return nil, err
		}
		return AppendDrainMarker(nil, &m)
	},
	KindHeartbeat: func(b []byte) ([]byte, error) {
		h, err := DecodeHeartbeat(b)
		if err != nil {
			return nil, err
		}
		return AppendHeartbeat(nil, &h)
	},
}

var validArrs = map[MessageKind]func() arr{
	KindDelta:          deltaArr,
	KindSnapshotMarker: snapshotArr,
	KindDrainMarker:    drainArr,
	KindHeartbeat:      heartbeatArr,
}
