package wire

import (
	"math/bits"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// WireLease is the producer-side lease stamped into every message: the
// pool's assignment epoch (the fencing token, bumped by compare-and-set on
// every takeover) and the relay instance holding it. It is not
// ckf.LaneLease, which is local to each consumer; a consumer maps
// (identity, epoch) to its own LaneLease (docs/design.md, "Leases and epochs").
type WireLease struct {
	Epoch    uint64
	Instance string
}

const (
	identityFields = 8
	formatFields   = 5
	leaseFields    = 2
	digest16Bytes  = 16
)

// checkFormat accepts only the 1.4.0 format this package's bucket words
// mean: format version 1, 16-bit fingerprints, 4 slots, and a power-of-two
// bucket count in MinBucketCount..MaxBucketCount.
func checkFormat(f *ckf.FormatIdentity) error {
	if f.FormatVersion != ckf.FormatVersion {
		return decodeErr(ErrFormatMismatch, "identity.format.format_version", "%d, want %d", f.FormatVersion, ckf.FormatVersion)
	}
	if f.FingerprintBits != ckf.FingerprintBits {
		return decodeErr(ErrFormatMismatch, "identity.format.fingerprint_bits", "%d, want %d", f.FingerprintBits, ckf.FingerprintBits)
	}
	if f.SlotsPerBucket != ckf.SlotsPerBucket {
		return decodeErr(ErrFormatMismatch, "identity.format.slots_per_bucket", "%d, want %d", f.SlotsPerBucket, ckf.SlotsPerBucket)
	}
	return checkBucketCount(f.BucketCount, "identity.format.bucket_count")
}

func checkBucketCount(n uint64, field string) error {
	if n < MinBucketCount || n > MaxBucketCount || bits.OnesCount64(n) != 1 {
		return decodeErr(ErrFormatMismatch, field, "%d is not a power of two in %d..%d", n, MinBucketCount, MaxBucketCount)
	}
	return nil
}

func checkSource(s ckf.IdentitySource, field string) error {
	if s != ckf.SourceDefaultDerived && s != ckf.SourceExplicit {
		return decodeErr(ErrUnknownEnum, field, "identity source %d", uint8(s))
	}
	return nil
}

func checkIdentity(id *ckf.ProducerIdentity) error {
	if err := checkSource(id.Pool.Domain.CacheSemantics.Source, "identity.cache_semantics.source"); err != nil {
		return err
	}
	if err := checkSource(id.Pool.Domain.RoutingScope.Source, "identity.routing_scope.source"); err != nil {
		return err
	}
	return checkFormat(&id.Format)
}

func checkLease(l *WireLease) error {
	return checkInstance(l.Instance, "lease.instance")
}

func checkInstance(s, field string) error {
	if len(s) > MaxInstanceBytes {
		return decodeErr(ErrTooLarge, field, "%d bytes, limit %d", len(s), MaxInstanceBytes)
	}
	return checkText(s, field)
}

// appendIdentity writes a checked identity.
func appendIdentity(dst []byte, id *ckf.ProducerIdentity) []byte {
	d := &id.Pool.Domain
	dst = appendArrayLen(dst, identityFields)
	dst = appendBin(dst, d.CacheSemantics.Digest[:])
	dst = appendUint(dst, uint64(d.CacheSemantics.Source))
	dst = appendBin(dst, d.RoutingScope.Digest[:])
	dst = appendUint(dst, uint64(d.RoutingScope.Source))
	dst = appendUint(dst, uint64(id.Pool.Dc))
	dst = appendUint(dst, id.ProducerIncarnation)
	dst = appendUint(dst, id.LayoutGeneration)
	f := &id.Format
	dst = appendArrayLen(dst, formatFields)
	dst = appendUint(dst, uint64(f.FormatVersion))
	dst = appendUint(dst, f.Seed)
	dst = appendUint(dst, f.BucketCount)
	dst = appendUint(dst, uint64(f.FingerprintBits))
	return appendUint(dst, uint64(f.SlotsPerBucket))
}

func appendLease(dst []byte, l *WireLease) []byte {
	dst = appendArrayLen(dst, leaseFields)
	dst = appendUint(dst, l.Epoch)
	return appendStr(dst, l.Instance)
}

func (r *reader) digest16(dst *ckf.Digest16, field string) error {
	p, err := r.bin(digest16Bytes, field)
	if err != nil {
		return err
	}
	if len(p) != digest16Bytes {
		return decodeErr(ErrMalformed, field, "digest of %d bytes, want %d", len(p), digest16Bytes)
	}
	copy(dst[:], p)
	return nil
}

func (r *reader) source(dst *ckf.IdentitySource, field string) error {
	v, err := r.uint(field)
	if err != nil {
		return err
	}
	if v > 0xff {
		return decodeErr(ErrUnknownEnum, field, "identity source %d", v)
	}
	*dst = ckf.IdentitySource(v)
	return checkSource(*dst, field)
}

// narrow reads an unsigned integer that must fit max (the Go field's width).
func (r *reader) narrow(max uint64, field string) (uint64, error) {
	v, err := r.uint(field)
	if err != nil {
		return 0, err
	}
	if v > max {
		return 0, decodeErr(ErrFormatMismatch, field, "%d does not fit its %d-bit field", v, bits.Len64(max))
	}
	return v, nil
}

func (r *reader) identity(id *ckf.ProducerIdentity) error {
	if err := r.array(identityFields, "identity"); err != nil {
		return err
	}
	d := &id.Pool.Domain
	if err := r.digest16(&d.CacheSemantics.Digest, "identity.cache_semantics.digest"); err != nil {
		return err
	}
	if err := r.source(&d.CacheSemantics.Source, "identity.cache_semantics.source"); err != nil {
		return err
	}
	if err := r.digest16(&d.RoutingScope.Digest, "identity.routing_scope.digest"); err != nil {
		return err
	}
	if err := r.source(&d.RoutingScope.Source, "identity.routing_scope.source"); err != nil {
		return err
	}
	dc, err := r.uint("identity.dc_id")
	if err != nil {
		return err
	}
	id.Pool.Dc = ckf.DcID(dc)
	if id.ProducerIncarnation, err = r.uint("identity.producer_incarnation"); err != nil {
		return err
	}
	if id.LayoutGeneration, err = r.uint("identity.layout_generation"); err != nil {
		return err
	}
	if err := r.array(formatFields, "identity.format"); err != nil {
		return err
	}
	f := &id.Format
	v, err := r.narrow(0xffff, "identity.format.format_version")
	if err != nil {
		return err
	}
	f.FormatVersion = uint16(v)
	if f.Seed, err = r.uint("identity.format.seed"); err != nil {
		return err
	}
	if f.BucketCount, err = r.uint("identity.format.bucket_count"); err != nil {
		return err
	}
	if v, err = r.narrow(0xff, "identity.format.fingerprint_bits"); err != nil {
		return err
	}
	f.FingerprintBits = uint8(v)
	if v, err = r.narrow(0xff, "identity.format.slots_per_bucket"); err != nil {
		return err
	}
	f.SlotsPerBucket = uint8(v)
	return checkFormat(f)
}

func (r *reader) lease(l *WireLease) error {
	if err := r.array(leaseFields, "lease"); err != nil {
		return err
	}
	var err error
	if l.Epoch, err = r.uint("lease.epoch"); err != nil {
		return err
	}
	p, err := r.str(MaxInstanceBytes, "lease.instance")
	if err != nil {
		return err
	}
	setString(&l.Instance, p)
	return nil
}
