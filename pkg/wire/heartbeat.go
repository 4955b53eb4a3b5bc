package wire

import (
	"math"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Heartbeat is published on ckf.<domain>.<dc>.hb when a lane had no delta
// during the heartbeat interval. It proves the producer is alive at Sequence
// and never moves the sequence (spec §15.1).
type Heartbeat struct {
	Identity      ckf.ProducerIdentity
	Lease         WireLease
	Sequence      uint64
	RelayInstance string
	// Time is the sender's wall clock, carried as Unix nanoseconds; it must
	// not be before 1970. Decoded times are in UTC.
	Time time.Time
}

func checkHeartbeat(h *Heartbeat) error {
	if err := checkIdentity(&h.Identity); err != nil {
		return err
	}
	if err := checkLease(&h.Lease); err != nil {
		return err
	}
	if err := checkInstance(h.RelayInstance, "heartbeat.relay_instance"); err != nil {
		return err
	}
	// UnixNano is undefined outside 1678..2262; the second bound keeps
	// the nanosecond count positive.
	if h.Time.Before(time.Unix(0, 0)) || h.Time.After(time.Unix(0, math.MaxInt64)) {
		return decodeErr(ErrMalformed, "heartbeat.time", "%v is outside 1970..2262", h.Time)
	}
	return nil
}

// AppendHeartbeat appends the encoding of h to dst. On error it returns dst
// unchanged and an *EncodeError.
func AppendHeartbeat(dst []byte, h *Heartbeat) ([]byte, error) {
	if err := checkHeartbeat(h); err != nil {
		return dst, asEncodeError(err)
	}
	dst = appendPreamble(dst, KindHeartbeat, heartbeatFields, &h.Identity, &h.Lease)
	dst = appendUint(dst, h.Sequence)
	dst = appendStr(dst, h.RelayInstance)
	return appendUint(dst, uint64(h.Time.UnixNano())), nil
}

// DecodeHeartbeat decodes one heartbeat. See DecodeHeartbeatInto.
func DecodeHeartbeat(b []byte) (Heartbeat, error) {
	var h Heartbeat
	err := DecodeHeartbeatInto(b, &h)
	return h, err
}

// DecodeHeartbeatInto decodes one heartbeat into h. On error it returns a
// *DecodeError and h's contents are unspecified.
func DecodeHeartbeatInto(b []byte, h *Heartbeat) error {
	r := reader{b: b}
	if err := r.preamble(KindHeartbeat, heartbeatFields, &h.Identity, &h.Lease); err != nil {
		return err
	}
	var err error
	if h.Sequence, err = r.uint("heartbeat.sequence"); err != nil {
		return err
	}
	p, err := r.str(MaxInstanceBytes, "heartbeat.relay_instance")
	if err != nil {
		return err
	}
	setString(&h.RelayInstance, p)
	ns, err := r.uint("heartbeat.time")
	if err != nil {
		return err
	}
	if ns > math.MaxInt64 {
		return decodeErr(ErrMalformed, "heartbeat.time", "%d ns is past 2262", ns)
	}
	h.Time = time.Unix(0, int64(ns)).UTC()
	return r.end()
}
