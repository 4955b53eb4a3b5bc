package wire

import (
	"fmt"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

var benchSink int

func BenchmarkEncodeDelta(b *testing.B) {
	for _, n := range []int{64, 4096} {
		b.Run(fmt.Sprintf("images=%d", n), func(b *testing.B) {
			d := bigDelta(n)
			buf, err := AppendDelta(nil, &d)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf, err = AppendDelta(buf[:0], &d)
				if err != nil {
					panic(err)
				}
			}
			benchSink += len(buf)
		})
	}
}

func BenchmarkDecodeDelta(b *testing.B) {
	for _, n := range []int{64, 4096} {
		b.Run(fmt.Sprintf("images=%d", n), func(b *testing.B) {
			src := bigDelta(n)
			buf, err := AppendDelta(nil, &src)
			if err != nil {
				b.Fatal(err)
			}
			var d Delta
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if err := DecodeDeltaInto(buf, &d); err != nil {
					panic(err)
				}
			}
			if len(d.Images) != n || d.Images[n-1] != src.Images[n-1] {
				panic("wrong decode")
			}
			benchSink += len(d.Images)
		})
	}
}

func BenchmarkSnapshotBody(b *testing.B) {
	const n = 1 << 16
	f := ckf.NewFormatIdentity(ckf.DefaultSeed, n)
	words := testWords(n)
	body, err := EncodeSnapshotBody(nil, f, words)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			body, err = EncodeSnapshotBody(body[:0], f, words)
			if err != nil {
				panic(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		dst := make([]uint64, n)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			dst, err = DecodeSnapshotBody(body, f, dst)
			if err != nil {
				panic(err)
			}
		}
		benchSink += len(dst)
	})
}

// TestHotPathNoAllocs pins the allocation-free claims: encoding into a
// reused buffer and decoding into a reused Delta (and markers/heartbeats).
func TestHotPathNoAllocs(t *testing.T) {
	d := bigDelta(512)
	buf, err := AppendDelta(nil, &d)
	if err != nil {
		t.Fatal(err)
	}
	var got Delta
	if err := DecodeDeltaInto(buf, &got); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		var err error
		buf, err = AppendDelta(buf[:0], &d)
		must(err)
	}); n != 0 {
		t.Errorf("AppendDelta: %v allocs", n)
	}
	if n := testing.AllocsPerRun(100, func() { must(DecodeDeltaInto(buf, &got)) }); n != 0 {
		t.Errorf("DecodeDeltaInto: %v allocs", n)
	}
	hb := testHeartbeat()
	hbuf, _ := AppendHeartbeat(nil, &hb)
	var h Heartbeat
	must(DecodeHeartbeatInto(hbuf, &h))
	if n := testing.AllocsPerRun(100, func() { must(DecodeHeartbeatInto(hbuf, &h)) }); n != 0 {
		t.Errorf("DecodeHeartbeatInto: %v allocs", n)
	}
	dm := testDrainMarker()
	dbuf, _ := AppendDrainMarker(nil, &dm)
	var m DrainMarker
	must(DecodeDrainMarkerInto(dbuf, &m))
	if n := testing.AllocsPerRun(100, func() { must(DecodeDrainMarkerInto(dbuf, &m)) }); n != 0 {
		t.Errorf("DecodeDrainMarkerInto: %v allocs", n)
	}
	sm := testSnapshotMarker()
	sbuf, _ := AppendSnapshotMarker(nil, &sm)
	var s SnapshotMarker
	must(DecodeSnapshotMarkerInto(sbuf, &s))
	if n := testing.AllocsPerRun(100, func() { must(DecodeSnapshotMarkerInto(sbuf, &s)) }); n != 0 {
		t.Errorf("DecodeSnapshotMarkerInto: %v allocs", n)
	}
}
