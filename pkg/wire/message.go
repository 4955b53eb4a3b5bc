package wire

import (
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// MessageKind is the second element of every message.
type MessageKind uint8

const (
	KindDelta          MessageKind = 1
	KindSnapshotMarker MessageKind = 2
	KindDrainMarker    MessageKind = 3
	KindHeartbeat      MessageKind = 4
)

// String returns the kind's subject suffix ("delta", "snap", "drain", "hb").
func (k MessageKind) String() string {
	switch k {
	case KindDelta:
		return suffixDelta
	case KindSnapshotMarker:
		return suffixSnap
	case KindDrainMarker:
		return suffixDrain
	case KindHeartbeat:
		return suffixHeartbeat
	case KindPoolLoad:
		return "load"
	case KindWorkerLoad:
		return "worker_load"
	case KindRouteAccount:
		return "route_account"
	}
	return fmt.Sprintf("MessageKind(%d)", uint8(k))
}

// Valid reports whether k is one of the four kinds.
func (k MessageKind) Valid() bool { return k >= KindDelta && k <= KindHeartbeat }

// Element counts of each message's top-level array.
const (
	deltaFields     = 7
	snapshotFields  = 10
	drainFields     = 5
	heartbeatFields = 7
)

func appendHeader(dst []byte, k MessageKind, fields int) []byte {
	dst = appendArrayLen(dst, fields)
	dst = appendUint(dst, WireVersion)
	return appendUint(dst, uint64(k))
}

// header reads the array header, version and kind of a message, in that
// order, so a message of another version is reported as ErrVersion whatever
// its shape, then checks the element count.
func (r *reader) header(want MessageKind, fields uint64) error {
	if len(r.b) > MaxMessageBytes {
		return decodeErr(ErrTooLarge, "message", "%d bytes, limit %d", len(r.b), MaxMessageBytes)
	}
	n, err := r.arrayLen("message")
	if err != nil {
		return err
	}
	if n < 2 {
		return decodeErr(ErrMalformed, "message", "array of %d elements, want %d", n, fields)
	}
	v, err := r.uint("version")
	if err != nil {
		return err
	}
	if v != WireVersion {
		return decodeErr(ErrVersion, "version", "wire version %d, want %d", v, WireVersion)
	}
	k, err := r.uint("kind")
	if err != nil {
		return err
	}
	if k != uint64(want) {
		return decodeErr(ErrKind, "kind", "kind %d (%v), want %d (%v)", k, kindName(k), uint64(want), want)
	}
	if n != fields {
		return decodeErr(ErrMalformed, "message", "array of %d elements, want %d", n, fields)
	}
	return nil
}

func kindName(k uint64) string {
	if k > 0xff || !MessageKind(k).Valid() {
		return "unknown"
	}
	return MessageKind(k).String()
}

// PeekKind returns the kind of an encoded message after checking its version,
// without decoding the rest. A consumer filtering ckf.<domain>.<dc>.> can use
// it, or the subject suffix, to pick the decoder. Errors: ErrTooLarge,
// ErrTruncated, ErrMalformed, ErrVersion, ErrKind (unknown kind).
func PeekKind(b []byte) (MessageKind, error) {
	r := reader{b: b}
	if len(b) > MaxMessageBytes {
		return 0, decodeErr(ErrTooLarge, "message", "%d bytes, limit %d", len(b), MaxMessageBytes)
	}
	n, err := r.arrayLen("message")
	if err != nil {
		return 0, err
	}
	if n < 2 {
		return 0, decodeErr(ErrMalformed, "message", "array of %d elements", n)
	}
	v, err := r.uint("version")
	if err != nil {
		return 0, err
	}
	if v != WireVersion {
		return 0, decodeErr(ErrVersion, "version", "wire version %d, want %d", v, WireVersion)
	}
	k, err := r.uint("kind")
	if err != nil {
		return 0, err
	}
	if k > 0xff || !MessageKind(k).Valid() {
		return 0, decodeErr(ErrKind, "kind", "unknown kind %d", k)
	}
	return MessageKind(k), nil
}

// appendPreamble writes what every message starts with: the header, the
// producer identity and the wire lease.
func appendPreamble(dst []byte, k MessageKind, fields int, id *ckf.ProducerIdentity, l *WireLease) []byte {
	dst = appendHeader(dst, k, fields)
	dst = appendIdentity(dst, id)
	return appendLease(dst, l)
}

// preamble reads what appendPreamble wrote.
func (r *reader) preamble(k MessageKind, fields uint64, id *ckf.ProducerIdentity, l *WireLease) error {
	if err := r.header(k, fields); err != nil {
		return err
	}
	if err := r.identity(id); err != nil {
		return err
	}
	return r.lease(l)
}
