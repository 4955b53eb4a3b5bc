package pools_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/pools"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

const waitTotal = 30 * time.Second

func logger(t testing.TB) zerolog.Logger {
	if os.Getenv("CKF_TEST_LOG") != "" {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	return zerolog.Nop()
}

func TestParseFile(t *testing.T) {
	f, err := pools.ParseFile([]byte("max_pools: 4\nallow: [\"q*\"]\npools:\n  - domain: llama\n    expected_blocks: 4096\n    mode: verbatim\n  - domain: mistral\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f.MaxPools != 4 || len(f.Pools) != 2 || f.Pools[0].ExpectedBlocks != 4096 || !f.Allows("qwen") || f.Allows("gemma") {
		t.Fatalf("%+v", f)
	}
	for _, bad := range []string{
		"pools:\n  - domain: a.b\n",
		"pools:\n  - domain: a\n  - domain: a\n",
		"pools:\n  - domain: a\n    mode: fancy\n",
		"allow: [\"[\"]\n",
		"max_pools: 1\npools:\n  - domain: a\n  - domain: b\n",
		"pool:\n  - domain: a\n",
		"max_pools: -1\n",
	} {
		if _, err := pools.ParseFile([]byte(bad)); !errors.Is(err, pools.ErrFile) {
			t.Fatalf("%q: %v, want ErrFile", bad, err)
		}
	}
}

type env struct {
	srv *testenv.Server
	// ixReg is the registry of the last indexer started.
	ixReg *prometheus.Registry
}

// process is one relay process: a manager on its own connection; kill
// closes the connection under it (kill -9: no lease is released).
type process struct {
	m      *pools.Manager
	nc     *nats.Conn
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func (e *env) process(t testing.TB, instance string, f pools.File) *process {
	t.Helper()
	return e.processWith(t, instance, f, nil, nil)
}

// processWith is process with mut applied to the manager's config and
// before called on the manager before it runs.
func (e *env) processWith(t testing.TB, instance string, f pools.File, mut func(*pools.Config), before func(*pools.Manager)) *process {
	t.Helper()
	nc := e.srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c := relay.DefaultConfig("default", "dc-a")
	c.Instance = instance
	c.CKF = ckf.NewConfig(4096)
	c.PublishInterval = 2 * time.Millisecond
	c.HeartbeatInterval = 20 * time.Millisecond
	c.LeaseTTL = 2 * time.Second
	c.Streams = streams.Options{Memory: true}
	c.Logger = logger(t).With().Str("proc", instance).Logger()
	reg := prometheus.NewRegistry()
	pc := pools.Config{Base: c, File: f, Registerer: reg, Logger: c.Logger}
	if mut != nil {
		mut(&pc)
	}
	m, err := pools.New(nc, js, pc)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{m: m, nc: nc, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- m.Run(ctx) }()
	t.Cleanup(func() { p.kill(t) })
	return p
}

func (p *process) kill(t testing.TB) {
	t.Helper()
	if p.cancel == nil {
		return
	}
	p.nc.Close()
	p.cancel()
	select {
	case <-p.done:
	case <-time.After(waitTotal):
		t.Errorf("manager did not stop")
	}
	p.cancel = nil
}

func (p *process) state(domain string) relay.State {
	r, ok := p.m.Relay(domain)
	if !ok {
		return ""
	}
	return r.Status().State
}

// indexer runs a domains registry discovering every domain.
func (e *env) indexer(t testing.TB) *domains.Registry {
	t.Helper()
	nc := e.srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pc := consumer.DefaultPoolConfig()
	pc.MaxDirtyToAppliedAge = time.Minute
	e.ixReg = prometheus.NewRegistry()
	r, err := domains.New(nc, js, domains.Config{Discover: true, Logger: logger(t), Registerer: e.ixReg, Base: follow.Config{
		Pool: pc, Logger: logger(t), BootstrapBackoffMin: 10 * time.Millisecond, BootstrapBackoffMax: 100 * time.Millisecond,
		StatePollInterval: 20 * time.Millisecond, Streams: streams.Options{Memory: true},
		LeaseOptions: []lease.Option{lease.WithMemoryStorage()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// workload: chain i of a domain stored to depth i%mod on worker 1.
type workload struct {
	domain string
	chains [][]ckf.LocalBlockHash
	mod    int
	next   uint64
}

func newWorkload(domain string, seed uint64, n, mod int) *workload {
	w := &workload{domain: domain, mod: mod}
	for i := range n {
		c := make([]ckf.LocalBlockHash, 8)
		x := seed*1000 + uint64(i)
		for j := range c {
			x = x*0x9E3779B97F4A7C15 + 0xD1B54A32D192ED03
			c[j] = ckf.LocalBlockHash(x ^ (x >> 29) | 1)
		}
		w.chains = append(w.chains, c)
	}
	return w
}

func (w *workload) publish(t testing.TB, e *env) {
	t.Helper()
	nc := e.srv.Connect(t)
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subj, err := wire.WorkerEventsSubject(w.domain, "dc-a", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTotal)
	defer cancel()
	if _, err := streams.EnsureEvents(ctx, js, streams.Options{Memory: true}); err != nil {
		t.Fatal(err)
	}
	for i, c := range w.chains {
		if i%w.mod == 0 {
			continue
		}
		var blocks []string
		for _, h := range c[:i%w.mod] {
			blocks = append(blocks, fmt.Sprintf(`{"block_hash":%d,"tokens_hash":%d}`, uint64(h), uint64(h)))
		}
		w.next++
		msg := fmt.Sprintf(`{"worker_id":1,"event":{"event_id":%d,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[%s]}}}}`, w.next, strings.Join(blocks, ","))
		if _, err := js.Publish(ctx, subj, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
}

func (w *workload) exact(r *domains.Registry) error {
	for i, c := range w.chains {
		resp, err := r.Match(api.Query{Locals: c, Model: w.domain})
		if err != nil {
			return fmt.Errorf("%s chain %d: %w", w.domain, i, err)
		}
		if len(resp.Lanes) != 1 || int(resp.Lanes[0].Depth) != i%w.mod {
			return fmt.Errorf("%s chain %d: %+v, exact depth %d", w.domain, i, resp.Lanes, i%w.mod)
		}
	}
	return nil
}

func eventually(t testing.TB, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, waitTotal, 10*time.Millisecond, func() error {
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// A declared pool runs at once; an allowed domain's pool appears on its
// first event, an unallowed one is refused and counted; every pool
// answers exactly in the indexer; a removed pool leaves, the others go
// on; a declared pool removed comes back on its next event, with its
// declared sizing although no allow pattern matches it.
func TestPoolsAppearOnFirstEventAndLeave(t *testing.T) {
	e := &env{srv: testenv.StartServer(t)}
	ix := e.indexer(t)
	// llama's sizing differs from the process's (4096 blocks), so a pool
	// brought back with the process's sizing would publish another format,
	// which llama's table refuses.
	p := e.process(t, "relay-1", pools.File{Allow: []string{"q*"}, Pools: []pools.PoolSpec{{Domain: "llama", ExpectedBlocks: 1 << 14}}})
	wl, wq, wg := newWorkload("llama", 1, 30, 5), newWorkload("qwen", 2, 30, 7), newWorkload("gemma", 3, 10, 3)
	wl.publish(t, e)
	eventually(t, "llama exact", func() error { return wl.exact(ix) })
	if p.state("qwen") != "" {
		t.Fatal("qwen runs before any event")
	}
	wq.publish(t, e)
	wg.publish(t, e)
	eventually(t, "qwen appeared and exact", func() error { return wq.exact(ix) })
	eventually(t, "gemma refused", func() error {
		if promtest.Count(p.reg, pools.MetricRefused+`{kind="not_allowed"}`) == 0 {
			return errors.New("no refusal counted")
		}
		return nil
	})
	if p.state("gemma") != "" {
		t.Fatal("gemma runs: it matches no allow pattern")
	}
	if got := p.m.Domains(); len(got) != 2 {
		t.Fatalf("pools %v", got)
	}
	if promtest.Count(p.reg, `ckf_relay_lane_messages_total{domain="qwen"}`) == 0 && !strings.Contains(promtest.Text(p.reg), `domain="qwen"`) {
		t.Fatalf("no series labelled domain=qwen:\n%s", promtest.Text(p.reg))
	}
	if !p.m.Remove("qwen") {
		t.Fatal("qwen not removed")
	}
	if p.state("qwen") != "" {
		t.Fatal("qwen still listed")
	}
	wl2 := newWorkload("llama", 4, 20, 4)
	wl2.publish(t, e)
	eventually(t, "llama still follows its input", func() error { return wl2.exact(ix) })
	svc, _ := ix.Service("llama")
	table := svc.TableBytes()

	if !p.m.Remove("llama") {
		t.Fatal("llama not removed")
	}
	wl3 := newWorkload("llama", 5, 20, 6)
	wl3.publish(t, e)
	eventually(t, "llama back on its next event, exact", func() error { return wl3.exact(ix) })
	if p.state("llama") == "" {
		t.Fatal("llama not running after its next event")
	}
	if got := svc.TableBytes(); got != table {
		t.Fatalf("llama's table %d bytes after the pool came back, %d before", got, table)
	}
}

// Two processes, each active for some pools and standby for others; the
// one holding llama and qwen is killed (its connection closed under it),
// and the other takes over every pool while mistral, which it held all
// along, never stops answering.
func TestPerPoolTakeoverUnderKill(t *testing.T) {
	e := &env{srv: testenv.StartServer(t)}
	ix := e.indexer(t)
	a := e.process(t, "relay-a", pools.File{Pools: []pools.PoolSpec{{Domain: "llama"}, {Domain: "qwen"}}})
	eventually(t, "a active", func() error {
		if a.state("llama") != relay.StateActive || a.state("qwen") != relay.StateActive {
			return fmt.Errorf("llama %s qwen %s", a.state("llama"), a.state("qwen"))
		}
		return nil
	})
	b := e.process(t, "relay-b", pools.File{Pools: []pools.PoolSpec{{Domain: "llama"}, {Domain: "qwen"}, {Domain: "mistral"}}})
	wl, wq, wm := newWorkload("llama", 1, 30, 5), newWorkload("qwen", 2, 30, 7), newWorkload("mistral", 3, 30, 3)
	wl.publish(t, e)
	wq.publish(t, e)
	wm.publish(t, e)
	eventually(t, "b active for mistral only", func() error {
		if b.state("mistral") != relay.StateActive || b.state("llama") != relay.StateStandby || b.state("qwen") != relay.StateStandby {
			return fmt.Errorf("mistral %s llama %s qwen %s", b.state("mistral"), b.state("llama"), b.state("qwen"))
		}
		return nil
	})
	for _, w := range []*workload{wl, wq, wm} {
		eventually(t, w.domain+" exact", func() error { return w.exact(ix) })
	}
	a.kill(t)
	eventually(t, "b took over", func() error {
		for _, d := range []string{"llama", "qwen", "mistral"} {
			if b.state(d) != relay.StateActive {
				return fmt.Errorf("%s %s", d, b.state(d))
			}
		}
		return nil
	})
	if err := wm.exact(ix); err != nil {
		t.Fatalf("mistral during the takeover: %v", err)
	}
	wl2, wq2 := newWorkload("llama", 5, 20, 4), newWorkload("qwen", 6, 20, 6)
	wl2.publish(t, e)
	wq2.publish(t, e)
	for _, w := range []*workload{wl, wq, wl2, wq2, wm} {
		eventually(t, w.domain+" exact after the takeover", func() error { return w.exact(ix) })
	}
}

// A reload starts the pools the file now declares, stops the ones it
// neither declares nor allows (a standby whose file still has one takes it
// over), keeps a running pool's settings, starts discovery once patterns
// are allowed, and a refused file changes nothing.
func TestReloadAddsAndRemovesPools(t *testing.T) {
	e := &env{srv: testenv.StartServer(t)}
	ix := e.indexer(t)
	a := e.process(t, "relay-a", pools.File{Pools: []pools.PoolSpec{{Domain: "llama"}, {Domain: "qwen"}}})
	eventually(t, "a active", func() error {
		if a.state("llama") != relay.StateActive || a.state("qwen") != relay.StateActive {
			return fmt.Errorf("llama %s qwen %s", a.state("llama"), a.state("qwen"))
		}
		return nil
	})
	b := e.process(t, "relay-b", pools.File{Pools: []pools.PoolSpec{{Domain: "qwen"}}})
	wl, wq := newWorkload("llama", 1, 30, 5), newWorkload("qwen", 2, 30, 7)
	wl.publish(t, e)
	wq.publish(t, e)
	for _, w := range []*workload{wl, wq} {
		eventually(t, w.domain+" exact", func() error { return w.exact(ix) })
	}
	if b.state("qwen") != relay.StateStandby {
		t.Fatalf("b's qwen %s, want standby", b.state("qwen"))
	}

	res, err := a.m.Reload(pools.File{Pools: []pools.PoolSpec{{Domain: "llama", ExpectedBlocks: 1 << 14}, {Domain: "mistral"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Added, []string{"mistral"}) || !slices.Equal(res.Removed, []string{"qwen"}) ||
		!slices.Equal(res.Unchanged, []string{"llama"}) || len(res.Refused) != 0 {
		t.Fatalf("reload: %+v", res)
	}
	if a.state("qwen") != "" {
		t.Fatal("qwen still runs in a")
	}
	eventually(t, "b took qwen over", func() error {
		if b.state("qwen") != relay.StateActive {
			return fmt.Errorf("b's qwen %s", b.state("qwen"))
		}
		return nil
	})
	wm, wl2, wq2 := newWorkload("mistral", 3, 30, 3), newWorkload("llama", 4, 20, 4), newWorkload("qwen", 5, 20, 6)
	wm.publish(t, e)
	wl2.publish(t, e)
	wq2.publish(t, e)
	// llama goes on with the format it ran with: its lane is not refused.
	for _, w := range []*workload{wm, wl, wl2, wq, wq2} {
		eventually(t, w.domain+" exact after the reload", func() error { return w.exact(ix) })
	}

	// A refused file changes nothing; patterns allowed later start discovery.
	if _, err := a.m.ReloadFile(func() (pools.File, error) { return pools.ParseFile([]byte("pools:\n  - domain: a.b\n")) }); !errors.Is(err, pools.ErrFile) {
		t.Fatalf("a bad file: %v, want ErrFile", err)
	}
	if got := a.m.Domains(); !slices.Equal(got, []string{"llama", "mistral"}) {
		t.Fatalf("pools after a refused file: %v", got)
	}
	if n := promtest.Count(a.reg, pools.MetricReloads+`{outcome="invalid_file"}`); n != 1 {
		t.Fatalf("%v invalid_file reloads counted, want 1", n)
	}
	if _, err := a.m.ReloadFile(func() (pools.File, error) {
		return pools.File{Allow: []string{"g*"}, Pools: []pools.PoolSpec{{Domain: "llama"}, {Domain: "mistral"}}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	wg := newWorkload("gemma", 6, 20, 5)
	wg.publish(t, e)
	eventually(t, "gemma discovered after the reload", func() error { return wg.exact(ix) })
	if n := promtest.Count(a.reg, pools.MetricReloads+`{outcome="ok"}`); n != 2 {
		t.Fatalf("%v ok reloads counted, want 2", n)
	}
}

// A pool a reload removes retires its lane on purpose: the indexer drops
// it from /v1/lanes and from answers within two heartbeat intervals and
// counts it, the other pool goes on, and the pool comes back cleanly when
// the file declares it again. A killed relay's lanes are not retired: they
// stay listed, as a crash's do.
func TestReloadRetiresTheRemovedPoolsLane(t *testing.T) {
	const heartbeat = time.Second
	e := &env{srv: testenv.StartServer(t)}
	ix := e.indexer(t)
	a := e.processWith(t, "relay-a", pools.File{Pools: []pools.PoolSpec{{Domain: "llama"}, {Domain: "qwen"}}},
		func(c *pools.Config) { c.Base.HeartbeatInterval = heartbeat }, nil)
	wl, wq := newWorkload("llama", 1, 30, 5), newWorkload("qwen", 2, 30, 7)
	wl.publish(t, e)
	wq.publish(t, e)
	for _, w := range []*workload{wl, wq} {
		eventually(t, w.domain+" exact", func() error { return w.exact(ix) })
	}
	listed := func(domain string) bool {
		for _, l := range ix.Lanes() {
			if l.Domain == domain {
				return true
			}
		}
		return false
	}
	res, err := a.m.Reload(pools.File{Pools: []pools.PoolSpec{{Domain: "llama"}}})
	if err != nil || !slices.Equal(res.Removed, []string{"qwen"}) {
		t.Fatalf("reload: %+v, %v", res, err)
	}
	gone := time.Now()
	for listed("qwen") {
		if time.Since(gone) > 2*heartbeat {
			t.Fatalf("qwen's lane still listed %s after its pool was removed: %+v", time.Since(gone), ix.Lanes())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := promtest.Count(e.ixReg, follow.MetricLanesRetired+`{domain="qwen"}`); n != 1 {
		t.Fatalf("%v lanes counted retired, want 1", n)
	}
	if _, err := ix.Match(api.Query{Locals: wq.chains[1], Model: "qwen"}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("qwen answered after its lane retired: %v", err)
	}
	if err := wl.exact(ix); err != nil {
		t.Fatalf("llama after qwen retired: %v", err)
	}

	// Back: the same lane, live again, fed from the relay's new epoch.
	if res, err := a.m.Reload(pools.File{Pools: []pools.PoolSpec{{Domain: "llama"}, {Domain: "qwen"}}}); err != nil ||
		!slices.Equal(res.Added, []string{"qwen"}) {
		t.Fatalf("reload: %+v, %v", res, err)
	}
	wq2 := newWorkload("qwen", 3, 20, 6)
	wq2.publish(t, e)
	for _, w := range []*workload{wq, wq2} {
		eventually(t, w.domain+" exact after it came back", func() error { return w.exact(ix) })
	}
	eventually(t, "qwen listed active once", func() error {
		var states []string
		for _, l := range ix.Lanes() {
			if l.Domain == "qwen" {
				states = append(states, l.State)
			}
		}
		if !slices.Equal(states, []string{follow.PhaseActive}) {
			return fmt.Errorf("qwen lanes %v", states)
		}
		return nil
	})

	// A crash is not a retirement: the lanes stay in the map, live.
	a.kill(t)
	nc := e.srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTotal)
	defer cancel()
	coord, err := lease.New(ctx, js, lease.WithMemoryStorage())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"llama", "qwen"} {
		m, err := coord.LaneMap(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		if lane, ok := m.LaneOf("dc-a"); !ok || m.Lanes[lane].Retired() {
			t.Fatalf("%s after a kill: %+v", d, m.Lanes)
		}
		if !listed(d) {
			t.Fatalf("%s's lane left /v1/lanes after a kill", d)
		}
	}
}

// The compose stacks' pools file parses, and the indexers and the replayer
// of docker-compose.yml serve exactly its models.
func TestDeployPoolsFileMatchesCompose(t *testing.T) {
	f, err := pools.ReadFile("../../deploy/pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var models []string
	for _, p := range f.Pools {
		models = append(models, p.Domain)
	}
	if len(models) < 2 {
		t.Fatalf("deploy/pools.yaml declares %v: the stacks run two models or more", models)
	}
	compose, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	want := "CKFRELAY_DOMAIN: " + strings.Join(models, ",")
	n := 0
	for _, line := range strings.Split(string(compose), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "CKFRELAY_DOMAIN:"); ok {
			n++
			if strings.TrimSpace(line) != want {
				t.Errorf("docker-compose.yml has %q, want %q (the models of deploy/pools.yaml)", "CKFRELAY_DOMAIN:"+v, want)
			}
		}
	}
	if n == 0 {
		t.Fatal("docker-compose.yml sets no CKFRELAY_DOMAIN")
	}
}
