package server_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAFeedDeliversDeltasInOrderThenItsEnd(t *testing.T) {
	fo := server.NewFanout()
	f := fo.Add([]uint64{0, 0}, 5, server.QueueLimits{Frames: 4, Bytes: 1 << 20})
	fo.Publish(5, 6, []cbi1.Image{{Bucket: 1, Word: 7}})
	fo.Publish(6, 7, nil)
	fo.Close(kvrelay.ErrPublicationUnavailable)
	<-f.Ready()
	for _, want := range []uint64{6, 7} {
		d, ok, err := f.Next()
		if !ok || err != nil || d.Sequence != want || d.BaseSequence != want-1 {
			t.Fatalf("delta %+v %v %v, want sequence %d", d, ok, err, want)
		}
	}
	if _, ok, err := f.Next(); ok || !errors.Is(err, kvrelay.ErrPublicationUnavailable) {
		t.Fatalf("end: %v %v", ok, err)
	}
	if g := fo.Add(nil, 7, server.QueueLimits{Frames: 1, Bytes: 1 << 20}); g != nil {
		if _, _, err := g.Next(); !errors.Is(err, kvrelay.ErrPublicationUnavailable) {
			t.Fatalf("add after close: %v", err)
		}
	}
}

func TestAFullQueueDropsItsSubscriberAndItsMemory(t *testing.T) {
	fo := server.NewFanout()
	slow := fo.Add(nil, 0, server.QueueLimits{Frames: 2, Bytes: 1 << 20})
	fast := fo.Add(nil, 0, server.QueueLimits{Frames: 2, Bytes: 1 << 20})
	img := make([]cbi1.Image, 10)
	for seq := uint64(0); seq < 5; seq++ {
		fo.Publish(seq, seq+1, img)
		if _, ok, err := fast.Next(); !ok || err != nil {
			t.Fatalf("fast subscriber: %v %v", ok, err)
		}
	}
	if n := fo.Len(); n != 1 {
		t.Fatalf("%d subscribers, want the slow one dropped", n)
	}
	if _, ok, err := slow.Next(); ok || !errors.Is(err, kvrelay.ErrSubscriberLagged) {
		t.Fatalf("slow subscriber: %v %v (its queue must be gone)", ok, err)
	}
	// Byte bound: one frame over the budget drops too.
	big := fo.Add(nil, 5, server.QueueLimits{Frames: 100, Bytes: cbi1.DeltaFrameLen(10) + 256})
	fo.Publish(5, 6, img)
	fo.Publish(6, 7, img)
	if _, _, err := big.Next(); !errors.Is(err, kvrelay.ErrSubscriberLagged) {
		t.Fatalf("byte bound: %v", err)
	}
	// An oversized delta ends every feed: they need a fresh snapshot.
	fo.Publish(7, 8, make([]cbi1.Image, cbi1.MaxDeltaImages+1))
	for {
		_, ok, err := fast.Next()
		if !ok {
			if !errors.Is(err, kvrelay.ErrPublicationUnavailable) {
				t.Fatalf("oversized delta: %v", err)
			}
			break
		}
	}
	if fo.Len() != 0 {
		t.Fatal("feeds left after an oversized delta")
	}
}

