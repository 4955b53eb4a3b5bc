package kvrelay

import (
	"fmt"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Identity derivation (§7). The BLAKE3 framing itself lives in pkg/ckf, which
// the NATS pipeline already uses and which is tested against the same golden
// vectors; these functions pin the Dynamo-specific inputs (one source path,
// the hash-format identity version, the three endpoint parts) and produce the
// wire messages.

// HashFormatIdentityVersion is the u16 appended to the cache-semantics
// material: 1 for DYNAMO_STANDARD_V1, 2 for DYNAMO_EAGLE_V1. It is unrelated
// to KvPoolId.identity_version. Other values are rejected rather than guessed.
func HashFormatIdentityVersion(f kvrelayv1.KvQueryHashFormat) (uint16, error) {
	switch f {
	case kvrelayv1.KvQueryHashFormat_KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1:
		return 1, nil
	case kvrelayv1.KvQueryHashFormat_KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1:
		return 2, nil
	}
	return 0, verr(ErrQueryHashFormat, "hash format", int64(f))
}

// DefaultCacheSemantics derives the DEFAULT_DERIVED cache-semantics digest of
// a model card (§7.1): BLAKE3 over the framed default tag, u32le(1), the
// framed source path, u32le(kvBlockSize) and the hash-format identity
// version. sourcePath is used byte for byte (see docs/kvrelay.md on
// normalisation).
func DefaultCacheSemantics(sourcePath string, kvBlockSize uint32, f kvrelayv1.KvQueryHashFormat) (*kvrelayv1.DigestIdentity, error) {
	v, err := HashFormatIdentityVersion(f)
	if err != nil {
		return nil, err
	}
	id := ckf.DefaultCacheSemantics([]string{sourcePath}, kvBlockSize, v)
	return digestIdentity(id.Digest, ckf.SourceDefaultDerived), nil
}

// ExplicitCacheSemantics derives the EXPLICIT cache-semantics digest from an
// operator-given map (1..=32 entries, keys 1..=128 bytes, values 1..=1024
// bytes; order-independent). The block size and hash format are always
// appended and cannot be overridden by the map.
func ExplicitCacheSemantics(entries map[string]string, kvBlockSize uint32, f kvrelayv1.KvQueryHashFormat) (*kvrelayv1.DigestIdentity, error) {
	v, err := HashFormatIdentityVersion(f)
	if err != nil {
		return nil, err
	}
	id, err := ckf.ExplicitCacheSemantics(entries, kvBlockSize, v)
	if err != nil {
		return nil, fmt.Errorf("kvrelay: explicit cache semantics: %w", err)
	}
	return digestIdentity(id.Digest, ckf.SourceExplicit), nil
}

// DefaultRoutingScope derives the DEFAULT_DERIVED routing-scope digest of a
// serving endpoint (§7.2), so that two endpoints are separate pools unless
// they share an explicit scope.
func DefaultRoutingScope(namespace, component, endpoint string) *kvrelayv1.DigestIdentity {
	id := ckf.DefaultRoutingScope(namespace, component, endpoint)
	return digestIdentity(id.Digest, ckf.SourceDefaultDerived)
}

// ExplicitRoutingScope derives the EXPLICIT routing-scope digest from an
// operator-given map (same bounds as ExplicitCacheSemantics).
func ExplicitRoutingScope(entries map[string]string) (*kvrelayv1.DigestIdentity, error) {
	id, err := ckf.ExplicitRoutingScope(entries)
	if err != nil {
		return nil, fmt.Errorf("kvrelay: explicit routing scope: %w", err)
	}
	return digestIdentity(id.Digest, ckf.SourceExplicit), nil
}

// DcID derives KvPoolId.dc_id from the Relay's --dc-id string (§7.3). It must
// be stable across restarts, so it depends on nothing but the name.
func DcID(name string) uint64 { return uint64(ckf.DcIDFromName(name)) }

func digestIdentity(d ckf.Digest16, src ckf.IdentitySource) *kvrelayv1.DigestIdentity {
	return &kvrelayv1.DigestIdentity{Digest: d[:], Source: sourceToWire(src)}
}

func sourceToWire(s ckf.IdentitySource) kvrelayv1.IdentitySource {
	if s == ckf.SourceExplicit {
		return kvrelayv1.IdentitySource_IDENTITY_SOURCE_EXPLICIT
	}
	return kvrelayv1.IdentitySource_IDENTITY_SOURCE_DEFAULT_DERIVED
}

// PoolIDToWire builds the wire KvPoolId of a ckf pool id.
func PoolIDToWire(p ckf.PoolID) *kvrelayv1.KvPoolId {
	cs, rs := p.Domain.CacheSemantics, p.Domain.RoutingScope
	return &kvrelayv1.KvPoolId{
		IdentityVersion: kvrelayv1.PoolIdentityVersion,
		IndexerDomain: &kvrelayv1.IndexerDomainId{
			CacheSemantics: digestIdentity(cs.Digest, cs.Source),
			RoutingScope:   digestIdentity(rs.Digest, rs.Source),
		},
		DcId: uint64(p.Dc),
	}
}

// ProducerToWire builds the wire ProducerIdentity of a ckf producer identity.
func ProducerToWire(p ckf.ProducerIdentity) *kvrelayv1.ProducerIdentity {
	return &kvrelayv1.ProducerIdentity{
		PoolId:              PoolIDToWire(p.Pool),
		ProducerIncarnation: p.ProducerIncarnation,
		LayoutGeneration:    p.LayoutGeneration,
		CkfFormat: &kvrelayv1.CkfFormat{
			FormatVersion:   uint32(p.Format.FormatVersion),
			Seed:            p.Format.Seed,
			BucketCount:     p.Format.BucketCount,
			FingerprintBits: uint32(p.Format.FingerprintBits),
			SlotsPerBucket:  uint32(p.Format.SlotsPerBucket),
		},
	}
}

// ProducerKey is the frozen v1 subscription key (§3.2): two producers are the
// same generation iff their keys are ==. It holds exactly the 14 dimensions
// (identity version, both digests and both sources, dc_id, incarnation,
// layout generation, five CKF format fields); descriptor metadata never
// participates. Only KeyOf builds one, so every key is of a valid producer.
type ProducerKey struct {
	IdentityVersion     uint32
	CacheSemantics      [16]byte
	CacheSource         kvrelayv1.IdentitySource
	RoutingScope        [16]byte
	RoutingSource       kvrelayv1.IdentitySource
	DcID                uint64
	ProducerIncarnation uint64
	LayoutGeneration    uint64
	FormatVersion       uint32
	Seed                uint64
	BucketCount         uint64
	FingerprintBits     uint32
	SlotsPerBucket      uint32
}

// KeyOf validates p (ValidateProducerIdentity) and returns its key.
func KeyOf(p *kvrelayv1.ProducerIdentity) (ProducerKey, error) {
	if err := ValidateProducerIdentity(p); err != nil {
		return ProducerKey{}, err
	}
	pool, dom, f := p.GetPoolId(), p.GetPoolId().GetIndexerDomain(), p.GetCkfFormat()
	k := ProducerKey{
		IdentityVersion:     pool.GetIdentityVersion(),
		CacheSource:         dom.GetCacheSemantics().GetSource(),
		RoutingSource:       dom.GetRoutingScope().GetSource(),
		DcID:                pool.GetDcId(),
		ProducerIncarnation: p.GetProducerIncarnation(),
		LayoutGeneration:    p.GetLayoutGeneration(),
		FormatVersion:       f.GetFormatVersion(),
		Seed:                f.GetSeed(),
		BucketCount:         f.GetBucketCount(),
		FingerprintBits:     f.GetFingerprintBits(),
		SlotsPerBucket:      f.GetSlotsPerBucket(),
	}
	copy(k.CacheSemantics[:], dom.GetCacheSemantics().GetDigest())
	copy(k.RoutingScope[:], dom.GetRoutingScope().GetDigest())
	return k, nil
}

// CKF returns the key as the ckf producer identity the indexer works with.
// The conversions are exact: validation pinned the format to (1, 16, 4) and
// both sources to DEFAULT_DERIVED or EXPLICIT.
func (k ProducerKey) CKF() ckf.ProducerIdentity {
	src := func(s kvrelayv1.IdentitySource) ckf.IdentitySource {
		if s == kvrelayv1.IdentitySource_IDENTITY_SOURCE_EXPLICIT {
			return ckf.SourceExplicit
		}
		return ckf.SourceDefaultDerived
	}
	return ckf.ProducerIdentity{
		Pool: ckf.PoolID{
			Domain: ckf.IndexerDomainID{
				CacheSemantics: ckf.CacheSemanticsID{Digest: k.CacheSemantics, Source: src(k.CacheSource)},
				RoutingScope:   ckf.RoutingScopeID{Digest: k.RoutingScope, Source: src(k.RoutingSource)},
			},
			Dc: ckf.DcID(k.DcID),
		},
		ProducerIncarnation: k.ProducerIncarnation,
		LayoutGeneration:    k.LayoutGeneration,
		Format: ckf.FormatIdentity{
			FormatVersion:   uint16(k.FormatVersion),
			Seed:            k.Seed,
			BucketCount:     k.BucketCount,
			FingerprintBits: uint8(k.FingerprintBits),
			SlotsPerBucket:  uint8(k.SlotsPerBucket),
		},
	}
}
