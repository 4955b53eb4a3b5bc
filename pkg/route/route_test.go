package route

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func served(prefillTokens uint64) LoadReport {
	return LoadReport{HasPrefill: true, ActivePrefillTokens: prefillTokens}
}

func cand(lane int, dc string, depth int, load LoadReport) Candidate {
	return Candidate{Lane: lane, DC: dc, Pool: "p", Depth: depth, Ready: true, Load: load}
}

func route(t *testing.T, r *Router, req Request, cands ...Candidate) *Decision {
	t.Helper()
	d := new(Decision)
	r.Route(req, cands, d)
	return d
}

func byLane(d *Decision, lane int) Scored {
	for _, s := range d.Ranked {
		if s.Lane == lane {
			return s
		}
	}
	panic("lane not ranked")
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]Policy{"": Cost, "cost": Cost, "prefix": Prefix, "load": Load,
		"least-load": Load, "round-robin": RoundRobin, "random": Random} {
		got, err := ParsePolicy(in)
		if err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParsePolicy("fastest"); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
	for _, s := range []string{"exclude", "penalize"} {
		m, err := ParseStaleMode(s)
		if err != nil || m.String() != s {
			t.Fatalf("ParseStaleMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseStaleMode("ignore"); err == nil {
		t.Fatal("unknown stale mode accepted")
	}
}

// The prefill term charges exactly the tokens the DC does not hold, at the
// candidate's rate or the default, floored at zero.
func TestPrefillTerm(t *testing.T) {
	r := New(Config{DefaultPrefillTokensPerSec: 1000})
	fast := cand(1, "b", 2, served(0))
	fast.PrefillTokensPerSec = 4000
	d := route(t, r, Request{Blocks: 9, BlockSize: 100, InputTokens: 950},
		cand(0, "a", 4, served(0)), fast, cand(2, "c", 12, served(0)))
	if got, want := byLane(d, 0).Terms.Prefill, 550*time.Millisecond; got != want {
		t.Errorf("lane 0 prefill %v, want %v (550 tokens at 1000/s)", got, want)
	}
	if got, want := byLane(d, 1).Terms.Prefill, 187500*time.Microsecond; got != want {
		t.Errorf("lane 1 prefill %v, want %v (750 tokens at 4000/s)", got, want)
	}
	// A depth past the request's blocks counts as the whole request: the
	// partial last block is still to prefill.
	if s := byLane(d, 2); s.Terms.Prefill != 50*time.Millisecond || s.CachedTokens != 900 || s.Depth != 9 {
		t.Errorf("lane 2 holds more than the prompt: prefill %v cached %d depth %d", s.Terms.Prefill, s.CachedTokens, s.Depth)
	}
	// InputTokens below Blocks × BlockSize (callers refuse it) reads as the
	// product: the prefill term is never zero for tokens the DC lacks.
	d = route(t, r, Request{Blocks: 10, BlockSize: 100, InputTokens: 5}, cand(0, "a", 4, served(0)))
	if got := d.Ranked[0].Terms.Prefill; got != 600*time.Millisecond {
		t.Errorf("short input: prefill %v, want 600ms (6 uncached blocks of 100)", got)
	}
	// InputTokens defaults to Blocks × BlockSize.
	d = route(t, r, Request{Blocks: 3, BlockSize: 100}, cand(0, "a", 1, served(0)))
	if got := d.Ranked[0].Terms.Prefill; got != 200*time.Millisecond {
		t.Errorf("default input: prefill %v, want 200ms", got)
	}
}

// The RTT term: request override, then the configured RTT per DC, then the
// default.
func TestRTTTerm(t *testing.T) {
	r := New(Config{RTT: map[string]time.Duration{"a": 40 * time.Millisecond}, DefaultRTT: 7 * time.Millisecond})
	over := cand(2, "a", 0, served(0))
	over.RTT, over.RTTKnown = 3*time.Millisecond, true
	d := route(t, r, Request{Blocks: 1, BlockSize: 1}, cand(0, "a", 0, served(0)), cand(1, "z", 0, served(0)), over)
	for lane, want := range map[int]time.Duration{0: 40 * time.Millisecond, 1: 7 * time.Millisecond, 2: 3 * time.Millisecond} {
		if got := byLane(d, lane).Terms.RTT; got != want {
			t.Errorf("lane %d RTT %v, want %v", lane, got, want)
		}
	}
}

// The queue term from each kind of load report.
func TestQueueTerm(t *testing.T) {
	r := New(Config{DefaultPrefillTokensPerSec: 1000, DefaultQueueTokensPerSec: 4000,
		WaitingRequestTokens: 500, DecodeBlockTime: time.Millisecond, KVFullQueue: 2 * time.Second})
	prefill := LoadReport{HasPrefill: true, ActivePrefillTokens: 2000, HasDecode: true, ActiveDecodeBlocks: 30,
		HasRequests: true, Waiting: 99}
	counts := LoadReport{HasRequests: true, Waiting: 4, Running: 7}
	kv := LoadReport{HasKV: true, KVUsedBlocks: 300, KVCapacityBlocks: 1000}
	d := route(t, r, Request{Blocks: 1, BlockSize: 1},
		cand(0, "a", 0, prefill), cand(1, "b", 0, counts), cand(2, "c", 0, kv))
	for lane, want := range map[int]time.Duration{
		0: 500*time.Millisecond + 30*time.Millisecond, // active prefill tokens win over waiting counts
		1: 500 * time.Millisecond,                     // 4 × 500 tokens at 4000/s
		2: 600 * time.Millisecond,                     // 30% of a full cache's 2 s
	} {
		s := byLane(d, lane)
		if s.Terms.Queue != want || s.LoadMissing {
			t.Errorf("lane %d queue %v (missing %v), want %v", lane, s.Terms.Queue, s.LoadMissing, want)
		}
		if s.Cost != s.Terms.Sum() {
			t.Errorf("lane %d cost %v != sum of terms %v", lane, s.Cost, s.Terms.Sum())
		}
	}
}

// Missing load is never read as zero load: an idle-looking DC with no report
// is charged the worst known queue plus the penalty, and loses to a known,
// lightly loaded DC.
func TestMissingLoadIsNeverZero(t *testing.T) {
	r := New(Config{DefaultPrefillTokensPerSec: 1000, MissingLoadPenalty: 50 * time.Millisecond})
	for _, tc := range []struct {
		name string
		load LoadReport
	}{
		{"absent", LoadReport{}},
		{"decode only", LoadReport{HasDecode: true}},
		{"kv without capacity", LoadReport{HasKV: true}},
	} {
		d := route(t, r, Request{Blocks: 4, BlockSize: 10, Policy: Load},
			cand(0, "known-light", 0, served(100)), cand(1, "known-heavy", 0, served(300)), cand(2, "unknown", 0, tc.load))
		s := byLane(d, 2)
		if !s.LoadMissing || s.Terms.Queue != 350*time.Millisecond {
			t.Errorf("%s: missing %v queue %v, want worst known 300ms + 50ms", tc.name, s.LoadMissing, s.Terms.Queue)
		}
		if d.Chosen().Lane != 0 || d.Ranked[2].Lane != 2 {
			t.Errorf("%s: least load chose lane %d, order %v", tc.name, d.Chosen().Lane, lanes(d))
		}
	}
	// With no known load at all, every candidate still carries the penalty.
	d := route(t, r, Request{Blocks: 1, BlockSize: 1}, cand(0, "a", 0, LoadReport{}))
	if q := d.Ranked[0].Terms.Queue; q != 50*time.Millisecond {
		t.Errorf("no known load: queue %v, want the penalty 50ms", q)
	}
}

// Load older than MaxLoadAge is dropped, so it counts as missing.
func TestStaleLoadIsMissing(t *testing.T) {
	r := New(Config{DefaultPrefillTokensPerSec: 1000, MaxLoadAge: time.Second, MissingLoadPenalty: 10 * time.Millisecond})
	old := served(0)
	old.Age = 2 * time.Second
	fresh := served(200)
	fresh.Age = 500 * time.Millisecond
	d := route(t, r, Request{Blocks: 1, BlockSize: 1, Policy: Load}, cand(0, "old", 0, old), cand(1, "fresh", 0, fresh))
	if s := byLane(d, 0); !s.LoadMissing || s.Terms.Queue != 210*time.Millisecond {
		t.Fatalf("old load: missing %v queue %v; want missing, 210ms", s.LoadMissing, s.Terms.Queue)
	}
	if d.Chosen().Lane != 1 {
		t.Fatalf("chose lane %d, want the fresh one", d.Chosen().Lane)
	}
}

// Stale and unready lanes are excluded by default, and penalized on request.
func TestStaleLanes(t *testing.T) {
	stale := cand(0, "stale", 8, served(0))
	stale.Stale = true
	unready := cand(1, "unready", 8, served(0))
	unready.Ready = false
	fresh := cand(2, "fresh", 1, served(0))
	req := Request{Blocks: 8, BlockSize: 16}

	for _, pol := range Policies {
		req.Policy = pol
		d := route(t, New(Config{}), req, stale, unready, fresh)
		if d.Chosen().Lane != 2 {
			t.Errorf("%s exclude: chose lane %d", pol, d.Chosen().Lane)
		}
		if s := byLane(d, 0); !s.Excluded || s.Reason != ReasonStale {
			t.Errorf("%s: stale lane not excluded: %+v", pol, s)
		}
		if s := byLane(d, 1); !s.Excluded || s.Reason != ReasonUnready || s.Depth != 0 {
			t.Errorf("%s: unready lane not excluded with depth 0: %+v", pol, s)
		}
		if d.Ranked[0].Lane != 2 {
			t.Errorf("%s: excluded lanes are not last: %v", pol, lanes(d))
		}
	}

	r := New(Config{Stale: StalePenalize, StalePenalty: 10 * time.Second})
	req.Policy = Cost
	d := route(t, r, req, stale, unready, fresh)
	if s := byLane(d, 0); s.Excluded || s.Terms.Penalty != 10*time.Second || s.Depth != 8 {
		t.Errorf("penalize: stale lane %+v", s)
	}
	if s := byLane(d, 1); s.Excluded || s.Terms.Penalty != 10*time.Second || s.Depth != 0 {
		t.Errorf("penalize: unready lane %+v (depth must read as 0)", s)
	}
	if d.Chosen().Lane != 2 {
		t.Errorf("penalize: chose lane %d over the penalty", d.Chosen().Lane)
	}
	req.Policy = Prefix
	if d = route(t, r, req, stale, fresh); d.Chosen().Lane != 2 {
		t.Errorf("penalize prefix: chose the deeper stale lane %d", d.Chosen().Lane)
	}
	// A penalized stale lane is still chosen when it is all there is.
	if d = route(t, r, req, stale); d.Chosen() == nil || d.Chosen().Lane != 0 {
		t.Errorf("penalize: the only lane is not chosen: %+v", d)
	}
	// All excluded: no choice.
	if d = route(t, New(Config{}), req, stale, unready); d.Best != -1 || d.Chosen() != nil {
		t.Errorf("all excluded: best %d", d.Best)
	}
	if d = route(t, New(Config{}), req); d.Best != -1 || len(d.Ranked) != 0 {
		t.Errorf("no candidates: %+v", d)
	}
}

// The cost policy trades prefix against load and distance.
func TestCostPolicy(t *testing.T) {
	r := New(Config{DefaultPrefillTokensPerSec: 1000,
		RTT: map[string]time.Duration{"near": 5 * time.Millisecond, "far": 150 * time.Millisecond}})
	req := Request{Blocks: 10, BlockSize: 100}
	// The far DC holds the whole prompt (saves 900 ms of prefill) for 145 ms more RTT.
	d := route(t, r, req, cand(0, "near", 1, served(0)), cand(1, "far", 10, served(0)))
	if d.Chosen().Lane != 1 {
		t.Fatalf("cost chose lane %d; terms %+v", d.Chosen().Lane, d.Ranked)
	}
	// Loaded with 2 s of queue, the far DC loses.
	d = route(t, r, req, cand(0, "near", 1, served(0)), cand(1, "far", 10, served(2000)))
	if d.Chosen().Lane != 0 {
		t.Fatalf("cost chose the loaded lane %d", d.Chosen().Lane)
	}
	if d.Ranked[0].Cost > d.Ranked[1].Cost {
		t.Fatal("cost ranking not ascending")
	}
}

// The affinity rule keeps the deepest-prefix DC while its cost is within the
// margin of the cheapest, and gives way past the margin.
func TestAffinityMargin(t *testing.T) {
	rtt := map[string]time.Duration{"near": 5 * time.Millisecond, "far": 150 * time.Millisecond}
	req := Request{Blocks: 10, BlockSize: 100, Key: 7}
	// far holds 2 blocks more (200 ms of prefill saved) but has 400 ms of
	// queue and 145 ms more RTT: it costs 345 ms more than near.
	cs := []Candidate{cand(0, "near", 1, served(0)), cand(1, "far", 3, served(400))}
	for _, tc := range []struct {
		margin time.Duration
		want   []int
	}{
		{-1, []int{0, 1}},                     // pure cost
		{300 * time.Millisecond, []int{0, 1}}, // 345 ms > margin: cost wins
		{400 * time.Millisecond, []int{1, 0}}, // within margin: stay
	} {
		r := New(Config{DefaultPrefillTokensPerSec: 1000, RTT: rtt, AffinityMargin: tc.margin})
		d := route(t, r, req, cs...)
		if !equal(lanes(d), tc.want) {
			t.Errorf("margin %v: order %v, want %v; ranked %+v", tc.margin, lanes(d), tc.want, d.Ranked)
		}
	}
	// An excluded lane never wins by affinity.
	r := New(Config{DefaultPrefillTokensPerSec: 1000, RTT: rtt, AffinityMargin: time.Hour})
	stale := cand(1, "far", 10, served(0))
	stale.Stale = true
	if d := route(t, r, req, cand(0, "near", 1, served(0)), stale); d.Chosen().Lane != 0 {
		t.Errorf("affinity chose the stale lane")
	}
	if got := New(Config{}).Config().AffinityMargin; got != AffinityMarginDefault {
		t.Errorf("default margin %v, want %v", got, AffinityMarginDefault)
	}
}

// A request no DC holds more of than another (a new conversation) is spread
// by its hash over the DCs within the margin, not herded to the nearest.
func TestAffinitySpreadsNewConversations(t *testing.T) {
	rtt := map[string]time.Duration{"a": 5 * time.Millisecond, "b": 40 * time.Millisecond,
		"c": 80 * time.Millisecond, "d": 150 * time.Millisecond}
	cs := []Candidate{cand(0, "a", 1, served(0)), cand(1, "b", 1, served(0)), cand(2, "c", 1, served(0)), cand(3, "d", 1, served(0))}
	for _, tc := range []struct {
		margin time.Duration
		spread bool
	}{{-1, false}, {200 * time.Millisecond, true}} {
		r := New(Config{RTT: rtt, AffinityMargin: tc.margin})
		counts := map[int]int{}
		for k := uint64(1); k <= 4000; k++ {
			counts[route(t, r, Request{Blocks: 8, BlockSize: 16, Key: k}, cs...).Chosen().Lane]++
		}
		for lane := range 4 {
			c := counts[lane]
			if tc.spread && (c < 800 || c > 1200) {
				t.Errorf("margin %v: lane %d won %d of 4000", tc.margin, lane, c)
			}
			if !tc.spread && lane != 0 && c != 0 {
				t.Errorf("margin %v (off): lane %d won %d of 4000; want all on the nearest", tc.margin, lane, c)
			}
		}
	}
}

func TestPrefixAndLoadPolicies(t *testing.T) {
	r := New(Config{})
	cs := []Candidate{cand(0, "a", 3, served(900)), cand(1, "b", 7, served(500)), cand(2, "c", 1, served(100))}
	if d := route(t, r, Request{Blocks: 8, BlockSize: 4, Policy: Prefix}, cs...); !equal(lanes(d), []int{1, 0, 2}) {
		t.Errorf("prefix order %v", lanes(d))
	}
	if d := route(t, r, Request{Blocks: 8, BlockSize: 4, Policy: Load}, cs...); !equal(lanes(d), []int{2, 1, 0}) {
		t.Errorf("load order %v", lanes(d))
	}
}

func TestRoundRobin(t *testing.T) {
	r := New(Config{Policy: RoundRobin})
	stale := cand(3, "d", 0, served(0))
	stale.Stale = true
	cs := []Candidate{cand(2, "c", 0, served(0)), stale, cand(0, "a", 0, served(0)), cand(1, "b", 0, served(0))}
	var got []int
	for range 7 {
		d := route(t, r, Request{Blocks: 1, BlockSize: 1}, cs...)
		got = append(got, d.Chosen().Lane)
		if last := d.Ranked[len(d.Ranked)-1]; last.Lane != 3 || !last.Excluded {
			t.Fatalf("stale lane not last: %v", lanes(d))
		}
	}
	if !equal(got, []int{0, 1, 2, 0, 1, 2, 0}) {
		t.Fatalf("round robin sequence %v", got)
	}
}

// Random is uniform over eligible lanes and deterministic for a key.
func TestRandom(t *testing.T) {
	r := New(Config{Policy: Random, Seed: 7})
	cs := []Candidate{cand(0, "a", 9, served(0)), cand(1, "b", 0, served(9999)), cand(2, "c", 0, served(0))}
	counts := map[int]int{}
	const n = 30000
	for k := uint64(1); k <= n; k++ {
		d := route(t, r, Request{Blocks: 1, BlockSize: 1, Key: k}, cs...)
		counts[d.Chosen().Lane]++
		if again := route(t, r, Request{Blocks: 1, BlockSize: 1, Key: k}, cs...); again.Chosen().Lane != d.Chosen().Lane {
			t.Fatalf("key %d: two answers", k)
		}
	}
	for lane := range 3 {
		if c := counts[lane]; c < n/3-600 || c > n/3+600 {
			t.Errorf("lane %d chosen %d of %d times, not uniform", lane, c, n)
		}
	}
}

// Equal DCs are not herded: the tie-break spreads requests over them, and a
// temperature spreads near-equal ones in proportion to the softmax.
func TestTieBreakAndTemperature(t *testing.T) {
	cs := []Candidate{cand(0, "a", 4, served(0)), cand(1, "b", 4, served(0)), cand(2, "c", 4, served(0)), cand(3, "d", 4, served(0))}
	for _, pol := range []Policy{Cost, Prefix, Load} {
		r := New(Config{})
		counts := map[int]int{}
		for k := uint64(1); k <= 4000; k++ {
			counts[route(t, r, Request{Blocks: 8, BlockSize: 16, Policy: pol, Key: k}, cs...).Chosen().Lane]++
		}
		for lane := range 4 {
			if c := counts[lane]; c < 800 || c > 1200 {
				t.Errorf("%s: lane %d won %d of 4000 ties", pol, lane, c)
			}
		}
	}
	// Key 0 draws a fresh key per call, so ties still spread.
	r := New(Config{})
	seen := map[int]bool{}
	for range 64 {
		seen[route(t, r, Request{Blocks: 8, BlockSize: 16}, cs...).Chosen().Lane] = true
	}
	if len(seen) < 4 {
		t.Errorf("key 0: only lanes %v chosen", seen)
	}

	// Lane 1 costs 10 ms more: with temperature 10 ms it should win e^-1
	// as often as lane 0; without temperature, never (the affinity rule is
	// off, or it would keep the tie-break's choice within its margin).
	near := []Candidate{cand(0, "a", 0, served(0)), cand(1, "b", 0, served(100))}
	cold := New(Config{DefaultPrefillTokensPerSec: 10000, AffinityMargin: -1})
	warm := New(Config{DefaultPrefillTokensPerSec: 10000, AffinityMargin: -1, Temperature: 10 * time.Millisecond})
	var coldWins, warmWins int
	const n = 20000
	for k := uint64(1); k <= n; k++ {
		req := Request{Blocks: 1, BlockSize: 1, Key: k}
		if route(t, cold, req, near...).Chosen().Lane == 1 {
			coldWins++
		}
		d := route(t, warm, req, near...)
		if d.Chosen().Lane == 1 {
			warmWins++
		}
	}
	want := n * 0.36788 / 1.36788 // e^-1 / (1 + e^-1)
	if coldWins != 0 || float64(warmWins) < want*0.93 || float64(warmWins) > want*1.07 {
		t.Fatalf("lane 1 won %d (cold) and %d (warm) of %d; want 0 and about %.0f", coldWins, warmWins, n, want)
	}
}

func TestDecisionJSON(t *testing.T) {
	r := New(Config{DefaultPrefillTokensPerSec: 1000})
	d := route(t, r, Request{Blocks: 2, BlockSize: 10}, cand(0, "a", 1, LoadReport{}))
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"policy":"cost"`, `"best":0`, `"cost_ns":`, `"prefill_ns":10000000`,
		`"queue_ns":`, `"rtt_ns":0`, `"penalty_ns":0`, `"load_missing":true`, `"cached_tokens":10`,
		`"dc":"a"`, `"depth":1`, `"excluded":false`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
}

func TestRouteDoesNotAllocate(t *testing.T) {
	r := New(Config{Temperature: time.Millisecond})
	cs := benchCandidates()
	d := Decision{Ranked: make([]Scored, 0, len(cs))}
	for _, pol := range Policies {
		req := Request{Blocks: 64, BlockSize: 16, Policy: pol}
		if a := testing.AllocsPerRun(100, func() { r.Route(req, cs, &d) }); a != 0 {
			t.Errorf("%s: %v allocations per Route", pol, a)
		}
	}
}

func benchCandidates() []Candidate {
	cs := make([]Candidate, 16)
	for i := range cs {
		cs[i] = cand(i, string(rune('a'+i)), i*3%17, served(uint64(i*1000)))
		cs[i].Stale = i == 5
	}
	return cs
}

func BenchmarkRoute(b *testing.B) {
	for _, pol := range []Policy{Cost, Prefix, RoundRobin} {
		b.Run(string(pol), func(b *testing.B) {
			r := New(Config{RTT: map[string]time.Duration{"a": time.Millisecond, "b": 2 * time.Millisecond}})
			cs := benchCandidates()
			d := Decision{Ranked: make([]Scored, 0, len(cs))}
			req := Request{Blocks: 64, BlockSize: 16, Policy: pol}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				req.Key = uint64(i + 1)
				r.Route(req, cs, &d)
			}
		})
	}
}

func lanes(d *Decision) []int {
	var l []int
	for _, s := range d.Ranked {
		l = append(l, s.Lane)
	}
	return l
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
