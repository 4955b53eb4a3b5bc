package wire

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

func TestDeltaRoundTrip(t *testing.T) {
	maxID := testIdentity()
	maxID.Pool.Dc = math.MaxUint64
	maxID.ProducerIncarnation = math.MaxUint64
	maxID.LayoutGeneration = math.MaxUint64
	maxID.Format = ckf.NewFormatIdentity(math.MaxUint64, MaxBucketCount)
	cases := map[string]Delta{
		"small": testDelta(),
		"empty": {Identity: testIdentity(), Lease: testLease(), BaseSequence: 0, Sequence: 1},
		"extremes": {
			Identity: maxID, Lease: WireLease{Epoch: math.MaxUint64, Instance: strings.Repeat("é", MaxInstanceBytes/2)},
			BaseSequence: math.MaxUint64 - 1, Sequence: math.MaxUint64,
			Images: []ckf.BucketImage{{Bucket: 0, Value: math.MaxUint64}, {Bucket: MaxBucketCount - 1, Value: 0}},
		},
		"64":   bigDelta(64),
		"4096": bigDelta(4096),
		"max":  bigDelta(MaxDeltaImages),
	}
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			prefix := []byte("prefix")
			b, err := AppendDelta(bytes.Clone(prefix), &d)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, prefix) {
				t.Fatal("AppendDelta did not keep dst")
			}
			b = b[len(prefix):]
			if len(b) > MaxMessageBytes {
				t.Fatalf("%d bytes over the limit", len(b))
			}
			got, err := DecodeDelta(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Images) == 0 {
				d.Images = nil
				got.Images = nil
			}
			if !reflect.DeepEqual(got, d) {
				t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Identity, d.Identity)
			}
			if k, err := PeekKind(b); err != nil || k != KindDelta {
				t.Fatalf("PeekKind = %v, %v", k, err)
			}
		})
	}
}

func TestDecodeDeltaIntoReuses(t *testing.T) {
	big, small := bigDelta(100), testDelta()
	bb, _ := AppendDelta(nil, &big)
	sb, _ := AppendDelta(nil, &small)
	var d Delta
	if err := DecodeDeltaInto(bb, &d); err != nil {
		t.Fatal(err)
	}
	first := &d.Images[0]
	inst := d.Lease.Instance
	if err := DecodeDeltaInto(sb, &d); err != nil {
		t.Fatal(err)
	}
	if &d.Images[0] != first {
		t.Fatal("Images capacity not reused")
	}
	if !reflect.DeepEqual(d, small) {
		t.Fatalf("got %+v, want %+v", d, small)
	}
	if err := DecodeDeltaInto(bb, &d); err != nil {
		t.Fatal(err)
	}
	if d.Lease.Instance != inst || !reflect.DeepEqual(d, big) {
		t.Fatal("third decode differs")
	}
}

