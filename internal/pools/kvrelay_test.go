package pools_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/internal/pools"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server/servertest"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// kvDefaults are the process's --kvrelay-* defaults in these tests.
var kvDefaults = server.PoolText{Endpoint: "prod/backend/generate", BlockSize: 16}

func TestPoolKvRelaySpec(t *testing.T) {
	f, err := pools.ParseFile([]byte("pools:\n  - domain: llama\n    kvrelay:\n      model: meta/llama-chat\n      source_path: meta/llama\n" +
		"      aliases: [chat]\n      endpoint: prod/llama/generate\n      block_size: 64\n      roles: [prefill, decode]\n  - domain: qwen\n"))
	if err != nil {
		t.Fatal(err)
	}
	llama, err := f.Pools[0].KvRelaySpec(kvDefaults)
	if err != nil {
		t.Fatal(err)
	}
	if llama.Model != "meta/llama-chat" || llama.SourcePath != "meta/llama" || !slices.Equal(llama.Aliases, []string{"chat"}) ||
		llama.Component != "llama" || llama.BlockSize != 64 ||
		!slices.Equal(llama.Roles, []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_PREFILL, kvrelayv1.WorkerRole_WORKER_ROLE_DECODE}) {
		t.Fatalf("llama %+v", llama)
	}
	// No block: the domain is the model, the rest the defaults.
	qwen, err := f.Pools[1].KvRelaySpec(kvDefaults)
	if err != nil {
		t.Fatal(err)
	}
	if qwen.Model != "qwen" || qwen.SourcePath != "" || qwen.Namespace != "prod" || qwen.Component != "backend" || qwen.BlockSize != 16 ||
		!slices.Equal(qwen.Roles, []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_AGGREGATED}) {
		t.Fatalf("qwen %+v", qwen)
	}
	for _, c := range []struct {
		block    pools.KvRelayBlock
		defaults server.PoolText
		field    string
	}{
		{pools.KvRelayBlock{}, server.PoolText{BlockSize: 16}, "endpoint"},
		{pools.KvRelayBlock{Endpoint: "a/b"}, kvDefaults, "endpoint"},
		{pools.KvRelayBlock{}, server.PoolText{Endpoint: "a/b/c"}, "block_size"},
		{pools.KvRelayBlock{BlockSize: 1<<31 + 1}, kvDefaults, "block_size"},
		{pools.KvRelayBlock{Roles: []string{"router"}}, kvDefaults, "roles"},
		{pools.KvRelayBlock{Roles: []string{"legacy", "decode"}}, kvDefaults, "roles"},
		{pools.KvRelayBlock{Endpoint: "a/ b/c"}, kvDefaults, "descriptor"},
	} {
		_, err := pools.PoolSpec{Domain: "x", KvRelay: &c.block}.KvRelaySpec(c.defaults)
		var te *server.PoolTextError
		if !errors.As(err, &te) || te.Field != c.field {
			t.Fatalf("%+v over %+v: %v, want a %s error", c.block, c.defaults, err, c.field)
		}
	}
	if _, err := pools.ParseFile([]byte("pools:\n  - domain: a\n    kvrelay:\n      modle: x\n")); !errors.Is(err, pools.ErrFile) {
		t.Fatalf("unknown kvrelay key: %v", err)
	}
}

// laneMirror is a client.LaneSink that keeps the followed pool's lane.
type laneMirror struct {
	mu    sync.Mutex
	ready bool
	words []uint64
	key   kvrelay.ProducerKey
}

func (m *laneMirror) Admit(client.Selection) error { return nil }

func (m *laneMirror) Install(s client.Snapshot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.words, m.key, m.ready = s.Words, s.Selection.Key, true
	return nil
}

func (m *laneMirror) Apply(d client.Delta) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return d.Images.ApplyTo(m.words)
}

func (m *laneMirror) Heartbeat(uint64) error { return nil }

func (m *laneMirror) Invalidate(client.Reason, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ready = false
}

// holds checks that the mirrored lane holds every block w stored: each
// stored prefix's sequence hashes, addressed as the lane's format does.
func (m *laneMirror) holds(w *workload) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.ready {
		return errors.New("no lane installed")
	}
	f := m.key.Format()
	a, err := ckf.NewAddressing(f.BucketCount(), f.Seed())
	if err != nil {
		return err
	}
	for i, c := range w.chains {
		for j, h := range ckf.SequenceHashes(nil, c[:i%w.mod]) {
			p := a.Prepare(uint64(h))
			if !ckf.Contains(m.words[p.BucketA], p.Fingerprint) && !ckf.Contains(m.words[p.BucketB], p.Fingerprint) {
				return fmt.Errorf("%s chain %d block %d is not in the followed lane", w.domain, i, j)
			}
		}
	}
	return nil
}

// followModel runs the project's follower of model against addr until the
// test ends.
func followModel(t *testing.T, addr, model string) *laneMirror {
	t.Helper()
	m := &laneMirror{}
	f, err := client.New(client.Config{Name: "relay-" + model, Addr: addr, Model: model, Sink: m,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Logger: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("follower %s: %v", model, err)
		}
	})
	return m
}

