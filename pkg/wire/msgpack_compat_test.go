package wire

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/vmihailenco/msgpack/v5"
)

// refEncoder writes messages with msgpack.Encoder's primitives: an
// independent encoder the hand-written appenders must match byte for byte.
type refEncoder struct {
	t   *testing.T
	buf bytes.Buffer
	enc *msgpack.Encoder
}

func newRef(t *testing.T) *refEncoder {
	r := &refEncoder{t: t}
	r.enc = msgpack.NewEncoder(&r.buf)
	return r
}

func (r *refEncoder) must(err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatal(err)
	}
}

func (r *refEncoder) arrayLen(n int)  { r.must(r.enc.EncodeArrayLen(n)) }
func (r *refEncoder) uint(v uint64)   { r.must(r.enc.EncodeUint(v)) }
func (r *refEncoder) bytes(b []byte)  { r.must(r.enc.EncodeBytes(b)) }
func (r *refEncoder) string(s string) { r.must(r.enc.EncodeString(s)) }
func (r *refEncoder) header(k MessageKind, n int) {
	r.arrayLen(n)
	r.uint(WireVersion)
	r.uint(uint64(k))
}

func (r *refEncoder) identity(id ckf.ProducerIdentity) {
	d := id.Pool.Domain
	r.arrayLen(8)
	r.bytes(d.CacheSemantics.Digest[:])
	r.uint(uint64(d.CacheSemantics.Source))
	r.bytes(d.RoutingScope.Digest[:])
	r.uint(uint64(d.RoutingScope.Source))
	r.uint(uint64(id.Pool.Dc))
	r.uint(id.ProducerIncarnation)
	r.uint(id.LayoutGeneration)
	r.arrayLen(5)
	r.uint(uint64(id.Format.FormatVersion))
	r.uint(id.Format.Seed)
	r.uint(id.Format.BucketCount)
	r.uint(uint64(id.Format.FingerprintBits))
	r.uint(uint64(id.Format.SlotsPerBucket))
}

func (r *refEncoder) lease(l WireLease) {
	r.arrayLen(2)
	r.uint(l.Epoch)
	r.string(l.Instance)
}

func refDelta(t *testing.T, d *Delta) []byte {
	r := newRef(t)
	r.header(KindDelta, 7)
	r.identity(d.Identity)
	r.lease(d.Lease)
	r.uint(d.BaseSequence)
	r.uint(d.Sequence)
	var images []byte
	for _, im := range d.Images {
		images = binary.LittleEndian.AppendUint32(images, uint32(im.Bucket))
		images = binary.LittleEndian.AppendUint64(images, im.Value)
	}
	if images == nil {
		images = []byte{} // EncodeBytes(nil) writes msgpack nil
	}
	r.bytes(images)
	return r.buf.Bytes()
}

func TestMatchesMsgpackEncoder(t *testing.T) {
	extreme := bigDelta(300) // images bin > 255 bytes: bin16
	extreme.Lease.Instance = strings.Repeat("x", 40)
	extreme.Identity.ProducerIncarnation = math.MaxUint32 + 1
	extreme.Identity.LayoutGeneration = 200
	for name, d := range map[string]Delta{
		"small": testDelta(), "empty": {Identity: testIdentity(), Lease: testLease(), Sequence: 1},
		"extreme": extreme, "bin32": bigDelta(6000),
	} {
		got, err := AppendDelta(nil, &d)
		if err != nil {
			t.Fatal(err)
		}
		if want := refDelta(t, &d); !bytes.Equal(got, want) {
			t.Errorf("%s: delta differs from msgpack.Encoder output", name)
		}
	}

	m := testSnapshotMarker()
	m.ObjectName = strings.Repeat("o", 200)
	r := newRef(t)
	r.header(KindSnapshotMarker, 10)
	r.identity(m.Identity)
	r.lease(m.Lease)
	r.uint(m.Sequence)
	r.uint(m.BucketCount)
	r.string(m.ObjectBucket)
	r.string(m.ObjectName)
	r.bytes(m.Digest[:])
	r.uint(m.Size)
	if got, _ := AppendSnapshotMarker(nil, &m); !bytes.Equal(got, r.buf.Bytes()) {
		t.Error("snapshot marker differs from msgpack.Encoder output")
	}

	dm := testDrainMarker()
	r = newRef(t)
	r.header(KindDrainMarker, 5)
	r.identity(dm.Identity)
	r.lease(dm.Lease)
	r.uint(dm.ExpectedSequence)
	if got, _ := AppendDrainMarker(nil, &dm); !bytes.Equal(got, r.buf.Bytes()) {
		t.Error("drain marker differs from msgpack.Encoder output")
	}

	h := testHeartbeat()
	r = newRef(t)
	r.header(KindHeartbeat, 7)
	r.identity(h.Identity)
	r.lease(h.Lease)
	r.uint(h.Sequence)
	r.string(h.RelayInstance)
	r.uint(uint64(h.Time.UnixNano()))
	if got, _ := AppendHeartbeat(nil, &h); !bytes.Equal(got, r.buf.Bytes()) {
		t.Error("heartbeat differs from msgpack.Encoder output")
	}
}