func TestConfigValidation(t *testing.T) {
	ok := server.DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*server.Config){
		"zero heartbeat":       func(c *server.Config) { c.PoolHeartbeat = 0 },
		"interval over a year": func(c *server.Config) { c.LoadWindow = 366 * 24 * time.Hour },
		"zero limit":           func(c *server.Config) { c.MaxPoolStreams = 0 },
		"message 4194368":      func(c *server.Config) { c.MaxMessageBytes = 4_194_368 },
		"queue bytes 4194368":  func(c *server.Config) { c.Queue.Bytes = 4_194_368 },
	} {
		c := server.DefaultConfig()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, server.ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestPoolSpecDescriptorIsValidAndKeyed(t *testing.T) {
	spec := server.PoolSpec{Model: "llama", Aliases: []string{"chat", "llama", "chat"}, Namespace: "prod", Component: "router", Endpoint: "generate", BlockSize: 512}
	gen, err := spec.Generation(kvrelay.DcID("dc-a"), 9, 1, ckf.NewFormatIdentity(ckf.DefaultSeed, 1024))
	if err != nil {
		t.Fatal(err)
	}
	d := gen.Descriptor
	// §7.4 golden vector: meta/llama is another card, so check the routing
	// scope (endpoint prod/router/generate) and the dc_id.
	rs := d.Producer.PoolId.IndexerDomain.RoutingScope.Digest
	if got := hexs(rs); got != "18270d3ba03effaec8d167ba02c7752d" || d.Producer.PoolId.DcId != 0x04f110c98b1bfc48 {
		t.Fatalf("routing scope %s dc %#x", got, d.Producer.PoolId.DcId)
	}
	if a := d.Registrations[0].Aliases; len(a) != 1 || a[0] != "chat" {
		t.Fatalf("aliases %v", a)
	}
	if gen.Key.ProducerIncarnation != 9 || gen.Key.BucketCount != 1024 {
		t.Fatalf("key %+v", gen.Key)
	}
	bad := spec
	bad.BlockSize = 0
	if err := bad.Validate(); err == nil {
		t.Fatal("block size 0 accepted")
	}
}

// Dynamo's relay derives a pool's cache semantics from its model card's
// source path and takes the canonical model id from the served name. On
// Dynamo's golden fixture (§7.4: served name "display", source path
// "meta/llama", block size 512, endpoint prod/router/generate) the
// descriptor carries Dynamo's frozen digests and registers "display";
// without a source path the served name is the source path, as before.
func TestPoolSpecDerivesCacheSemanticsFromTheSourcePath(t *testing.T) {
	const (
		cacheDigest   = "7d31eb9019357572470605f4a8be687e"
		routingDigest = "18270d3ba03effaec8d167ba02c7752d"
	)
	f := ckf.NewFormatIdentity(ckf.DefaultSeed, 1024)
	golden := server.PoolSpec{Model: "display", SourcePath: "meta/llama", Namespace: "prod", Component: "router", Endpoint: "generate", BlockSize: 512}
	gen, err := golden.Generation(kvrelay.DcID("dc-a"), 1, 1, f)
	if err != nil {
		t.Fatal(err)
	}
	dom := gen.Descriptor.Producer.PoolId.IndexerDomain
	if got := hexs(dom.CacheSemantics.Digest); got != cacheDigest || dom.CacheSemantics.Source != kvrelayv1.IdentitySource_IDENTITY_SOURCE_DEFAULT_DERIVED {
		t.Fatalf("cache semantics %s (%v), want Dynamo's %s (DEFAULT_DERIVED)", got, dom.CacheSemantics.Source, cacheDigest)
	}
	if got := hexs(dom.RoutingScope.Digest); got != routingDigest {
		t.Fatalf("routing scope %s, want %s", got, routingDigest)
	}
	reg := gen.Descriptor.Registrations
	if len(reg) != 1 || reg[0].CanonicalModelId != "display" || reg[0].GetTarget().GetBase().GetBaseModel() != "display" {
		t.Fatalf("registrations %v, want canonical id display with a Base target", reg)
	}
	if gen.Key.CacheSemantics != [16]byte(dom.CacheSemantics.Digest) {
		t.Fatalf("producer key cache semantics %x, descriptor %x", gen.Key.CacheSemantics, dom.CacheSemantics.Digest)
	}

	// No source path: the served name is the card's source path.
	same := server.PoolSpec{Model: "meta/llama", Namespace: "prod", Component: "router", Endpoint: "generate", BlockSize: 512}
	if g, err := same.Generation(kvrelay.DcID("dc-a"), 1, 1, f); err != nil || hexs(g.Descriptor.Producer.PoolId.IndexerDomain.CacheSemantics.Digest) != cacheDigest {
		t.Fatalf("model meta/llama without a source path: %v, want cache semantics %s", err, cacheDigest)
	}
	named := golden
	named.SourcePath = ""
	g, err := named.Generation(kvrelay.DcID("dc-a"), 1, 1, f)
	if err != nil {
		t.Fatal(err)
	}
	if got := hexs(g.Descriptor.Producer.PoolId.IndexerDomain.CacheSemantics.Digest); got == cacheDigest {
		t.Fatalf("the served name %q derived the source path's digest %s", named.Model, got)
	}
}

func hexs(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