// kvProcess is a relay process whose pools are served over
// dynamo.kvrelay.v1 by one server, as relay-producer wires them.
func (e *env) kvProcess(t *testing.T, instance string, f pools.File) (*process, *server.Server, string) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.PoolHeartbeat, cfg.CatalogHeartbeat, cfg.ReadinessHeartbeat = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	cfg.Logger = logger(t)
	srv, addr := servertest.Serve(t, nil, cfg)
	defaults := kvDefaults
	p := e.processWith(t, instance, f, func(c *pools.Config) { c.KvRelay = &defaults }, func(m *pools.Manager) {
		m.OnPool(func(domain string, r *relay.Relay) { srv.AddPool(domain, r.Publication()) }, func(domain string) { srv.RemovePool(domain) })
	})
	return p, srv, addr
}

// catalogModels reads addr's current catalog: its pools' canonical models,
// sorted.
func catalogModels(addr string) ([]string, error) {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cs, err := kvrelayv1.NewKvEventRelayClient(conn).WatchKvPoolCatalog(ctx, &kvrelayv1.WatchKvPoolCatalogRequest{SubscriberId: "probe",
		ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		return nil, err
	}
	u, err := cs.Recv()
	if err != nil {
		return nil, err
	}
	if _, err := kvrelay.ValidateCatalogUpdate(u); err != nil {
		return nil, err
	}
	var models []string
	for _, d := range u.Snapshot.GetPools() {
		models = append(models, d.Registrations[0].CanonicalModelId)
	}
	slices.Sort(models)
	return models, nil
}

// wantCatalog waits until addr's catalog lists exactly models.
func wantCatalog(t *testing.T, addr string, models ...string) {
	t.Helper()
	eventually(t, "catalog "+strings.Join(models, ","), func() error {
		got, err := catalogModels(addr)
		if err != nil {
			return err
		}
		if !slices.Equal(got, models) {
			return fmt.Errorf("catalog lists %v", got)
		}
		return nil
	})
}

// One kvrelay server serves every pool of a pools manager: the declared
// pools (one with a kvrelay block, one on the defaults) and a discovered
// one are each followed by the project's follower, which mirrors its
// pool's blocks and no other's.
func TestKvRelayServesEveryPoolOfTheProcess(t *testing.T) {
	e := &env{srv: testenv.StartServer(t)}
	f := pools.File{Allow: []string{"g*"}, Pools: []pools.PoolSpec{
		{Domain: "llama", KvRelay: &pools.KvRelayBlock{Model: "meta/llama-chat", SourcePath: "meta/llama", Endpoint: "prod/llama/generate"}},
		{Domain: "qwen"},
	}}
	_, _, addr := e.kvProcess(t, "relay-1", f)
	wantCatalog(t, addr, "meta/llama-chat", "qwen")
	ml, mq := followModel(t, addr, "meta/llama-chat"), followModel(t, addr, "qwen")
	wl, wq := newWorkload("llama", 1, 30, 5), newWorkload("qwen", 2, 30, 7)
	wl.publish(t, e)
	wq.publish(t, e)
	eventually(t, "llama followed", func() error { return ml.holds(wl) })
	eventually(t, "qwen followed", func() error { return mq.holds(wq) })
	if err := mq.holds(wl); err == nil {
		t.Fatal("qwen's lane holds llama's blocks: the follower must see its own pool only")
	}

	// A discovered pool joins the catalog on its first event.
	wg := newWorkload("gemma", 3, 20, 4)
	wg.publish(t, e)
	wantCatalog(t, addr, "gemma", "meta/llama-chat", "qwen")
	mg := followModel(t, addr, "gemma")
	eventually(t, "gemma followed", func() error { return mg.holds(wg) })
}

// Per-pool takeover over kvrelay: a process lists in its catalog only the
// pools it holds the lease of; when the other process dies, the pools it
// takes over appear in its catalog and their followers see their blocks;
// a removed pool leaves the catalog while the others go on.
func TestKvRelayCatalogFollowsPerPoolTakeover(t *testing.T) {
	e := &env{srv: testenv.StartServer(t)}
	a, _, addrA := e.kvProcess(t, "relay-a", pools.File{Pools: []pools.PoolSpec{{Domain: "llama"}}})
	eventually(t, "a active", func() error {
		if st := a.state("llama"); st != relay.StateActive {
			return fmt.Errorf("llama %s", st)
		}
		return nil
	})
	wantCatalog(t, addrA, "llama")
	b, srvB, addrB := e.kvProcess(t, "relay-b", pools.File{Pools: []pools.PoolSpec{{Domain: "llama"}, {Domain: "qwen"}}})
	eventually(t, "b: qwen active, llama standby", func() error {
		if b.state("qwen") != relay.StateActive || b.state("llama") != relay.StateStandby {
			return fmt.Errorf("qwen %s llama %s", b.state("qwen"), b.state("llama"))
		}
		return nil
	})
	if got := srvB.Pools(); !slices.Equal(got, []string{"llama", "qwen"}) {
		t.Fatalf("b serves %v, want both pools (llama absent from its catalog while standby)", got)
	}
	wantCatalog(t, addrB, "qwen")
	ml := followModel(t, addrB, "llama")
	a.kill(t)
	wantCatalog(t, addrB, "llama", "qwen")
	wl := newWorkload("llama", 5, 20, 4)
	wl.publish(t, e)
	eventually(t, "llama followed on b after the takeover", func() error { return ml.holds(wl) })
	if !b.m.Remove("qwen") {
		t.Fatal("qwen not removed")
	}
	wantCatalog(t, addrB, "llama")
	wl2 := newWorkload("llama", 6, 20, 3)
	wl2.publish(t, e)
	eventually(t, "llama still followed after qwen left", func() error { return ml.holds(wl2) })
}
