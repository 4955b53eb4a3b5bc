package follow

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/route"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

func laneOf(t *testing.T, r api.RouteResponse, dc string) api.RouteLane {
	t.Helper()
	for _, l := range r.Ranked {
		if l.DC == dc {
			return l
		}
	}
	t.Fatalf("%s not in %+v", dc, r.Ranked)
	return api.RouteLane{}
}

// Every cost term of every lane is in the answer: the RTT from the config
// (or the request), the queue from the lane's load, the prefill of the
// tokens the DC does not hold at its rate. A lane without load gets the
// missing-load estimate (above the worst known queue), never zero.
func TestRouteAnswersEachCostTerm(t *testing.T) {
	e := newEnv(t)
	a, b := e.relay(t, "dc-a"), e.relay(t, "dc-b")
	w := newWorkload(31, 4, 8)
	feed(a, w, func(int) int { return 8 })
	feed(b, w, func(int) int { return 2 })
	cfg := testConfig(t)
	pc := route.DefaultConfig()
	pc.RTT = map[string]time.Duration{"dc-a": 80 * time.Millisecond, "dc-b": 5 * time.Millisecond}
	pc.AffinityMargin = -1 // the bare minimum cost: this test checks the terms and the cheapest lane
	// The domain's own block size (16) wins over the default.
	cfg.Route = RouteConfig{Policy: pc, BlockSize: 64, DomainBlockSize: map[string]int{cfg.Domain: 16, "other": 32},
		PrefillRate: map[string]float64{"dc-b": 5000}}
	s := startService(t, e.nc, e.js, cfg)
	waitInstalled(t, s.Service, a.lane, a.epoch(), a.pub.LastSequence())
	waitInstalled(t, s.Service, b.lane, b.epoch(), b.pub.LastSequence())
	// dc-b reports its load: 2,000 prompt tokens queued, 2 workers.
	b.sendWindow(e, b.window(1, func(p *wire.PoolLoad) {
		p.Flags |= wire.LoadPrefill
		p.Serving.ActivePrefillTokens = 2000
	}))
	testenv.WaitFor(t, waitTotal, "dc-b's load", func() bool { return s.LaneLoad(b.lane, time.Now()).Flags.Has(wire.LoadPrefill) })

	resp, err := s.Route(api.Query{Locals: w.chains[0]}, api.RouteOptions{InputTokens: 200})
	if err != nil {
		t.Fatal(err)
	}
	la, lb := laneOf(t, resp, "dc-a"), laneOf(t, resp, "dc-b")
	// dc-b: 2 of 8 blocks cached (32 of 200 tokens); 168 tokens at 5,000/s
	// = 33.6 ms; queue 2,000 tokens at its 2 workers × 5,000/s = 200 ms;
	// RTT 5 ms.
	if lb.Depth != 2 || lb.CachedTokens != 32 || lb.Terms.RTTMs != 5 || lb.Terms.PrefillMs != 33.6 || lb.Terms.QueueMs != 200 ||
		lb.LoadMissing || !lb.Load.HasPrefill || lb.Load.ActivePrefillTokens != 2000 {
		t.Fatalf("dc-b %+v", lb)
	}
	// dc-a: all 8 blocks (128 tokens) cached, 72 tokens at the default
	// 10,000/s = 7.2 ms; no load: the worst known queue + 100 ms.
	if la.Depth != 8 || la.CachedTokens != 128 || la.Terms.RTTMs != 80 || la.Terms.PrefillMs != 7.2 ||
		!la.LoadMissing || la.Terms.QueueMs != 300 || la.Load.Known() || la.RTTUnknown || lb.RTTUnknown {
		t.Fatalf("dc-a %+v", la)
	}
	for _, l := range resp.Ranked {
		if sum := l.Terms.RTTMs + l.Terms.QueueMs + l.Terms.PrefillMs + l.Terms.PenaltyMs; sum != l.CostMs {
			t.Fatalf("%s: cost %v is not the sum of its terms %v", l.DC, l.CostMs, sum)
		}
	}
	if c := resp.Chosen(); c == nil || c.DC != "dc-b" || resp.Policy != "cost" || resp.InputTokens != 200 || resp.BlockSize != 16 {
		t.Fatalf("answer %+v", resp)
	}
	// The request's RTT override makes dc-b far away; prefix ranks by depth.
	resp, err = s.Route(api.Query{Locals: w.chains[0]}, api.RouteOptions{InputTokens: 200, RTTMs: map[string]float64{"dc-b": 1000}})
	if err != nil || resp.Chosen().DC != "dc-a" || laneOf(t, resp, "dc-b").Terms.RTTMs != 1000 {
		t.Fatalf("override: %+v %v", resp, err)
	}
	// An rtt_ms key naming no DC of the domain, and input_tokens below the
	// blocks sent (8 × 16), are refused, not ignored.
	var re *api.RequestError
	if _, err = s.Route(api.Query{Locals: w.chains[0]}, api.RouteOptions{RTTMs: map[string]float64{"dc-b": 1, "dc-x": 1}}); !errors.As(err, &re) || re.Field != "rtt_ms" {
		t.Fatalf("rtt_ms naming no DC: %v", err)
	}
	if _, err = s.Route(api.Query{Locals: w.chains[0]}, api.RouteOptions{InputTokens: 127}); !errors.As(err, &re) || re.Field != "input_tokens" {
		t.Fatalf("input_tokens below the blocks: %v", err)
	}
	if _, err = s.Route(api.Query{Locals: w.chains[0]}, api.RouteOptions{InputTokens: 128}); err != nil {
		t.Fatalf("input_tokens of exactly the blocks: %v", err)
	}
	resp, err = s.Route(api.Query{Locals: w.chains[0]}, api.RouteOptions{Policy: "prefix"})
	if err != nil || resp.Policy != "prefix" || resp.Chosen().DC != "dc-a" {
		t.Fatalf("prefix: %+v %v", resp, err)
	}
	resp, err = s.Route(api.Query{Locals: w.chains[0]}, api.RouteOptions{Policy: "load"})
	if err != nil || resp.Chosen().DC != "dc-b" {
		t.Fatalf("load: missing load must not win as zero load: %+v %v", resp, err)
	}
}

