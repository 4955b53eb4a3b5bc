package kvrelay_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/zeebo/blake3"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

const (
	standard = kvrelayv1.KvQueryHashFormat_KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1
	eagle    = kvrelayv1.KvQueryHashFormat_KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1
	explicit = kvrelayv1.IdentitySource_IDENTITY_SOURCE_EXPLICIT
	derived  = kvrelayv1.IdentitySource_IDENTITY_SOURCE_DEFAULT_DERIVED
)

func blake16(t *testing.T, materialHex string) string {
	t.Helper()
	m, err := hex.DecodeString(materialHex)
	if err != nil {
		t.Fatal(err)
	}
	sum := blake3.Sum256(m)
	return hex.EncodeToString(sum[:16])
}

func checkDigest(t *testing.T, name string, got *kvrelayv1.DigestIdentity, wantHex string, wantSource kvrelayv1.IdentitySource) {
	t.Helper()
	if hex.EncodeToString(got.GetDigest()) != wantHex || got.GetSource() != wantSource {
		t.Errorf("%s = %x %v, want %s %v", name, got.GetDigest(), got.GetSource(), wantHex, wantSource)
	}
}

// Dynamo's frozen golden vectors (§7.4): card source_path "meta/llama",
// block 512, not EAGLE, endpoint prod/router/generate. The material is
// checked too, so a framing change cannot hide behind a matching digest.
func TestFrozenGoldenVectors(t *testing.T) {
	const (
		cacheMaterial = "2900000064796e616d6f2f696e64657865722d63616368652d73656d616e746963732f64656661756c742f7631010000000a0000006d6574612f6c6c616d61000200000100"
		cacheDigest   = "7d31eb9019357572470605f4a8be687e"
		scopeMaterial = "2700000064796e616d6f2f696e64657865722d726f7574696e672d73636f70652f64656661756c742f7631030000000400000070726f6406000000726f757465720800000067656e6572617465"
		scopeDigest   = "18270d3ba03effaec8d167ba02c7752d"
	)
	if got := blake16(t, cacheMaterial); got != cacheDigest {
		t.Fatalf("BLAKE3(cache material) = %s", got)
	}
	if got := blake16(t, scopeMaterial); got != scopeDigest {
		t.Fatalf("BLAKE3(scope material) = %s", got)
	}
	cs, err := kvrelay.DefaultCacheSemantics("meta/llama", 512, standard)
	if err != nil {
		t.Fatal(err)
	}
	checkDigest(t, "cache semantics", cs, cacheDigest, derived)
	checkDigest(t, "routing scope", kvrelay.DefaultRoutingScope("prod", "router", "generate"), scopeDigest, derived)
}

// The additional vectors of §7.4, computed from the layout.
func TestAdditionalIdentityVectors(t *testing.T) {
	cs, err := kvrelay.DefaultCacheSemantics("meta/llama", 512, eagle)
	if err != nil {
		t.Fatal(err)
	}
	checkDigest(t, "EAGLE cache semantics", cs, "deae03cf69f6e4a47cbec26ceba95354", derived)

	shared := map[string]string{"authority": "shared"}
	cs, err = kvrelay.ExplicitCacheSemantics(shared, 512, standard)
	if err != nil {
		t.Fatal(err)
	}
	checkDigest(t, "explicit cache semantics", cs, "7fa9d8c0ccc742baf1482cc003a26faa", explicit)
	rs, err := kvrelay.ExplicitRoutingScope(shared)
	if err != nil {
		t.Fatal(err)
	}
	checkDigest(t, "explicit routing scope", rs, "bb0a749fe11ddde6380ff04c6d091c4b", explicit)

	if got := blake16(t, "64796e616d6f2f696e64657865722d64632f76310400000064632d61"); got[:16] != "48fc1b8bc910f104" {
		t.Errorf("dc material digest prefix %s", got[:16])
	}
	for name, want := range map[string]uint64{"dc-a": 0x04f110c98b1bfc48, "dc-b": 0xa80b8cea06f82376, "us-west": 0xdccaa7bfa0f30f77} {
		if got := kvrelay.DcID(name); got != want {
			t.Errorf("DcID(%q) = %#016x, want %#016x", name, got, want)
		}
	}
	// Display forms (§7.4): fixed-width lowercase hex.
	if got := ckf.DcID(1).String(); got != "0000000000000001" {
		t.Errorf("DcID(1) text %q", got)
	}
	var d ckf.Digest16
	for i := range d {
		d[i] = 0xab
	}
	if got := d.String(); got != "abababababababababababababababab" {
		t.Errorf("digest text %q", got)
	}
	if got := fmt.Sprintf("%016x", kvrelay.DcID("dc-a")); got != "04f110c98b1bfc48" {
		t.Errorf("dc-a text %q", got)
	}
}

func TestIdentityDerivationRejects(t *testing.T) {
	for _, f := range []kvrelayv1.KvQueryHashFormat{0, 3, -1} {
		if _, err := kvrelay.DefaultCacheSemantics("m", 1, f); !errors.Is(err, kvrelay.ErrQueryHashFormat) {
			t.Errorf("hash format %d: %v", f, err)
		}
		if _, err := kvrelay.ExplicitCacheSemantics(map[string]string{"a": "b"}, 1, f); !errors.Is(err, kvrelay.ErrQueryHashFormat) {
			t.Errorf("explicit, hash format %d: %v", f, err)
		}
	}
	tooMany := map[string]string{}
	for i := range 33 {
		tooMany[fmt.Sprint(i)] = "v"
	}
	bad := []map[string]string{nil, {}, {"": "v"}, {"k": ""}, tooMany, {string(make([]byte, 129)): "v"}, {"k": string(make([]byte, 1025))}}
	for _, m := range bad {
		if _, err := kvrelay.ExplicitCacheSemantics(m, 512, standard); !errors.Is(err, ckf.ErrInvalidExplicitIdentity) {
			t.Errorf("explicit cache semantics of %d entries: %v", len(m), err)
		}
		if _, err := kvrelay.ExplicitRoutingScope(m); !errors.Is(err, ckf.ErrInvalidExplicitIdentity) {
			t.Errorf("explicit routing scope of %d entries: %v", len(m), err)
		}
	}
	// The block size and hash format cannot be overridden through the map.
	a, _ := kvrelay.ExplicitCacheSemantics(map[string]string{"authority": "shared"}, 512, standard)
	b, _ := kvrelay.ExplicitCacheSemantics(map[string]string{"authority": "shared"}, 64, standard)
	c, _ := kvrelay.ExplicitCacheSemantics(map[string]string{"authority": "shared"}, 512, eagle)
	if string(a.Digest) == string(b.Digest) || string(a.Digest) == string(c.Digest) {
		t.Error("block size or hash format does not reach the explicit digest")
	}
}

// Derived identities validate as the pool id a Relay would publish.
func TestDerivedPoolIDValidates(t *testing.T) {
	cs, err := kvrelay.DefaultCacheSemantics("meta/llama", 512, standard)
	if err != nil {
		t.Fatal(err)
	}
	p := &kvrelayv1.KvPoolId{
		IdentityVersion: kvrelayv1.PoolIdentityVersion,
		IndexerDomain:   &kvrelayv1.IndexerDomainId{CacheSemantics: cs, RoutingScope: kvrelay.DefaultRoutingScope("prod", "router", "generate")},
		DcId:            kvrelay.DcID("dc-a"),
	}
	if err := kvrelay.ValidatePoolID(p); err != nil {
		t.Fatal(err)
	}
}
