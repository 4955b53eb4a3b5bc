package kvrelay_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// §8.2 scenario 10: the key changes under every single-field mutation of the
// producer identity. The spec text says 14 dimensions; its own field list (and
// Dynamo's test) has 13: identity_version, both digests, both sources, dc_id,
// producer_incarnation, layout_generation and the five CkfFormat fields. As
// in Dynamo, a mutation that makes the identity invalid also counts as a
// different key: it can never be confused with the original.
func TestProducerKeyDimensions(t *testing.T) {
	base, err := kvrelay.KeyOf(producer())
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := kvrelay.KeyOf(producer()); again != base {
		t.Fatal("equal producers have different keys")
	}
	cs := func(p *kvrelayv1.ProducerIdentity) *kvrelayv1.DigestIdentity {
		return p.PoolId.IndexerDomain.CacheSemantics
	}
	rs := func(p *kvrelayv1.ProducerIdentity) *kvrelayv1.DigestIdentity {
		return p.PoolId.IndexerDomain.RoutingScope
	}
	mutations := []struct {
		name   string
		mutate func(p *kvrelayv1.ProducerIdentity)
	}{
		{"identity_version", func(p *kvrelayv1.ProducerIdentity) { p.PoolId.IdentityVersion++ }},
		{"dc_id", func(p *kvrelayv1.ProducerIdentity) { p.PoolId.DcId++ }},
		{"cache digest", func(p *kvrelayv1.ProducerIdentity) { cs(p).Digest[0] ^= 1 }},
		{"routing digest", func(p *kvrelayv1.ProducerIdentity) { rs(p).Digest[15] ^= 1 }},
		{"cache source", func(p *kvrelayv1.ProducerIdentity) { cs(p).Source = explicit }},
		{"routing source", func(p *kvrelayv1.ProducerIdentity) { rs(p).Source = derived }},
		{"producer_incarnation", func(p *kvrelayv1.ProducerIdentity) { p.ProducerIncarnation++ }},
		{"layout_generation", func(p *kvrelayv1.ProducerIdentity) { p.LayoutGeneration++ }},
		{"format_version", func(p *kvrelayv1.ProducerIdentity) { p.CkfFormat.FormatVersion++ }},
		{"seed", func(p *kvrelayv1.ProducerIdentity) { p.CkfFormat.Seed++ }},
		{"bucket_count", func(p *kvrelayv1.ProducerIdentity) { p.CkfFormat.BucketCount *= 2 }},
		{"fingerprint_bits", func(p *kvrelayv1.ProducerIdentity) { p.CkfFormat.FingerprintBits++ }},
		{"slots_per_bucket", func(p *kvrelayv1.ProducerIdentity) { p.CkfFormat.SlotsPerBucket++ }},
	}
	for _, m := range mutations {
		p := producer()
		m.mutate(p)
		if k, err := kvrelay.KeyOf(p); err == nil && k == base {
			t.Errorf("mutating %s leaves the key unchanged", m.name)
		}
	}
}

// Descriptor metadata never takes part in the key.
func TestProducerKeyIgnoresDescriptorMetadata(t *testing.T) {
	a, b := descriptor(), descriptor()
	b.ServingEndpoint.Component = "other"
	b.Registrations = nil
	b.PoolRoles = []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_DECODE}
	b.QuerySemantics.KvBlockSize = 16
	ka, _ := kvrelay.KeyOf(a.Producer)
	kb, _ := kvrelay.KeyOf(b.Producer)
	if ka != kb {
		t.Fatal("descriptor metadata changed the producer key")
	}
}

func TestProducerKeyCKFConversion(t *testing.T) {
	dom, err := ckf.DomainFromName("tenant")
	if err != nil {
		t.Fatal(err)
	}
	want := ckf.ProducerIdentity{
		Pool:                ckf.PoolID{Domain: dom, Dc: ckf.DcIDFromName("dc-a")},
		ProducerIncarnation: 5,
		LayoutGeneration:    9,
		Format:              ckf.NewFormatIdentity(ckf.DefaultSeed, 1<<20),
	}
	wire := kvrelay.ProducerToWire(want)
	k, err := kvrelay.KeyOf(wire)
	if err != nil {
		t.Fatal(err)
	}
	if got := k.CKF(); got != want {
		t.Fatalf("CKF() = %+v, want %+v", got, want)
	}
	if k.Format().BucketCount() != 1<<20 || k.Format().Seed() != ckf.DefaultSeed {
		t.Fatalf("Format() = %v", k.Format())
	}
	// Default-derived sources survive the round trip too.
	want.Pool.Domain.CacheSemantics.Source = ckf.SourceDefaultDerived
	k, err = kvrelay.KeyOf(kvrelay.ProducerToWire(want))
	if err != nil || k.CKF() != want {
		t.Fatalf("default-derived round trip: %v", err)
	}
	// A hand-built zero key has the zero Format, which cbi1 rejects.
	if (kvrelay.ProducerKey{}).Format() != (cbi1.Format{}) {
		t.Fatal("zero key has a usable format")
	}
}

// §8.2 scenario 12: the full pool id round-trips through the wire and
// validates.
func TestPoolIDRoundTrip(t *testing.T) {
	p := poolID()
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var got kvrelayv1.KvPoolId
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, p) {
		t.Fatalf("round trip = %v", &got)
	}
	if err := kvrelay.ValidatePoolID(&got); err != nil {
		t.Fatal(err)
	}
}

func TestKeyOfRequiresValidProducer(t *testing.T) {
	if _, err := kvrelay.KeyOf(nil); !errors.Is(err, kvrelay.ErrMissingField) {
		t.Fatalf("nil producer: %v", err)
	}
}
