package follow

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// setClock is the real clock until set, then frozen where set.
type setClock struct{ ns atomic.Int64 }

func (c *setClock) now() time.Time {
	if v := c.ns.Load(); v != 0 {
		return time.Unix(0, v)
	}
	return time.Now()
}

func (c *setClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// prefillWindow is a window saying the DC has queued tokens to prefill.
func prefillWindow(r *fakeRelay, seq, tokens uint64) wire.PoolLoad {
	return r.window(seq, func(p *wire.PoolLoad) {
		p.Flags |= wire.LoadPrefill
		p.Serving.ActivePrefillTokens = tokens
		p.ServingWorkers = 1
	})
}

// inflightEnv is two DCs' relays, installed on every service given, each
// having sent one window with an empty queue.
type inflightEnv struct {
	e    *env
	a, b *fakeRelay
}

func newInflightEnv(t *testing.T) *inflightEnv {
	e := newEnv(t)
	return &inflightEnv{e: e, a: e.relay(t, "dc-a"), b: e.relay(t, "dc-b")}
}

func (ie *inflightEnv) start(t *testing.T, cfg Config, clock *setClock) *runningService {
	cfg.LaneStaleAfter = time.Hour // the fake relays send no heartbeats
	s := startService(t, ie.e.nc, ie.e.js, cfg, func(s *Service) { s.now = clock.now })
	for _, r := range []*fakeRelay{ie.a, ie.b} {
		waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	}
	return s
}

func (ie *inflightEnv) windows(t *testing.T, seq uint64, services ...*runningService) {
	for _, r := range []*fakeRelay{ie.a, ie.b} {
		r.sendWindow(ie.e, prefillWindow(r, seq, 0))
	}
	for _, s := range services {
		testenv.WaitFor(t, waitTotal, "both windows", func() bool {
			return loadWindowCount(s.Service, ie.a.lane, "accepted") == seq && loadWindowCount(s.Service, ie.b.lane, "accepted") == seq
		})
	}
}

const demoTokens = 32768

// demoRoutes routes n distinct prompts of 32,768 tokens that no DC holds,
// with the demo's RTTs, and counts the DCs chosen.
func demoRoutes(t *testing.T, s *Service, seed uint64, n int, probe bool) map[string]int {
	t.Helper()
	got := map[string]int{}
	for i := range n {
		q := api.Query{Locals: chain(seed*100000+uint64(i), demoTokens/DefaultRouteBlockSize)}
		resp, err := s.Route(q, api.RouteOptions{InputTokens: demoTokens, RTTMs: map[string]float64{"dc-a": 5, "dc-b": 1000}, Probe: probe})
		if err != nil {
			t.Fatal(err)
		}
		got[resp.Chosen().DC]++
	}
	return got
}

// The demo: 100 distinct prompts of 32,768 tokens that no DC holds, dc-a 5
// ms away and dc-b 1 s away, routed with no load window in between. Without
// the in-flight account every one goes to dc-a (its last window says it is
// idle); with it, dc-b takes at least a fifth, as dc-a's queue of routed
// prompts grows past dc-b's extra second.
func TestInflightSpreadsABurstOverDCs(t *testing.T) {
	ie := newInflightEnv(t)
	clock := &setClock{}
	on := ie.start(t, testConfig(t), clock)
	offCfg := testConfig(t)
	offCfg.Route.Inflight.Off = true
	off := ie.start(t, offCfg, clock)
	ie.windows(t, 1, on, off)
	clock.set(time.Now()) // frozen: no window, no expiry during the burst

	if got := demoRoutes(t, off.Service, 1, 100, false); got["dc-a"] != 100 {
		t.Fatalf("without the account: %v, want all 100 on dc-a", got)
	}
	got := demoRoutes(t, on.Service, 2, 100, false)
	if got["dc-b"] < 20 || got["dc-a"]+got["dc-b"] != 100 {
		t.Fatalf("with the account: %v, want dc-b ≥ 20", got)
	}
	t.Logf("100 routes: %v", got)
	// Every route was accounted: the pending tokens add up to 100 prompts.
	var pending uint64
	for _, r := range []*fakeRelay{ie.a, ie.b} {
		pending += on.ledger.Pending(r.lane, clock.now())
	}
	if pending != 100*demoTokens {
		t.Fatalf("pending %d tokens, want %d", pending, 100*demoTokens)
	}
	if n := promtest.Count(on.reg, MetricInflightEvents+`{outcome="added"}`); n != 100 {
		t.Fatalf("added %d", n)
	}
	if n := promtest.Count(on.reg, fmt.Sprintf(`%s{lane="%d",dc="dc-b"}`, MetricInflightPending, ie.b.lane)); n != uint64(got["dc-b"])*demoTokens {
		t.Fatalf("dc-b's pending gauge %d", n)
	}
}

// A route counts its tokens until a window observed after the request can
// have arrived (route time + RTT) covers it; a probe counts nothing; the
// route's answer shows the load it used, window plus in flight.
func TestInflightIsCoveredByTheNextWindowAndProbesCountNothing(t *testing.T) {
	ie := newInflightEnv(t)
	clock := &setClock{}
	s := ie.start(t, testConfig(t), clock)
	ie.windows(t, 1, s)
	t0 := time.Now()
	clock.set(t0)
	// 62 blocks of 16 tokens: input_tokens may not be fewer than they hold.
	q := api.Query{Locals: chain(7, 62)}
	opts := api.RouteOptions{InputTokens: 1000, RTTMs: map[string]float64{"dc-a": 5, "dc-b": 1000}}

	probe := opts
	probe.Probe = true
	for range 3 {
		if _, err := s.Route(q, probe); err != nil {
			t.Fatal(err)
		}
	}
	if p := s.ledger.Pending(ie.a.lane, t0); p != 0 {
		t.Fatalf("probes accounted %d tokens", p)
	}
	resp, err := s.Route(q, opts)
	if err != nil || resp.Chosen().DC != "dc-a" {
		t.Fatalf("%+v %v", resp, err)
	}
	resp, err = s.Route(q, probe)
	if err != nil {
		t.Fatal(err)
	}
	if l := laneOf(t, resp, "dc-a").Load; !l.HasPrefill || l.ActivePrefillTokens != 1000 {
		t.Fatalf("dc-a's load after one route: %+v, want the window's 0 + 1000 in flight", l)
	}
	// A window received 4 ms after the route (before the request can have
	// arrived) leaves the account; one received at 5 ms covers it.
	clock.set(t0.Add(4 * time.Millisecond))
	ie.a.sendWindow(ie.e, prefillWindow(ie.a, 2, 0))
	testenv.WaitFor(t, waitTotal, "window 2", func() bool { return loadWindowCount(s.Service, ie.a.lane, "accepted") == 2 })
	if p := s.ledger.Pending(ie.a.lane, clock.now()); p != 1000 {
		t.Fatalf("a window before the request arrived covered it: pending %d", p)
	}
	clock.set(t0.Add(5 * time.Millisecond))
	ie.a.sendWindow(ie.e, prefillWindow(ie.a, 3, 0))
	testenv.WaitFor(t, waitTotal, "window 3", func() bool { return loadWindowCount(s.Service, ie.a.lane, "accepted") == 3 })
	if p := s.ledger.Pending(ie.a.lane, clock.now()); p != 0 {
		t.Fatalf("pending %d after a covering window", p)
	}
	// A window whose serving reports were read 1 s before it was built is
	// observed 1 s before it is received: it covers only what was due then.
	s.Route(q, opts) //nolint:errcheck // checked by the pending count
	clock.set(t0.Add(500 * time.Millisecond))
	ie.a.sendWindow(ie.e, ie.a.window(4, func(p *wire.PoolLoad) {
		p.Flags |= wire.LoadPrefill
		p.ServingTime = p.Time.Add(-time.Second)
	}))
	testenv.WaitFor(t, waitTotal, "window 4", func() bool { return loadWindowCount(s.Service, ie.a.lane, "accepted") == 4 })
	if p := s.ledger.Pending(ie.a.lane, clock.now()); p != 1000 {
		t.Fatalf("a window read before the route covered it: pending %d", p)
	}
	// Past the load age an uncovered entry expires (counted).
	clock.set(t0.Add(DefaultLoadMaxAge + time.Second))
	if p := s.ledger.Pending(ie.a.lane, clock.now()); p != 0 {
		t.Fatalf("pending %d past the load age", p)
	}
	if n := promtest.Count(s.reg, MetricInflightEvents+`{outcome="expired"}`); n != 1 {
		t.Fatalf("expired %d", n)
	}
}

// Two indexer replicas share their accounts: routes on A raise the load B
// sees (and B's routes move off the DC A loaded), A ignores its own
// accounts, and accounts that do not decode or name no DC are counted and
// dropped.
func TestInflightAccountsAreSharedBetweenReplicas(t *testing.T) {
	ie := newInflightEnv(t)
	clock := &setClock{}
	a := ie.start(t, testConfig(t), clock)
	b := ie.start(t, testConfig(t), clock)
	ie.windows(t, 1, a, b)
	clock.set(time.Now())
	q := api.Query{Locals: chain(9, 64)}
	opts := api.RouteOptions{InputTokens: demoTokens, RTTMs: map[string]float64{"dc-a": 5, "dc-b": 1000}}
	probe := opts
	probe.Probe = true

	before, err := b.Route(q, probe)
	if err != nil || before.Chosen().DC != "dc-a" {
		t.Fatalf("%+v %v", before, err)
	}
	resp, err := a.Route(q, opts)
	if err != nil || resp.Chosen().DC != "dc-a" {
		t.Fatalf("%+v %v", resp, err)
	}
	testenv.WaitFor(t, waitTotal, "B applies A's account", func() bool {
		return b.ledger.Pending(ie.a.lane, clock.now()) == demoTokens
	})
	after, err := b.Route(q, probe)
	if err != nil {
		t.Fatal(err)
	}
	if l := laneOf(t, after, "dc-a"); l.Load.ActivePrefillTokens != demoTokens || l.Terms.QueueMs <= laneOf(t, before, "dc-a").Terms.QueueMs {
		t.Fatalf("B's view of dc-a after A's route: %+v", l)
	}
	if after.Chosen().DC != "dc-b" {
		t.Fatalf("B still picks dc-a after A filled it: %+v", after.Ranked)
	}
	testenv.WaitFor(t, waitTotal, "A sees its own account come back", func() bool {
		return promtest.Count(a.reg, MetricInflightAccounts+`{direction="received",outcome="own"}`) == 1
	})
	if p := a.ledger.Pending(ie.a.lane, clock.now()); p != demoTokens {
		t.Fatalf("A counted its own account twice: %d", p)
	}

	// Hostile or foreign accounts.
	subj, _ := wire.RouteAccountSubject(testDomain, "dc-a")
	nowhere, _ := wire.RouteAccountSubject(testDomain, "dc-nowhere")
	good, _ := wire.AppendRouteAccount(nil, &wire.RouteAccount{Origin: 1, Tokens: 5})
	for _, m := range []struct {
		subj string
		data []byte
	}{{subj, []byte{0x95, 1, 7, 0, 0, 0}}, {subj, []byte("{}")}, {nowhere, good}} {
		if err := ie.e.nc.Publish(m.subj, m.data); err != nil {
			t.Fatal(err)
		}
	}
	for outcome, n := range map[string]uint64{"malformed": 2, "unknown_dc": 1} {
		testenv.WaitFor(t, waitTotal, outcome, func() bool {
			return promtest.Count(b.reg, MetricInflightAccounts+`{direction="received",outcome="`+outcome+`"}`) == n
		})
	}
	if p := b.ledger.Pending(ie.a.lane, clock.now()); p != demoTokens {
		t.Fatalf("a refused account changed the account: %d", p)
	}
	if n := promtest.Count(a.reg, MetricInflightAccounts+`{direction="published",outcome="ok"}`); n != 1 {
		t.Fatalf("A published %d accounts", n)
	}
}

func TestInflightConfigIsValidated(t *testing.T) {
	cfg := testConfig(t)
	cfg.Route.Inflight.MaxEntries = -1
	if err := cfg.Validate(); err == nil {
		t.Fatal("negative max entries accepted")
	}
}

// A window whose prefill is estimated from request counts cannot show a
// prompt its DC is prefilling: the entries it covers stay in the account,
// draining from their due instant at the DC's prefill rate ÷ the slowdown.
func TestInflightStaysWhilePrefillingWhenTheWindowEstimates(t *testing.T) {
	ie := newInflightEnv(t)
	clock := &setClock{}
	cfg := testConfig(t)
	cfg.Route.PrefillRate = map[string]float64{"dc-a": 2000, "dc-b": 2000}
	cfg.Route.Inflight.PrefillSlowdown = 2 // 1 token/ms
	s := ie.start(t, cfg, clock)
	ie.windows(t, 1, s)
	t0 := time.Now()
	clock.set(t0)
	q := api.Query{Locals: chain(9, 62)}
	opts := api.RouteOptions{InputTokens: 1000, RTTMs: map[string]float64{"dc-a": 5, "dc-b": 1000}}
	if resp, err := s.Route(q, opts); err != nil || resp.Chosen().DC != "dc-a" {
		t.Fatalf("%+v %v", resp, err)
	}
	estimated := func(seq uint64) wire.PoolLoad {
		w := prefillWindow(ie.a, seq, 0)
		w.Flags |= wire.LoadPrefillEstimated
		return w
	}
	clock.set(t0.Add(10 * time.Millisecond))
	ie.a.sendWindow(ie.e, estimated(2))
	testenv.WaitFor(t, waitTotal, "window 2", func() bool { return loadWindowCount(s.Service, ie.a.lane, "accepted") == 2 })
	// Due at 5 ms, so 5 tokens have drained at 10 ms.
	if p := s.ledger.Pending(ie.a.lane, clock.now()); p != 995 {
		t.Fatalf("pending %d after the estimating window, want 995", p)
	}
	if n := promtest.Count(s.reg, MetricInflightEntries+`{state="prefilling"}`); n != 1 {
		t.Fatalf("prefilling entries %d, want 1", n)
	}
	probe := opts
	probe.Probe = true
	resp, err := s.Route(q, probe)
	if err != nil {
		t.Fatal(err)
	}
	if l := laneOf(t, resp, "dc-a").Load; !l.HasPrefill || l.ActivePrefillTokens != 995 {
		t.Fatalf("dc-a's load %+v, want the estimated window's 0 + 995 prefilling", l)
	}
	clock.set(t0.Add(505 * time.Millisecond))
	if p := s.ledger.Pending(ie.a.lane, clock.now()); p != 500 {
		t.Fatalf("pending %d at 505 ms, want 500", p)
	}
	clock.set(t0.Add(1005 * time.Millisecond))
	if p := s.ledger.Pending(ie.a.lane, clock.now()); p != 0 {
		t.Fatalf("pending %d once drained", p)
	}
	if n := promtest.Count(s.reg, MetricInflightEvents+`{outcome="drained"}`); n != 1 {
		t.Fatalf("drained %d", n)
	}
	// An exact window covers at once, as before.
	s.Route(q, opts) //nolint:errcheck // checked by the pending count
	clock.set(t0.Add(1100 * time.Millisecond))
	ie.a.sendWindow(ie.e, prefillWindow(ie.a, 3, 0))
	testenv.WaitFor(t, waitTotal, "window 3", func() bool { return loadWindowCount(s.Service, ie.a.lane, "accepted") == 3 })
	if p := s.ledger.Pending(ie.a.lane, clock.now()); p != 0 {
		t.Fatalf("pending %d after an exact window", p)
	}
}

func TestInflightPrefillSlowdownIsValidated(t *testing.T) {
	for _, v := range []float64{0.5, -1, MaxInflightPrefillSlowdown + 1, math.NaN(), math.Inf(1)} {
		cfg := testConfig(t)
		cfg.Route.Inflight.PrefillSlowdown = v
		if err := cfg.Validate(); err == nil {
			t.Errorf("prefill slowdown %v accepted", v)
		}
	}
	for _, v := range []float64{0, 1, 2.5, MaxInflightPrefillSlowdown} {
		cfg := testConfig(t)
		cfg.Route.Inflight.PrefillSlowdown = v
		if err := cfg.Validate(); err != nil {
			t.Errorf("prefill slowdown %v: %v", v, err)
		}
	}
	rc := RouteConfig{PrefillRate: map[string]float64{"dc-a": 3000}, Inflight: InflightConfig{PrefillSlowdown: 3}}
	if r := rc.InflightDrainRate("dc-a"); r != 1000 {
		t.Errorf("drain rate %v, want 1000", r)
	}
	if r := rc.InflightDrainRate("dc-x"); r != 10000.0/3 {
		t.Errorf("drain rate of an unlisted DC %v, want the default rate ÷ 3", r)
	}
	rc = RouteConfig{}
	if r := rc.InflightDrainRate("dc-a"); r != 10000/DefaultInflightPrefillSlowdown {
		t.Errorf("default drain rate %v", r)
	}
}
