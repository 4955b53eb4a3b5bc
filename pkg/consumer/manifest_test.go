package consumer

import (
	"errors"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

func ixFormat(t testing.TB, expectedBlocks uint64) ckf.FormatIdentity {
	t.Helper()
	format, err := ckf.NewConfig(expectedBlocks).Format()
	if err != nil {
		t.Fatal(err)
	}
	return format
}

func ixDomain(semantics, scope byte, semanticsSource, scopeSource ckf.IdentitySource) ckf.IndexerDomainID {
	var cs, rs ckf.Digest16
	for i := range cs {
		cs[i], rs[i] = semantics, scope
	}
	return ckf.IndexerDomainID{
		CacheSemantics: ckf.CacheSemanticsID{Digest: cs, Source: semanticsSource},
		RoutingScope:   ckf.RoutingScopeID{Digest: rs, Source: scopeSource},
	}
}

func poolPtr(p ckf.PoolID) *ckf.PoolID { return &p }

func TestManifestEnforcesOneDomainAndOnePoolPerDc(t *testing.T) {
	format := ixFormat(t, 8)
	consumer := ckf.ConsumerInstanceID(1)
	domain := ixDomain(1, 2, ckf.SourceExplicit, ckf.SourceExplicit)
	foreign := ixDomain(3, 4, ckf.SourceExplicit, ckf.SourceExplicit)

	var mixed [ckf.LaneCount]*ckf.PoolID
	mixed[0] = poolPtr(ckf.PoolID{Domain: domain, Dc: 10})
	mixed[1] = poolPtr(ckf.PoolID{Domain: foreign, Dc: 11})
	_, err := NewManifest(consumer, domain, format, mixed)
	var be *BuildError
	if !errors.As(err, &be) || be.Kind != ErrMixedIndexerDomain || be.Lane != 1 || be.Expected != domain || be.Actual != foreign {
		t.Fatalf("mixed domains: got %v, want MixedIndexerDomain{lane 1}", err)
	}

	pool := ckf.PoolID{Domain: domain, Dc: 10}
	var duplicate [ckf.LaneCount]*ckf.PoolID
	duplicate[0], duplicate[1] = poolPtr(pool), poolPtr(pool)
	_, err = NewManifest(consumer, domain, format, duplicate)
	if !errors.As(err, &be) || be.Kind != ErrDuplicatePool || be.Pool != pool {
		t.Fatalf("duplicate pool: got %v, want DuplicatePool{%s}", err, pool)
	}
	if !errors.Is(err, ErrDuplicatePool) {
		t.Fatalf("errors.Is(%v, ErrDuplicatePool) = false", err)
	}

	if _, err := NewManifest(consumer, domain, format, [ckf.LaneCount]*ckf.PoolID{}); !errors.Is(err, ErrNoConfiguredLanes) {
		t.Fatalf("no lanes: got %v, want ErrNoConfiguredLanes", err)
	}
}

func TestDefaultDerivedDomainsMayJoinAcrossDcs(t *testing.T) {
	format := ixFormat(t, 8)
	domain := ixDomain(5, 6, ckf.SourceDefaultDerived, ckf.SourceExplicit)
	var lanes [ckf.LaneCount]*ckf.PoolID
	lanes[0] = poolPtr(ckf.PoolID{Domain: domain, Dc: 1})
	lanes[1] = poolPtr(ckf.PoolID{Domain: domain, Dc: 2})

	m, err := NewManifest(2, domain, format, lanes)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.ConfiguredLanes(); got != 0b11 {
		t.Fatalf("configured lanes = %#b, want 0b11", got)
	}
	if m.Domain() != domain {
		t.Fatalf("domain = %s, want %s", m.Domain(), domain)
	}
	if !m.JoinsOnDefaults() {
		t.Fatal("JoinsOnDefaults = false for two DCs under a default-derived domain")
	}

	explicit := ixDomain(5, 6, ckf.SourceExplicit, ckf.SourceExplicit)
	lanes[0] = poolPtr(ckf.PoolID{Domain: explicit, Dc: 1})
	lanes[1] = poolPtr(ckf.PoolID{Domain: explicit, Dc: 2})
	m, err = NewManifest(2, explicit, format, lanes)
	if err != nil {
		t.Fatal(err)
	}
	if m.JoinsOnDefaults() {
		t.Fatal("JoinsOnDefaults = true for an explicit domain")
	}
}

func TestManifestAccessors(t *testing.T) {
	format := ixFormat(t, 8)
	domain := ixDomain(7, 8, ckf.SourceExplicit, ckf.SourceExplicit)
	var lanes [ckf.LaneCount]*ckf.PoolID
	pool := ckf.PoolID{Domain: domain, Dc: 99}
	lanes[5] = poolPtr(pool)
	m, err := NewManifest(42, domain, format, lanes)
	if err != nil {
		t.Fatal(err)
	}
	if m.ConsumerInstance() != 42 || m.Format() != format || m.ConfiguredLanes() != 1<<5 {
		t.Fatalf("accessors: consumer %d format %+v mask %#x", m.ConsumerInstance(), m.Format(), m.ConfiguredLanes())
	}
	if got, ok := m.PoolID(5); !ok || got != pool {
		t.Fatalf("PoolID(5) = %v, %v", got, ok)
	}
	for _, lane := range []int{-1, 0, 4, 6, 16} {
		if _, ok := m.PoolID(lane); ok {
			t.Fatalf("PoolID(%d) reported configured", lane)
		}
	}
	if m.JoinsOnDefaults() {
		t.Fatal("one DC never joins on defaults")
	}
}
