package indexer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/pools"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server/servertest"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// kvProcess is one relay process as relay-producer wires it with a pools
// file: one dynamo.kvrelay.v1 server whose catalog lists the pool of every
// relay added with pool.
type kvProcess struct {
	e    *env
	srv  *server.Server
	addr string
}

func (e *env) kvProcess(t *testing.T) *kvProcess {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.PoolHeartbeat, cfg.CatalogHeartbeat, cfg.ReadinessHeartbeat = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	cfg.Logger = logger(t)
	srv, addr := servertest.Serve(t, nil, cfg)
	return &kvProcess{e: e, srv: srv, addr: addr}
}

// pool runs a relay of the NATS domain src in DC dc-a whose pool registers
// model (with aliases) at blockSize, and serves it in p's catalog.
func (p *kvProcess) pool(t *testing.T, src, model string, blockSize uint32, aliases ...string) (*runningRelay, server.Publication) {
	t.Helper()
	rr, r := p.e.relayWith(t, src, "dc-a", testBlocks, func(c *relay.Config) {
		c.KvRelay = &server.PoolSpec{Model: model, Aliases: aliases, Namespace: "prod", Component: src, Endpoint: "generate", BlockSize: blockSize}
	})
	p.srv.AddPool(src, r.Publication())
	return rr, r.Publication()
}

// poolsProcess is relay-producer --pools-file f --kvrelay-listen: a pools
// manager of DC dc-a whose pools are all served in one kvrelay catalog
// (the manager's OnPool callbacks add and remove them, as the binary
// wires it). It returns the manager and the server.
func (e *env) poolsProcess(t *testing.T, f pools.File) (*pools.Manager, *kvProcess) {
	t.Helper()
	p := e.kvProcess(t)
	c := relay.DefaultConfig("default", "dc-a")
	c.Instance = "relay-1"
	c.CKF = ckf.NewConfig(testBlocks)
	c.PublishInterval = 2 * time.Millisecond
	c.HeartbeatInterval = 20 * time.Millisecond
	c.LeaseTTL = 3 * time.Second
	c.Streams = streams.Options{Memory: true}
	c.Logger = logger(t)
	nc := e.srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pools.New(nc, js, pools.Config{Base: c, File: f, KvRelay: &server.PoolText{Endpoint: "prod/backend/generate", BlockSize: 16}, Logger: c.Logger})
	if err != nil {
		t.Fatal(err)
	}
	m.OnPool(func(domain string, r *relay.Relay) {
		if pub := r.Publication(); pub != nil {
			p.srv.AddPool(domain, pub)
		}
	}, func(domain string) { p.srv.RemovePool(domain) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitTotal):
			t.Errorf("pools manager did not stop")
		}
	})
	return m, p
}

// kvModels is a registry config following models over one source, dyn.
func kvModels(addr string) domains.KvRelayModels {
	return domains.KvRelayModels{KvRelay: follow.KvRelayConfig{
		Sources:      []follow.KvRelaySource{{Name: "dyn", Addr: addr}},
		AcceptLegacy: true, BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
	}}
}

func TestModelDomain(t *testing.T) {
	for model, want := range map[string]string{
		"qwen": "qwen", "meta-llama/Llama-3.1-8B-Instruct": "meta-llama_Llama-3_1-8B-Instruct", "a b.c*>": "a_b_c__", "modèle": "mod__le",
	} {
		if got, err := domains.ModelDomain(model); err != nil || got != want {
			t.Errorf("ModelDomain(%q) = %q, %v; want %q", model, got, err, want)
		}
	}
	for _, model := range []string{"", string(make([]byte, 65))} {
		if d, err := domains.ModelDomain(model); err == nil {
			t.Errorf("ModelDomain(%q) = %q, want an error", model, d)
		}
	}
}