// A stale lane is excluded from routes by default (listed last, with its
// reason) and kept with the stale penalty under "penalize"; with only
// stale lanes a route is unavailable.
func TestRouteExcludesOrPenalizesStaleLanes(t *testing.T) {
	e := newEnv(t)
	a, b := e.relay(t, "dc-a"), e.relay(t, "dc-b")
	w := newWorkload(32, 2, 4)
	feed(a, w, func(int) int { return 4 })
	feed(b, w, func(int) int { return 1 })
	cfg := testConfig(t)
	cfg.LaneStaleAfter = 3 * time.Second
	s := startService(t, e.nc, e.js, cfg)
	waitInstalled(t, s.Service, a.lane, a.epoch(), a.pub.LastSequence())
	waitInstalled(t, s.Service, b.lane, b.epoch(), b.pub.LastSequence())
	// The fake relays say nothing unless told: dc-b's heartbeats keep it
	// fresh while dc-a goes stale after 3 s of silence.
	testenv.WaitFor(t, waitTotal, "dc-b fresh, dc-a stale", func() bool {
		b.injectHeartbeat(b.epoch(), b.wireLease().Instance)
		sa, _ := statusOf(s.Service, a.lane)
		sb, _ := statusOf(s.Service, b.lane)
		return sa.Stale && !sb.Stale
	})
	resp, err := s.Route(api.Query{Locals: w.chains[0]}, api.RouteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if la := laneOf(t, resp, "dc-a"); resp.Chosen().DC != "dc-b" || !la.Excluded || la.Reason != route.ReasonStale || resp.Ranked[len(resp.Ranked)-1].DC != "dc-a" {
		t.Fatalf("exclude: %+v", resp)
	}
	resp, err = s.Route(api.Query{Locals: w.chains[0]}, api.RouteOptions{Stale: "penalize"})
	if la := laneOf(t, resp, "dc-a"); err != nil || la.Excluded || la.Terms.PenaltyMs != 1000 {
		t.Fatalf("penalize: %+v %v", resp, err)
	}
	// Both silent: no lane is eligible.
	testenv.WaitFor(t, waitTotal, "only stale lanes: unavailable", func() bool {
		_, err := s.Route(api.Query{Locals: w.chains[0]}, api.RouteOptions{})
		return errors.Is(err, api.ErrUnavailable)
	})
}

// A prompt sent as local hashes and as its sequence hashes gets one tie-break
// key, so every transport picks the same DC among equal ones; another prompt
// gets another key.
func TestRequestKeyAlikeForLocalsAndSeqs(t *testing.T) {
	locals := []ckf.LocalBlockHash{11, 12, 13, 14}
	seqs := ckf.SequenceHashes(nil, locals)
	a, b := requestKey(&api.Query{Locals: locals}), requestKey(&api.Query{Seqs: seqs})
	if a != b {
		t.Fatalf("locals key %x, sequence key %x", a, b)
	}
	if c := requestKey(&api.Query{Locals: locals[:3]}); c == a {
		t.Fatal("a shorter prompt has the same key")
	}
}

// The key a route's search derives from the chain it hashed is
// requestKey's, for a prompt as local hashes and as sequence hashes, at
// every depth the search can stop at.
func TestRouteSearchKeyIsRequestKey(t *testing.T) {
	e := newEnv(t)
	a := e.relay(t, "dc-a")
	w := newWorkload(41, 16, 12)
	feed(a, w, func(i int) int { return i % 13 })
	s := startService(t, e.nc, e.js, testConfig(t))
	waitInstalled(t, s.Service, a.lane, a.epoch(), a.pub.LastSequence())
	for i, c := range w.chains {
		for _, q := range []api.Query{{Locals: c}, {Seqs: ckf.SequenceHashes(nil, c)}} {
			var res consumer.QueryResult
			var key uint64
			if err := s.find(q, &res, "route", &key); err != nil {
				t.Fatal(err)
			}
			if want := requestKey(&q); key != want {
				t.Fatalf("chain %d (seqs %v): key %x, requestKey %x", i, q.Seqs != nil, key, want)
			}
		}
	}
}

// A route configuration with a DC's queue rate that is not a positive,
// finite rate is refused, naming the field.
func TestRouteConfigRefusesABadQueueRate(t *testing.T) {
	for _, r := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		c := RouteConfig{Policy: route.Config{QueueTokensPerSec: map[string]float64{"dc-a": r}}}
		var ie *Error
		if err := c.validate(); !errors.As(err, &ie) || ie.Field != "route.queue_rate" {
			t.Errorf("queue rate %v: %v", r, err)
		}
	}
	if err := (RouteConfig{Policy: route.Config{QueueTokensPerSec: map[string]float64{"dc-a": 80000}}}).validate(); err != nil {
		t.Errorf("a positive queue rate: %v", err)
	}
}

