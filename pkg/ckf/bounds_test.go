package ckf

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Boundary tests: each pins an edge a mutation of its comparison would move.

func TestConfigValidateBounds(t *testing.T) {
	ok := func(name string, c Config) {
		t.Helper()
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v; want valid", name, err)
		}
	}
	bad := func(name string, c Config, kind BuildErrorKind) {
		t.Helper()
		var be *BuildError
		if err := c.Validate(); !errors.As(err, &be) || be.Kind != kind {
			t.Fatalf("%s: %v; want %v", name, err, kind)
		}
	}
	with := func(f func(*Config)) Config {
		c := NewConfig(64)
		f(&c)
		return c
	}
	ok("max kicks 1", with(func(c *Config) { c.MaxKicks = 1 }))
	ok("max kicks at the limit", with(func(c *Config) { c.MaxKicks = MaxKicks }))
	bad("max kicks 0", with(func(c *Config) { c.MaxKicks = 0 }), ErrInvalidMaxKicks)
	bad("max kicks over the limit", with(func(c *Config) { c.MaxKicks = MaxKicks + 1 }), ErrInvalidMaxKicks)
	ok("window 1", with(func(c *Config) { c.Search.VerificationWindow = 1 }))
	ok("window at the limit", with(func(c *Config) { c.Search.VerificationWindow = MaxVerificationWindow }))
	bad("window 0", with(func(c *Config) { c.Search.VerificationWindow = 0 }), ErrInvalidVerificationWindow)
	bad("window over the limit", with(func(c *Config) { c.Search.VerificationWindow = MaxVerificationWindow + 1 }), ErrInvalidVerificationWindow)
	ok("verbatim mode", with(func(c *Config) { c.Mode = HashModeVerbatim }))
	bad("unknown mode", with(func(c *Config) { c.Mode = HashModeVerbatim + 1 }), ErrInvalidHashMode)
}

func TestNewAddressingBucketCountBounds(t *testing.T) {
	for _, n := range []uint64{2, 4, 1 << 32} {
		a, err := NewAddressing(n, 7)
		if err != nil || a.BucketCount() != n {
			t.Fatalf("bucket count %d: %v", n, err)
		}
	}
	for _, n := range []uint64{0, 1, 3, 6, 1<<32 + 1, 1 << 33} {
		if _, err := NewAddressing(n, 7); err == nil {
			t.Fatalf("bucket count %d accepted", n)
		}
	}
}

func TestExplicitIdentityBounds(t *testing.T) {
	entries := func(n, keyLen, valueLen int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			k := fmt.Sprintf("k%03d", i)
			if i == 0 {
				k = strings.Repeat("k", keyLen)
			}
			m[k] = strings.Repeat("v", valueLen)
		}
		return m
	}
	accepted := [][3]int{{1, 1, 1}, {maxExplicitEntries, 8, 8}, {1, maxExplicitKey, 1}, {1, 1, maxExplicitValue}}
	refused := [][3]int{{0, 1, 1}, {maxExplicitEntries + 1, 8, 8}, {1, maxExplicitKey + 1, 1}, {1, 1, maxExplicitValue + 1}, {1, 0, 1}, {1, 1, 0}}
	for _, c := range accepted {
		if _, err := ExplicitRoutingScope(entries(c[0], c[1], c[2])); err != nil {
			t.Fatalf("entries %d, key %d, value %d bytes: %v", c[0], c[1], c[2], err)
		}
		id, err := ExplicitCacheSemantics(entries(c[0], c[1], c[2]), 16, 1)
		if err != nil {
			t.Fatalf("entries %d, key %d, value %d bytes: %v", c[0], c[1], c[2], err)
		}
		if id.Source != SourceExplicit || id.Digest == (Digest16{}) {
			t.Fatalf("entries %d, key %d, value %d bytes: cache semantics %+v, want an explicit digest", c[0], c[1], c[2], id)
		}
	}
	for _, c := range refused {
		if _, err := ExplicitRoutingScope(entries(c[0], c[1], c[2])); !errors.Is(err, ErrInvalidExplicitIdentity) {
			t.Fatalf("entries %d, key %d, value %d bytes: %v; want ErrInvalidExplicitIdentity", c[0], c[1], c[2], err)
		}
		if _, err := ExplicitCacheSemantics(entries(c[0], c[1], c[2]), 16, 1); !errors.Is(err, ErrInvalidExplicitIdentity) {
			t.Fatalf("cache semantics: entries %d, key %d, value %d bytes: %v; want ErrInvalidExplicitIdentity", c[0], c[1], c[2], err)
		}
	}
}
