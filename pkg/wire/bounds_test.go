package wire

import (
	"fmt"
	"strings"
	"testing"
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
	for k := ErrorKind(1); int(k) < len(errorKindNames); k++ {
		if errorKindNames[k] != "" && k.String() != errorKindNames[k] {
			t.Fatalf("kind %d: String() = %q; want %q", k, k.String(), errorKindNames[k])
		}
	}
}
