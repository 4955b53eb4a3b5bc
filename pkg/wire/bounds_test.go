package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// Boundary tests: each pins an edge that an attacker probes and that a
// mutation of its comparison would move.

// A message of exactly MaxMessageBytes is within the limit: it fails for
// what it contains (here trailing bytes), not for its size; one byte more
// is ErrTooLarge before anything is parsed.
func TestMessageSizeLimitIsInclusive(t *testing.T) {
	for k, mk := range validArrs {
		b := pack(mk())
		atLimit := make([]byte, MaxMessageBytes)
		copy(atLimit, b)
		_, err := decoders[k](atLimit)
		wantDecodeError(t, err, ErrTrailingBytes, "message")
		if got, err := PeekKind(atLimit); err != nil || got != k {
			t.Fatalf("%v: PeekKind at the limit = %v, %v; want %v", k, got, err, k)
		}

		over := append(atLimit, 0)
		_, err = decoders[k](over)
		wantDecodeError(t, err, ErrTooLarge, "message")
		_, err = PeekKind(over)
		wantDecodeError(t, err, ErrTooLarge, "message")
	}
}

// An ErrKind error names the kind received and the kind wanted; a kind
// that only matches a known one after truncation to a byte is unknown.
func TestWrongKindErrorNamesTheKinds(t *testing.T) {
	cases := []struct {
		kind uint64
		name string
	}{
		{uint64(KindDrainMarker), KindDrainMarker.String()},
		{uint64(KindHeartbeat), KindHeartbeat.String()},
		{0x100 + uint64(KindDelta), "unknown"},
		{0xff, "unknown"},
	}
	for _, c := range cases {
		b := pack(set(deltaArr(), 1, c.kind))
		_, err := DecodeDelta(b)
		wantDecodeError(t, err, ErrKind, "kind")
		want := fmt.Sprintf("kind %d (%s), want %d (%s)", c.kind, c.name, uint64(KindDelta), KindDelta)
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("kind %#x: error %q; want it to contain %q", c.kind, err, want)
		}
		_, err = PeekKind(b)
		if c.name == "unknown" {
			wantDecodeError(t, err, ErrKind, "kind")
		} else if err != nil {
			t.Fatalf("PeekKind of kind %d: %v", c.kind, err)
		}
	}
}

func TestErrorKindStringBeyondTheTable(t *testing.T) {
	for _, k := range []ErrorKind{ErrorKind(len(errorKindNames)), 0xff} {
		if got, want := k.String(), fmt.Sprintf("ErrorKind(%d)", uint8(k)); got != want {
			t.Fatalf("String() = %q; want %q", got, want)
		}
	}
	if got, want := ErrTruncated.Error(), "wire: "+errorKindNames[ErrTruncated]; got != want {
		t.Fatalf("Error() = %q; want %q", got, want)
	}
	for k := ErrorKind(1); int(k) < len(errorKindNames); k++ {
		if errorKindNames[k] != "" && k.String() != errorKindNames[k] {
			t.Fatalf("kind %d: String() = %q; want %q", k, k.String(), errorKindNames[k])
		}
	}
}

// Text fields refuse exactly the C0 controls, DEL and the C1 controls
// (U+0080..U+009F); their neighbours are ordinary text. Both the decoder and
// the encoder apply the rule.
func TestTextControlCharacterBoundaries(t *testing.T) {
	accepted := []string{" ", "r 1", "~", "\u00a0", "x\u00a0", "\u00a1", "\u00ff", "é", "\u2028x"}
	refused := []string{"\x00", "\x1f", "a\x1f", "\x7f", "\u0080", "x\u0080", "\u0085", "\u009f", "x\u009f"}
	for _, s := range accepted {
		b := pack(set(deltaArr(), 3, arr{uint64(3), s}))
		if _, err := DecodeDelta(b); err != nil {
			t.Fatalf("instance %q refused: %v", s, err)
		}
		d := testDelta()
		d.Lease.Instance = s
		if _, err := AppendDelta(nil, &d); err != nil {
			t.Fatalf("encode instance %q: %v", s, err)
		}
	}
	for _, s := range refused {
		b := pack(set(deltaArr(), 3, arr{uint64(3), s}))
		_, err := DecodeDelta(b)
		wantDecodeError(t, err, ErrMalformed, "lease.instance")
		if !strings.Contains(err.Error(), "control character") {
			t.Fatalf("instance %q: error %q; want a control-character error", s, err)
		}
		d := testDelta()
		d.Lease.Instance = s
		_, err = AppendDelta(nil, &d)
		wantEncodeError(t, err, ErrMalformed, "lease.instance")
	}
}

