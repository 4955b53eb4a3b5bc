package wire

import "github.com/ckfrelay/ckfrelay/pkg/ckf"

// DrainMarker is published on ckf.<domain>.<dc>.drain: the sequence a
// consumer must have reached under (Identity, Lease). It reveals a dropped
// last delta even when nothing follows it (spec §7.3).
type DrainMarker struct {
	Identity         ckf.ProducerIdentity
	Lease            WireLease
	ExpectedSequence uint64
}

// NewDrainMarker builds the wire form of the publisher's exact drain marker;
// m.Lease (consumer-local) is not carried.
func NewDrainMarker(id ckf.ProducerIdentity, lease WireLease, m ckf.DrainMarker) DrainMarker {
	return DrainMarker{Identity: id, Lease: lease, ExpectedSequence: m.ExpectedSequence}
}

// ToCkf returns the consumer's ckf.DrainMarker under its local lane lease.
func (m *DrainMarker) ToCkf(lane ckf.LaneLease) ckf.DrainMarker {
	return ckf.DrainMarker{Lease: lane, ExpectedSequence: m.ExpectedSequence}
}

// AppendDrainMarker appends the encoding of m to dst. On error it returns dst
// unchanged and an *EncodeError (invalid identity or lease).
func AppendDrainMarker(dst []byte, m *DrainMarker) ([]byte, error) {
	if err := checkIdentity(&m.Identity); err != nil {
		return dst, asEncodeError(err)
	}
	if err := checkLease(&m.Lease); err != nil {
		return dst, asEncodeError(err)
	}
	dst = appendPreamble(dst, KindDrainMarker, drainFields, &m.Identity, &m.Lease)
	return appendUint(dst, m.ExpectedSequence), nil
}

// DecodeDrainMarker decodes one drain marker. See DecodeDrainMarkerInto.
func DecodeDrainMarker(b []byte) (DrainMarker, error) {
	var m DrainMarker
	err := DecodeDrainMarkerInto(b, &m)
	return m, err
}

// DecodeDrainMarkerInto decodes one drain marker into m. On error it returns
// a *DecodeError and m's contents are unspecified.
func DecodeDrainMarkerInto(b []byte, m *DrainMarker) error {
	r := reader{b: b}
	if err := r.preamble(KindDrainMarker, drainFields, &m.Identity, &m.Lease); err != nil {
		return err
	}
	var err error
	if m.ExpectedSequence, err = r.uint("expected_sequence"); err != nil {
		return err
	}
	return r.end()
}