// One relay process (a pools file of two pools, each with its kvrelay
// block) serves both pools in one catalog; one registry follows every
// model it lists, each into its own domain at its own block size. Queries
// naming each model (by domain, canonical id or alias) get that model's
// answer; a pool stopped (withdrawn from the catalog) leaves the other
// model's answers and readiness unchanged, and its own domain served
// (unready) until it comes back.
func TestKvRelayModelsEachIntoTheirDomain(t *testing.T) {
	e := newEnv(t)
	m, p := e.poolsProcess(t, pools.File{Pools: []pools.PoolSpec{
		{Domain: "src-llama", KvRelay: &pools.KvRelayBlock{Model: "meta/llama-3.1", Aliases: []string{"llama"}, Endpoint: "prod/llama/generate"}},
		{Domain: "src-qwen", KvRelay: &pools.KvRelayBlock{Model: "qwen", Endpoint: "prod/qwen/generate", BlockSize: 32}},
	}})
	// The workloads go to the pools' event subjects, as the workers'.
	llama := &runningRelay{domain: "src-llama", dc: "dc-a", js: e.js}
	qwen := &runningRelay{domain: "src-qwen", dc: "dc-a", js: e.js}
	k := kvModels(p.addr)
	k.All = true
	r := e.start(t, domains.Config{Base: baseConfig(t, 0), KvRelay: k})
	wl, wq := newWorkload(1, 40, 5), newWorkload(2, 40, 7)
	wl.publish(t, llama)
	wq.publish(t, qwen)

	eventually(t, "llama exact", func() error { return wl.exact(r, "meta_llama-3_1", "dyn") })
	eventually(t, "qwen exact", func() error { return wq.exact(r, "qwen", "dyn") })
	if got := r.Domains(); !slices.Equal(got, []string{"meta_llama-3_1", "qwen"}) {
		t.Fatalf("domains %v", got)
	}
	for _, name := range []string{"meta/llama-3.1", "llama"} {
		if err := wl.exact(r, name, "dyn"); err != nil {
			t.Fatalf("by the model's name %q: %v", name, err)
		}
	}
	// Each domain's table holds its own model alone.
	if resp, err := r.Match(api.Query{Locals: wl.chains[4], Model: "qwen"}); err != nil || resp.Best != nil {
		t.Fatalf("llama's chain in qwen: %+v %v", resp, err)
	}
	if _, err := r.Match(api.Query{Locals: wl.chains[4], Model: "mistral"}); !errors.Is(err, api.ErrUnknownDomain) {
		t.Fatalf("an unlisted model: %v", err)
	}

	steady := func() error {
		if err := wq.exact(r, "qwen", "dyn"); err != nil {
			return err
		}
		if ready, known := r.DomainReady("qwen"); !ready || !known {
			return fmt.Errorf("qwen ready %t known %t", ready, known)
		}
		return nil
	}
	// llama's pool leaves the catalog (as when its relay loses its lease):
	// its lane is withdrawn.
	llamaRelay, ok := m.Relay("src-llama")
	if !ok {
		t.Fatal("no pool src-llama")
	}
	p.srv.RemovePool("src-llama")
	eventually(t, "llama unready", func() error {
		if err := steady(); err != nil {
			t.Fatal(err)
		}
		if ready, known := r.DomainReady("meta/llama-3.1"); ready || !known {
			return fmt.Errorf("llama ready %t known %t", ready, known)
		}
		return nil
	})
	if _, err := r.Match(api.Query{Locals: wl.chains[1], Model: "llama"}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("llama answered with its pool withdrawn: %v", err)
	}
	if err := steady(); err != nil {
		t.Fatal(err)
	}
	if got := r.Domains(); !slices.Equal(got, []string{"meta_llama-3_1", "qwen"}) {
		t.Fatalf("domains %v after the withdrawal", got)
	}
	// It comes back into the domain it kept.
	p.srv.AddPool("src-llama", llamaRelay.Publication())
	eventually(t, "llama exact again", func() error { return wl.exact(r, "llama", "dyn") })
	if err := steady(); err != nil {
		t.Fatal(err)
	}
	for _, l := range r.Lanes() {
		if l.Source != follow.SourceKvRelay || l.DC != "dyn" {
			t.Fatalf("lane %+v", l)
		}
	}
}

