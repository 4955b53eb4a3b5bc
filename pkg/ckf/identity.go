package ckf

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"github.com/zeebo/blake3"
)

// IdentitySource says whether a digest was derived from defaults or given.
type IdentitySource uint8

const (
	SourceDefaultDerived IdentitySource = iota
	SourceExplicit
)

func (s IdentitySource) String() string {
	if s == SourceExplicit {
		return "explicit"
	}
	return "default_derived"
}

// Digest16 is the first 16 bytes of a BLAKE3 digest.
type Digest16 [16]byte

func (d Digest16) String() string { return hex.EncodeToString(d[:]) }

// CacheSemanticsID names what a cached block means (model, block size, hash format).
type CacheSemanticsID struct {
	Digest Digest16
	Source IdentitySource
}

func (c CacheSemanticsID) String() string { return c.Digest.String() }

// RoutingScopeID names the routing namespace.
type RoutingScopeID struct {
	Digest Digest16
	Source IdentitySource
}

func (r RoutingScopeID) String() string { return r.Digest.String() }

// IndexerDomainID is one logical KV indexer namespace.
type IndexerDomainID struct {
	CacheSemantics CacheSemanticsID
	RoutingScope   RoutingScopeID
}

func (d IndexerDomainID) String() string {
	return d.CacheSemantics.String() + ":" + d.RoutingScope.String()
}

// ReliesOnDefaults reports whether either dimension is default-derived.
func (d IndexerDomainID) ReliesOnDefaults() bool {
	return d.CacheSemantics.Source == SourceDefaultDerived || d.RoutingScope.Source == SourceDefaultDerived
}

// DcID is a stable logical data-center id.
type DcID uint64

func (d DcID) String() string { return fmt.Sprintf("%016x", uint64(d)) }

// DcIDFromName derives the stable id of a DC name.
func DcIDFromName(name string) DcID {
	var m []byte
	m = append(m, "dynamo/indexer-dc/v1"...)
	m = binary.LittleEndian.AppendUint32(m, uint32(len(name)))
	m = append(m, name...)
	sum := blake3.Sum256(m)
	return DcID(binary.LittleEndian.Uint64(sum[:8]))
}

// PoolID is one DC-local producer and stream: (domain, DC). Comparable.
type PoolID struct {
	Domain IndexerDomainID
	Dc     DcID
}

func (p PoolID) String() string { return p.Domain.String() + "/" + p.Dc.String() }

// ConsumerInstanceID identifies one global consumer instance.
type ConsumerInstanceID uint64

// LaneLease is the consumer-local lease of one physical lane.
type LaneLease struct {
	ConsumerInstance ConsumerInstanceID
	PhysicalLane     uint8
	AssignmentEpoch  uint64
}

// FormatIdentity is DcCkfFormatIdentity; equality of the whole struct is
// required between producer and consumer.
type FormatIdentity struct {
	FormatVersion   uint16
	Seed            uint64
	BucketCount     uint64
	FingerprintBits uint8
	SlotsPerBucket  uint8
}

// NewFormatIdentity returns the 1.4.0 format for a seed and bucket count.
func NewFormatIdentity(seed, bucketCount uint64) FormatIdentity {
	return FormatIdentity{FormatVersion: FormatVersion, Seed: seed, BucketCount: bucketCount, FingerprintBits: FingerprintBits, SlotsPerBucket: SlotsPerBucket}
}

// ProducerIdentity names one producer generation of one pool.
type ProducerIdentity struct {
	Pool                PoolID
	ProducerIncarnation uint64
	LayoutGeneration    uint64
	Format              FormatIdentity
}

// Digest derivation (spec §13): BLAKE3 over length-framed material.

const (
	tagSemanticsDefault  = "dynamo/indexer-cache-semantics/default/v1"
	tagSemanticsExplicit = "dynamo/indexer-cache-semantics/explicit/v1"
	tagScopeDefault      = "dynamo/indexer-routing-scope/default/v1"
	tagScopeExplicit     = "dynamo/indexer-routing-scope/explicit/v1"

	maxExplicitEntries = 32
	maxExplicitKey     = 128
	maxExplicitValue   = 1024
)