// The Object Store bucket name is [A-Za-z0-9_-]+: every range end is
// accepted and the byte just outside each range is refused.
func TestObjectBucketCharsetBoundaries(t *testing.T) {
	for _, name := range []string{"azAZ09_-", "a", "z", "A", "Z", "0", "9", "_", "-"} {
		b := pack(set(snapshotArr(), 6, name))
		m, err := DecodeSnapshotMarker(b)
		if err != nil || m.ObjectBucket != name {
			t.Fatalf("bucket %q: %q, %v; want it accepted", name, m.ObjectBucket, err)
		}
	}
	for _, c := range []byte{'`', '{', '@', '[', '/', ':', '^', ',', '.', ' ', 0x80} {
		name := "ok" + string(rune(c)) + "ok"
		if c == 0x80 {
			name = "ok\u0080ok"
		}
		b := pack(set(snapshotArr(), 6, name))
		_, err := DecodeSnapshotMarker(b)
		wantDecodeError(t, err, ErrMalformed, "snapshot.object_bucket")
		m := testSnapshotMarker()
		m.ObjectBucket = name
		_, err = AppendSnapshotMarker(nil, &m)
		wantEncodeError(t, err, ErrMalformed, "snapshot.object_bucket")
	}
}

// ErrTrailingBytes reports how many bytes follow the message and where it
// ended.
func TestTrailingBytesErrorCountsTheExcess(t *testing.T) {
	b := pack(deltaArr())
	end := len(b)
	_, err := DecodeDelta(append(b, 1, 2, 3))
	wantDecodeError(t, err, ErrTrailingBytes, "message")
	if want := fmt.Sprintf("3 bytes after the message end at byte %d", end); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q; want it to contain %q", err, want)
	}
}

// ReadSnapshotBody reuses a dst of exactly the bucket count, reports the
// excess of a too-long body and does not take an I/O error after a complete
// body for the end of the stream.
func TestSnapshotBodyEdges(t *testing.T) {
	f := testIdentity().Format
	words := testWords(f.BucketCount)
	body, err := EncodeSnapshotBody(nil, f, words)
	if err != nil {
		t.Fatal(err)
	}
	reuse := make([]uint64, f.BucketCount)
	got, err := ReadSnapshotBody(bytes.NewReader(body), f, reuse)
	if err != nil || !slices.Equal(got, words) || &got[0] != &reuse[0] {
		t.Fatalf("ReadSnapshotBody into a dst of exactly %d words: %v (reused %v)", f.BucketCount, err, err == nil && &got[0] == &reuse[0])
	}
	reuse = make([]uint64, f.BucketCount)
	got, err = DecodeSnapshotBody(body, f, reuse)
	if err != nil || !slices.Equal(got, words) || &got[0] != &reuse[0] {
		t.Fatalf("DecodeSnapshotBody into a dst of exactly %d words: %v", f.BucketCount, err)
	}

	_, err = DecodeSnapshotBody(append(bytes.Clone(body), 0, 0), f, nil)
	wantDecodeError(t, err, ErrTrailingBytes, "snapshot_body")
	if want := fmt.Sprintf("2 bytes after the body end at byte %d", len(body)); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q; want it to contain %q", err, want)
	}

	boom := errors.New("connection reset")
	_, err = ReadSnapshotBody(io.MultiReader(bytes.NewReader(body), iotest.ErrReader(boom)), f, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("I/O error after the body = %v; want %v", err, boom)
	}
}