// TestGenericMsgpackReads shows any msgpack reader can inspect a message.
func TestGenericMsgpackReads(t *testing.T) {
	d := testDelta()
	b, _ := AppendDelta(nil, &d)
	var v []any
	if err := msgpack.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v) != 7 {
		t.Fatalf("%d elements", len(v))
	}
	lease, ok := v[3].([]any)
	if !ok || !reflect.DeepEqual(lease[1], "r1") {
		t.Fatalf("lease %#v", v[3])
	}
	images, ok := v[6].([]byte)
	if !ok || len(images) != 24 {
		t.Fatalf("images %#v", v[6])
	}
}

// TestAppendersMatchEncoderBoundaries checks the primitives at every size
// class boundary.
func TestAppendersMatchEncoderBoundaries(t *testing.T) {
	for _, v := range []uint64{0, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64} {
		r := newRef(t)
		r.uint(v)
		if got := appendUint(nil, v); !bytes.Equal(got, r.buf.Bytes()) {
			t.Errorf("uint %d: %x vs %x", v, got, r.buf.Bytes())
		}
		rd := reader{b: appendUint(nil, v)}
		if got, err := rd.uint("x"); err != nil || got != v {
			t.Errorf("read uint %d: %d, %v", v, got, err)
		}
	}
	for _, n := range []int{0, 15, 16, 65535, 65536} {
		r := newRef(t)
		r.arrayLen(n)
		if got := appendArrayLen(nil, n); !bytes.Equal(got, r.buf.Bytes()) {
			t.Errorf("array %d: %x vs %x", n, got, r.buf.Bytes())
		}
		rd := reader{b: appendArrayLen(nil, n)}
		if got, err := rd.arrayLen("x"); err != nil || got != uint64(n) {
			t.Errorf("read array %d: %d, %v", n, got, err)
		}
	}
	for _, n := range []int{0, 31, 32, 255, 256, 65535, 65536} {
		s := strings.Repeat("s", n)
		r := newRef(t)
		r.string(s)
		if got := appendStr(nil, s); !bytes.Equal(got, r.buf.Bytes()) {
			t.Errorf("str %d differs", n)
		}
		b := make([]byte, n)
		r = newRef(t)
		r.bytes(b)
		if got := appendBin(nil, b); !bytes.Equal(got, r.buf.Bytes()) {
			t.Errorf("bin %d differs", n)
		}
		rd := reader{b: appendBin(nil, b)}
		if got, err := rd.bin(1<<20, "x"); err != nil || len(got) != n {
			t.Errorf("read bin %d: %d, %v", n, len(got), err)
		}
		if n > 0 {
			rd = reader{b: appendStr(nil, s)}
			if got, err := rd.str(1<<20, "x"); err != nil || string(got) != s {
				t.Errorf("read str %d: %v", n, err)
			}
		}
	}
}