// The registry's bounds and allow rule apply to the models' domains: a
// model refused is counted once (however often the catalog changes) and
// the domains already served keep answering.
func TestKvRelayModelsWithinTheRegistrysBounds(t *testing.T) {
	e := newEnv(t)
	p := e.kvProcess(t)
	p.pool(t, "src-llama", "meta/llama-3.1", 16)
	qwen, _ := p.pool(t, "src-qwen", "qwen", 32)
	k := kvModels(p.addr)
	k.All = true
	r := e.start(t, domains.Config{Base: baseConfig(t, 0), KvRelay: k, MaxDomains: 1,
		Allow: func(d string) bool { return d != "meta_llama-3_1" }})
	wq := newWorkload(2, 40, 7)
	wq.publish(t, qwen)
	eventually(t, "qwen exact", func() error { return wq.exact(r, "qwen", "dyn") })
	eventually(t, "llama not allowed", func() error {
		if n := promtest.Count(e.reg, domains.MetricRefused+`{kind="not_allowed"}`); n != 1 {
			return fmt.Errorf("%d not_allowed refusals", n)
		}
		return nil
	})
	// A third model passes the bound of one domain.
	p.pool(t, "src-mistral", "mistral", 16)
	eventually(t, "mistral over the bound", func() error {
		if n := promtest.Count(e.reg, domains.MetricRefused+`{kind="too_many"}`); n != 1 {
			return fmt.Errorf("%d too_many refusals", n)
		}
		return nil
	})
	// A fourth catalog revision judges no refused model again.
	p.srv.RemovePool("src-mistral")
	p.pool(t, "src-gemma", "gemma", 16)
	eventually(t, "gemma over the bound", func() error {
		if n := promtest.Count(e.reg, domains.MetricRefused+`{kind="too_many"}`); n != 2 {
			return fmt.Errorf("%d too_many refusals", n)
		}
		return nil
	})
	if n := promtest.Count(e.reg, domains.MetricRefused+`{kind="not_allowed"}`); n != 1 {
		t.Fatalf("%d not_allowed refusals", n)
	}
	if got := r.Domains(); !slices.Equal(got, []string{"qwen"}) {
		t.Fatalf("domains %v", got)
	}
	if err := wq.exact(r, "qwen", "dyn"); err != nil {
		t.Fatal(err)
	}
}

// A chosen set: the domain is named after the name given (an alias here),
// served from the start with a configured block size; models not listed
// are not followed.
func TestKvRelayModelsAChosenSet(t *testing.T) {
	e := newEnv(t)
	p := e.kvProcess(t)
	k := kvModels(p.addr)
	k.Models = []string{"llama"}
	k.KvRelay.BlockSize = 16
	r := e.start(t, domains.Config{Base: baseConfig(t, 0), KvRelay: k})
	eventually(t, "llama served before any catalog lists it", func() error {
		if ready, known := r.DomainReady("llama"); ready || !known {
			return fmt.Errorf("llama ready %t known %t", ready, known)
		}
		return nil
	})
	llama, _ := p.pool(t, "src-llama", "meta/llama-3.1", 16, "llama")
	p.pool(t, "src-qwen", "qwen", 32)
	wl := newWorkload(1, 40, 5)
	wl.publish(t, llama)
	eventually(t, "llama exact", func() error { return wl.exact(r, "llama", "dyn") })
	// The only domain is the default of a query naming none.
	if err := wl.exact(r, "", "dyn"); err != nil {
		t.Fatal(err)
	}
	if got := r.Domains(); !slices.Equal(got, []string{"llama"}) {
		t.Fatalf("domains %v", got)
	}
}

// Every source is a lane of every model's domain: a model two relays list
// is answered from both; a model one relay lists is answered from it,
// ready, while the other source's lane of that domain waits refused.
func TestKvRelayModelsFromSeveralSources(t *testing.T) {
	e := newEnv(t)
	west, east := e.kvProcess(t), e.kvProcess(t)
	llamaW, _ := west.pool(t, "w-llama", "llama", 16)
	qwenW, _ := west.pool(t, "w-qwen", "qwen", 32)
	llamaE, _ := east.pool(t, "e-llama", "llama", 16)
	k := kvModels(west.addr)
	k.KvRelay.Sources = []follow.KvRelaySource{{Name: "west", Addr: west.addr}, {Name: "east", Addr: east.addr}}
	k.All = true
	r := e.start(t, domains.Config{Base: baseConfig(t, 0), KvRelay: k})
	wl, wq := newWorkload(1, 40, 5), newWorkload(2, 40, 7)
	wl.publish(t, llamaW)
	wl.publish(t, llamaE)
	wq.publish(t, qwenW)
	eventually(t, "llama exact from west", func() error { return wl.exact(r, "llama", "west") })
	eventually(t, "llama exact from east", func() error { return wl.exact(r, "llama", "east") })
	eventually(t, "qwen exact from west", func() error { return wq.exact(r, "qwen", "west") })
	eventually(t, "qwen's east lane refused", func() error {
		var rows []string
		for _, l := range r.Lanes() {
			rows = append(rows, fmt.Sprintf("%s/%s/%d/%s", l.Domain, l.DC, l.Lane, l.State))
		}
		want := []string{"llama/east/14/active", "llama/west/15/active", "qwen/east/14/refused", "qwen/west/15/active"}
		slices.Sort(rows)
		if !slices.Equal(rows, want) {
			return fmt.Errorf("lanes %v, want %v", rows, want)
		}
		return nil
	})
	if ready, _ := r.DomainReady("qwen"); !ready {
		t.Fatal("qwen unready with its one source's lane active")
	}
}
