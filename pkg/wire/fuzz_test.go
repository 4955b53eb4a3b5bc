package wire

import (
	"bytes"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// The fuzz targets hold one property: every input is either refused with a
// *DecodeError or decoded into a value that re-encodes to exactly the input
// bytes (encodings are unique, see doc.go). Never a panic.

func seedMessages(f *testing.F, k MessageKind) {
	f.Helper()
	for _, mk := range validArrs {
		f.Add(pack(mk())) // other kinds exercise ErrKind
	}
	base := validArrs[k]()
	f.Add(pack(set(base, 0, 2)))
	f.Add(pack(withIdentity(base, func(id arr) { id[1] = 2 })))
	f.Add(pack(withIdentity(base, func(id arr) { id[7].(arr)[2] = 1 << 24 })))
	f.Add(pack(set(base, 3, arr{uint64(1 << 63), "relay-instance-with-a-longer-name"})))
	f.Add(append(pack(base), 0))
}

func fuzzRoundTrip[T any](t *testing.T, in []byte, decode func([]byte, *T) error, encode func([]byte, *T) ([]byte, error)) {
	var v T
	err := decode(in, &v)
	if err != nil {
		if _, ok := err.(*DecodeError); !ok {
			t.Fatalf("error %T %v is not a *DecodeError", err, err)
		}
		return
	}
	out, err := encode(nil, &v)
	if err != nil {
		t.Fatalf("decoded value does not encode: %v", err)
	}
	if !bytes.Equal(out, in) {
		t.Fatalf("re-encoding differs:\n in %x\nout %x", in, out)
	}
}

func FuzzDecodeDelta(f *testing.F) {
	seedMessages(f, KindDelta)
	for _, n := range []int{0, 1, 64, 300} {
		d := bigDelta(max(n, 1))
		d.Images = d.Images[:n]
		b, err := AppendDelta(nil, &d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzRoundTrip(t, in, DecodeDeltaInto, AppendDelta)
	})
}

func FuzzDecodeSnapshotMarker(f *testing.F) {
	seedMessages(f, KindSnapshotMarker)
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzRoundTrip(t, in, DecodeSnapshotMarkerInto, AppendSnapshotMarker)
	})
}

func FuzzDecodeDrainMarker(f *testing.F) {
	seedMessages(f, KindDrainMarker)
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzRoundTrip(t, in, DecodeDrainMarkerInto, AppendDrainMarker)
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	seedMessages(f, KindHeartbeat)
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzRoundTrip(t, in, DecodeHeartbeatInto, AppendHeartbeat)
	})
}

func FuzzDecodeSnapshotBody(f *testing.F) {
	for _, n := range []uint64{2, 4, 16} {
		fm := ckf.NewFormatIdentity(0x5EED+n, n)
		b, err := EncodeSnapshotBody(nil, fm, testWords(n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fm, err := SnapshotBodyFormat(in)
		if err != nil {
			if _, ok := err.(*DecodeError); !ok {
				t.Fatalf("error %T %v is not a *DecodeError", err, err)
			}
			return
		}
		words, err := DecodeSnapshotBody(in, fm, nil)
		streamed, serr := ReadSnapshotBody(bytes.NewReader(in), fm, nil)
		if (err == nil) != (serr == nil) {
			t.Fatalf("DecodeSnapshotBody %v but ReadSnapshotBody %v", err, serr)
		}
		if err != nil {
			if _, ok := err.(*DecodeError); !ok {
				t.Fatalf("error %T %v is not a *DecodeError", err, err)
			}
			return
		}
		out, err := EncodeSnapshotBody(nil, fm, words)
		if err != nil {
			t.Fatalf("decoded body does not encode: %v", err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", in, out)
		}
		if len(streamed) != len(words) {
			t.Fatal("stream decode differs")
		}
		for i := range words {
			if streamed[i] != words[i] {
				t.Fatal("stream decode differs")
			}
		}
	})
}