// ErrInvalidExplicitIdentity is wrapped by every explicit-map validation error.
var ErrInvalidExplicitIdentity = errors.New("ckf: invalid explicit identity map")

func framed(dst []byte, s string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

func digest16(m []byte) Digest16 {
	sum := blake3.Sum256(m)
	var d Digest16
	copy(d[:], sum[:16])
	return d
}

func explicitMaterial(tag string, entries map[string]string) ([]byte, error) {
	if len(entries) == 0 || len(entries) > maxExplicitEntries {
		return nil, fmt.Errorf("%w: %d entries, want 1..%d", ErrInvalidExplicitIdentity, len(entries), maxExplicitEntries)
	}
	keys := make([]string, 0, len(entries))
	for k, v := range entries {
		if k == "" || len(k) > maxExplicitKey {
			return nil, fmt.Errorf("%w: key %q must be 1..%d bytes", ErrInvalidExplicitIdentity, k, maxExplicitKey)
		}
		if v == "" || len(v) > maxExplicitValue {
			return nil, fmt.Errorf("%w: value of %q must be 1..%d bytes", ErrInvalidExplicitIdentity, k, maxExplicitValue)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	m := framed(nil, tag)
	m = binary.LittleEndian.AppendUint32(m, uint32(len(keys)))
	for _, k := range keys {
		m = framed(m, k)
		m = framed(m, entries[k])
	}
	return m, nil
}

// DefaultCacheSemantics derives the cache-semantics id from defaults.
func DefaultCacheSemantics(values []string, kvBlockSize uint32, eventHashFormat uint16) CacheSemanticsID {
	m := framed(nil, tagSemanticsDefault)
	m = binary.LittleEndian.AppendUint32(m, uint32(len(values)))
	for _, v := range values {
		m = framed(m, v)
	}
	m = binary.LittleEndian.AppendUint32(m, kvBlockSize)
	m = binary.LittleEndian.AppendUint16(m, eventHashFormat)
	return CacheSemanticsID{Digest: digest16(m), Source: SourceDefaultDerived}
}

// ExplicitCacheSemantics derives the cache-semantics id from an explicit map.
// Map iteration order does not matter: keys are sorted.
func ExplicitCacheSemantics(entries map[string]string, kvBlockSize uint32, eventHashFormat uint16) (CacheSemanticsID, error) {
	m, err := explicitMaterial(tagSemanticsExplicit, entries)
	if err != nil {
		return CacheSemanticsID{}, err
	}
	m = binary.LittleEndian.AppendUint32(m, kvBlockSize)
	m = binary.LittleEndian.AppendUint16(m, eventHashFormat)
	return CacheSemanticsID{Digest: digest16(m), Source: SourceExplicit}, nil
}

// DefaultRoutingScope derives the routing scope from the endpoint
// (namespace, component, name).
func DefaultRoutingScope(values ...string) RoutingScopeID {
	m := framed(nil, tagScopeDefault)
	m = binary.LittleEndian.AppendUint32(m, uint32(len(values)))
	for _, v := range values {
		m = framed(m, v)
	}
	return RoutingScopeID{Digest: digest16(m), Source: SourceDefaultDerived}
}

// ExplicitRoutingScope derives the routing scope from an explicit map.
func ExplicitRoutingScope(entries map[string]string) (RoutingScopeID, error) {
	m, err := explicitMaterial(tagScopeExplicit, entries)
	if err != nil {
		return RoutingScopeID{}, err
	}
	return RoutingScopeID{Digest: digest16(m), Source: SourceExplicit}, nil
}

// DomainFromName is ckfrelay's operator-facing shortcut: a domain named by one
// string gets explicit cache-semantics and routing-scope ids derived from it.
func DomainFromName(name string) (IndexerDomainID, error) {
	cs, err := ExplicitCacheSemantics(map[string]string{"domain": name}, 0, 1)
	if err != nil {
		return IndexerDomainID{}, err
	}
	rs, err := ExplicitRoutingScope(map[string]string{"domain": name})
	if err != nil {
		return IndexerDomainID{}, err
	}
	return IndexerDomainID{CacheSemantics: cs, RoutingScope: rs}, nil
}