// A route's answer owns its lanes: later routes (which reuse the pooled
// scratch and cut their lanes from the same chunks) leave it as it was,
// and an append to one answer's lanes cannot write into another's.
func TestRouteAnswersDoNotShareLanes(t *testing.T) {
	e := newEnv(t)
	a, b := e.relay(t, "dc-a"), e.relay(t, "dc-b")
	w := newWorkload(43, 64, 8)
	feed(a, w, func(i int) int { return i % 9 })
	feed(b, w, func(i int) int { return (i * 5) % 9 })
	s := startService(t, e.nc, e.js, testConfig(t))
	waitInstalled(t, s.Service, a.lane, a.epoch(), a.pub.LastSequence())
	waitInstalled(t, s.Service, b.lane, b.epoch(), b.pub.LastSequence())
	first, err := s.Route(api.Query{Locals: w.chains[0]}, api.RouteOptions{InputTokens: 500})
	if err != nil {
		t.Fatal(err)
	}
	want := first.AppendJSON(nil)
	if len(first.Ranked) != 2 || cap(first.Ranked) != len(first.Ranked) {
		t.Fatalf("lanes len %d cap %d, want 2 and 2", len(first.Ranked), cap(first.Ranked))
	}
	var later []api.RouteResponse
	for i := 1; i < len(w.chains); i++ {
		r, err := s.Route(api.Query{Locals: w.chains[i]}, api.RouteOptions{Policy: "prefix", Stale: "penalize"})
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, r)
	}
	_ = append(later[0].Ranked, api.RouteLane{DC: "appended"})
	if got := first.AppendJSON(nil); string(got) != string(want) {
		t.Fatalf("the first answer changed under later routes:\n%s\nwas\n%s", got, want)
	}
	for i, r := range later {
		for _, l := range r.Ranked {
			if l.DC != "dc-a" && l.DC != "dc-b" {
				t.Fatalf("answer %d holds a lane of another answer: %+v", i+1, l)
			}
		}
	}
}