func TestSnapshotMarkerRoundTrip(t *testing.T) {
	m := testSnapshotMarker()
	long := m
	long.ObjectName = strings.Repeat("n", MaxObjectNameBytes)
	long.ObjectBucket = strings.Repeat("B", MaxBucketNameBytes)
	for name, m := range map[string]SnapshotMarker{"small": m, "long names": long} {
		t.Run(name, func(t *testing.T) {
			b, err := AppendSnapshotMarker(nil, &m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeSnapshotMarker(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("got %+v, want %+v", got, m)
			}
		})
	}
}

func TestDrainMarkerRoundTrip(t *testing.T) {
	m := testDrainMarker()
	b, err := AppendDrainMarker(nil, &m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeDrainMarker(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("got %+v, want %+v", got, m)
	}
}

func TestHeartbeatRoundTrip(t *testing.T) {
	for name, ts := range map[string]time.Time{
		"now":   time.Now(), // carries a monotonic reading and a local zone
		"epoch": time.Unix(0, 0),
		"max":   time.Unix(0, math.MaxInt64),
	} {
		t.Run(name, func(t *testing.T) {
			h := testHeartbeat()
			h.Time = ts
			b, err := AppendHeartbeat(nil, &h)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeHeartbeat(b)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Time.Equal(ts) || got.Time.Location() != time.UTC {
				t.Fatalf("time %v, want %v in UTC", got.Time, ts)
			}
			got.Time = h.Time
			if !reflect.DeepEqual(got, h) {
				t.Fatalf("got %+v, want %+v", got, h)
			}
		})
	}
}

func TestPeekKind(t *testing.T) {
	for k, mk := range validArrs {
		if got, err := PeekKind(pack(mk())); err != nil || got != k {
			t.Errorf("PeekKind(%v) = %v, %v", k, got, err)
		}
	}
	_, err := PeekKind(pack(arr{WireVersion, 9}))
	wantDecodeError(t, err, ErrKind, "kind")
	_, err = PeekKind(pack(arr{2, 1}))
	wantDecodeError(t, err, ErrVersion, "version")
	_, err = PeekKind(pack(arr{1}))
	wantDecodeError(t, err, ErrMalformed, "message")
}

func TestKindMismatchEveryPair(t *testing.T) {
	for have, mk := range validArrs {
		b := pack(mk())
		for want, dec := range decoders {
			_, err := dec(b)
			if have == want {
				if err != nil {
					t.Errorf("%v: %v", have, err)
				}
				continue
			}
			wantDecodeError(t, err, ErrKind, "kind")
		}
	}
}

func TestConversions(t *testing.T) {
	id := testIdentity()
	lane := ckf.LaneLease{ConsumerInstance: 11, PhysicalLane: 3, AssignmentEpoch: 2}
	producerLane := ckf.LaneLease{ConsumerInstance: 99, PhysicalLane: 0, AssignmentEpoch: 77}
	cd := ckf.Delta{
		Identity: id, Lease: producerLane, BaseSequence: 4, Sequence: 5,
		Images: []ckf.BucketImage{{Bucket: 1000, Value: 42}, {Bucket: 3, Value: 0xAAAABBBBCCCCDDDD}},
	}
	d := NewDelta(cd, testLease())
	if !reflect.DeepEqual(d, testDelta()) {
		t.Fatalf("NewDelta = %+v, want sorted images %+v", d, testDelta())
	}
	if cd.Images[0].Bucket != 1000 {
		t.Fatal("NewDelta reordered the caller's images")
	}
	back := d.ToCkf(lane)
	if back.Lease != lane || back.Identity != id || back.BaseSequence != 4 || back.Sequence != 5 || !reflect.DeepEqual(back.Images, d.Images) {
		t.Fatalf("ToCkf = %+v", back)
	}

	dm := NewDrainMarker(id, testLease(), ckf.DrainMarker{Lease: producerLane, ExpectedSequence: 5})
	if dm != testDrainMarker() {
		t.Fatalf("NewDrainMarker = %+v", dm)
	}
	if got := dm.ToCkf(lane); got != (ckf.DrainMarker{Lease: lane, ExpectedSequence: 5}) {
		t.Fatalf("DrainMarker.ToCkf = %+v", got)
	}

	words := make([]uint64, 1024)
	words[7] = 0xDEAD
	snap := ckf.Snapshot{Identity: id, Lease: producerLane, Sequence: 9, Buckets: words}
	body, err := EncodeSnapshotBody(nil, id.Format, words)
	if err != nil {
		t.Fatal(err)
	}
	m := NewSnapshotMarker(&snap, testLease(), SnapshotBucket, "obj", body)
	if m.Size != uint64(len(body)) || m.BucketCount != 1024 || m.Sequence != 9 || m.Lease != testLease() {
		t.Fatalf("NewSnapshotMarker = %+v", m)
	}
	if _, err := AppendSnapshotMarker(nil, &m); err != nil {
		t.Fatal(err)
	}
	if err := m.VerifyBody(body); err != nil {
		t.Fatal(err)
	}
	if got := m.ToCkf(lane, words); got.Lease != lane || got.Sequence != 9 || got.Identity != id || &got.Buckets[0] != &words[0] {
		t.Fatalf("SnapshotMarker.ToCkf = %+v", got)
	}
}

func TestEncodeErrors(t *testing.T) {
	type enc func() ([]byte, error)
	delta := func(f func(*Delta)) enc {
		return func() ([]byte, error) {
			d := testDelta()
			f(&d)
			return AppendDelta([]byte("keep"), &d)
		}
	}
	cases := []struct {
		name  string
		enc   enc
		kind  ErrorKind
		field string
	}{
		{"sequence gap", delta(func(d *Delta) { d.Sequence = 6 }), ErrSequence, "sequence"},
		{"sequence overflow", delta(func(d *Delta) { d.BaseSequence, d.Sequence = math.MaxUint64, 0 }), ErrSequence, "sequence"},
		{"unsorted", delta(func(d *Delta) { d.Images[0], d.Images[1] = d.Images[1], d.Images[0] }), ErrMalformed, "images"},
		{"duplicate", delta(func(d *Delta) { d.Images[1].Bucket = 3 }), ErrDuplicateBucket, "images"},
		{"out of range", delta(func(d *Delta) { d.Images[1].Bucket = 1024 }), ErrOutOfRange, "images"},
		{"too many images", delta(func(d *Delta) { d.Images = make([]ckf.BucketImage, MaxDeltaImages+1) }), ErrTooLarge, "images"},
		{"unknown source", delta(func(d *Delta) { d.Identity.Pool.Domain.RoutingScope.Source = 2 }), ErrUnknownEnum, "identity.routing_scope.source"},
		{"bucket count", delta(func(d *Delta) { d.Identity.Format.BucketCount = 1000 }), ErrFormatMismatch, "identity.format.bucket_count"},
		{"empty instance", delta(func(d *Delta) { d.Lease.Instance = "" }), ErrMalformed, "lease.instance"},
		{"long instance", delta(func(d *Delta) { d.Lease.Instance = strings.Repeat("x", MaxInstanceBytes+1) }), ErrTooLarge, "lease.instance"},
		{"bad utf8 instance", delta(func(d *Delta) { d.Lease.Instance = "r\xff" }), ErrMalformed, "lease.instance"},
		{"snapshot bucket count", func() ([]byte, error) {
			m := testSnapshotMarker()
			m.BucketCount = 2048
			return AppendSnapshotMarker([]byte("keep"), &m)
		}, ErrFormatMismatch, "snapshot.bucket_count"},
		{"snapshot size", func() ([]byte, error) {
			m := testSnapshotMarker()
			m.Size++
			return AppendSnapshotMarker([]byte("keep"), &m)
		}, ErrMalformed, "snapshot.size"},
		{"snapshot bucket name", func() ([]byte, error) {
			m := testSnapshotMarker()
			m.ObjectBucket = "a.b"
			return AppendSnapshotMarker([]byte("keep"), &m)
		}, ErrMalformed, "snapshot.object_bucket"},
		{"drain instance", func() ([]byte, error) {
			m := testDrainMarker()
			m.Lease.Instance = "a\nb"
			return AppendDrainMarker([]byte("keep"), &m)
		}, ErrMalformed, "lease.instance"},
		{"heartbeat zero time", func() ([]byte, error) {
			h := testHeartbeat()
			h.Time = time.Time{}
			return AppendHeartbeat([]byte("keep"), &h)
		}, ErrMalformed, "heartbeat.time"},
		{"heartbeat relay instance", func() ([]byte, error) {
			h := testHeartbeat()
			h.RelayInstance = ""
			return AppendHeartbeat([]byte("keep"), &h)
		}, ErrMalformed, "heartbeat.relay_instance"},
		{"snapshot body words", func() ([]byte, error) {
			return EncodeSnapshotBody([]byte("keep"), testIdentity().Format, make([]uint64, 1023))
		}, ErrFormatMismatch, "snapshot_body.words"},
		{"snapshot body format", func() ([]byte, error) {
			f := testIdentity().Format
			f.SlotsPerBucket = 8
			return EncodeSnapshotBody([]byte("keep"), f, make([]uint64, 1024))
		}, ErrFormatMismatch, "identity.format.slots_per_bucket"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := c.enc()
			wantEncodeError(t, err, c.kind, c.field)
			if string(b) != "keep" {
				t.Fatalf("dst changed on error: %q", b)
			}
		})
	}
}

func TestErrorStrings(t *testing.T) {
	err := &DecodeError{Kind: ErrTooLarge, Field: "images", Detail: "5 > 4"}
	if got, want := err.Error(), "wire: decode images: too large: 5 > 4"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := ErrorKind(200).String(); got != "ErrorKind(200)" {
		t.Errorf("unknown kind string %q", got)
	}
	for k := ErrTruncated; k <= ErrChecksum; k++ {
		if strings.HasPrefix(k.String(), "ErrorKind(") {
			t.Errorf("kind %d has no name", k)
		}
	}
}
