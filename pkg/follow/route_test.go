package follow

import (
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