// laneChunks cuts zeroed slices of the asked length whose capacity ends
// there, and hands a large request its own allocation.
func TestLaneChunksTake(t *testing.T) {
	var p laneChunks
	x := p.take(3)
	x[0].DC = "x"
	y := p.take(3)
	if len(x) != 3 || cap(x) != 3 || len(y) != 3 || cap(y) != 3 || y[0].DC != "" {
		t.Fatalf("x %d/%d y %d/%d %q", len(x), cap(x), len(y), cap(y), y[0].DC)
	}
	x = append(x, api.RouteLane{DC: "next"})
	if y[0].DC != "" || x[3].DC != "next" {
		t.Fatal("an append to one slice reached another")
	}
	if big := p.take(laneChunkLanes/4 + 1); len(big) != laneChunkLanes/4+1 {
		t.Fatalf("large take: %d", len(big))
	}
	for range 4 * laneChunkLanes {
		if z := p.take(2); len(z) != 2 || z[0].DC != "" || z[1].DC != "" {
			t.Fatalf("take across chunks: %+v", z)
		}
	}
}

// A lane whose window estimated its prefill from request counts says so in
// the route answer (prefill_estimated, in the JSON the HTTP and NATS
// endpoints write), as does a lane of request counts that routes turned
// into prefill tokens; a measured prefill does not.
func TestRouteAnswerMarksAnEstimatedPrefill(t *testing.T) {
	e := newEnv(t)
	a, b, c := e.relay(t, "dc-a"), e.relay(t, "dc-b"), e.relay(t, "dc-c")
	w := newWorkload(33, 2, 4)
	for _, r := range []*fakeRelay{a, b, c} {
		feed(r, w, func(int) int { return 1 })
	}
	s := startService(t, e.nc, e.js, testConfig(t))
	for _, r := range []*fakeRelay{a, b, c} {
		waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	}
	prefill := func(estimated bool) func(*wire.PoolLoad) {
		return func(p *wire.PoolLoad) {
			p.Flags |= wire.LoadPrefill
			p.Serving.ActivePrefillTokens = 2000
			if estimated {
				p.Flags |= wire.LoadPrefillEstimated
			}
		}
	}
	a.sendWindow(e, a.window(1, prefill(false)))
	b.sendWindow(e, b.window(1, prefill(true)))
	c.sendWindow(e, c.window(1, nil)) // request counts only
	testenv.WaitFor(t, waitTotal, "the windows", func() bool {
		now := time.Now()
		return s.LaneLoad(a.lane, now).Flags.Has(wire.LoadPrefill) && s.LaneLoad(b.lane, now).Flags.Has(wire.LoadPrefillEstimated) &&
			s.LaneLoad(c.lane, now).Flags.Has(wire.LoadRequests)
	})
	// dc-c, the only one near, takes a request: its counts and the
	// request's tokens become its prefill, an estimate.
	q := api.Query{Locals: w.chains[0]}
	near := api.RouteOptions{InputTokens: 400, RTTMs: map[string]float64{"dc-a": 1000, "dc-b": 1000, "dc-c": 1}}
	if resp, err := s.Route(q, near); err != nil || resp.Chosen() == nil || resp.Chosen().DC != "dc-c" {
		t.Fatalf("route to dc-c: %+v %v", resp, err)
	}
	resp, err := s.Route(q, api.RouteOptions{InputTokens: 400, Probe: true})
	if err != nil {
		t.Fatal(err)
	}
	la, lb, lc := laneOf(t, resp, "dc-a").Load, laneOf(t, resp, "dc-b").Load, laneOf(t, resp, "dc-c").Load
	if !la.HasPrefill || la.ActivePrefillTokens != 2000 || la.PrefillEstimated {
		t.Fatalf("dc-a, measured: %+v", la)
	}
	if !lb.HasPrefill || lb.ActivePrefillTokens != 2000 || !lb.PrefillEstimated {
		t.Fatalf("dc-b, estimated: %+v", lb)
	}
	if !lc.HasPrefill || !lc.PrefillEstimated {
		t.Fatalf("dc-c, counts and a routed request: %+v", lc)
	}
	// The endpoints' JSON carries the mark on the estimated lanes alone, and
	// a client reads it back.
	body := resp.AppendJSON(nil)
	var back api.RouteResponse
	if err := json.Unmarshal(body, &back); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(body, []byte(`"prefill_estimated":true`)); n != 2 ||
		!laneOf(t, back, "dc-b").Load.PrefillEstimated || laneOf(t, back, "dc-a").Load.PrefillEstimated {
		t.Fatalf("%d lanes marked in %s", n, body)
	}
}
