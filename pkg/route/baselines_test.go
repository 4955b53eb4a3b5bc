package route

import (
	"math"
	"testing"
	"time"
)

func reqs(running, waiting uint64) LoadReport {
	return LoadReport{HasRequests: true, Running: running, Waiting: waiting}
}

func withKV(l LoadReport, used, capacity uint64) LoadReport {
	l.HasKV, l.KVUsedBlocks, l.KVCapacityBlocks = true, used, capacity
	return l
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// llm-d's score is (2 × prefix + 1 × queue + 1 × KV) / 4, each scorer in
// [0, 1]: min-max normalized cached blocks, min-max normalized waiting
// requests (inverted), 1 − KV used fraction.
func TestLLMDWeightedScore(t *testing.T) {
	r := New(Config{})
	cs := []Candidate{
		cand(0, "a", 8, withKV(reqs(1, 10), 90, 100)), // deepest, longest queue, fullest
		cand(1, "b", 2, withKV(reqs(9, 0), 20, 100)),  // shallowest, no queue
		cand(2, "c", 5, withKV(reqs(0, 4), 50, 100)),  // in between
	}
	d := route(t, r, Request{Blocks: 8, BlockSize: 16, Policy: LLMD, Key: 3}, cs...)
	want := map[int]float64{
		0: (2*1 + 1*0 + 1*0.1) / 4.0,
		1: (2*0 + 1*1 + 1*0.8) / 4.0,
		2: (2*0.5 + 1*0.6 + 1*0.5) / 4.0,
	}
	for lane, w := range want {
		if got := byLane(d, lane).Score; !near(got, w) {
			t.Errorf("lane %d score %v, want %v", lane, got, w)
		}
	}
	if !equal(lanes(d), []int{0, 2, 1}) {
		t.Errorf("order %v, want by score descending", lanes(d))
	}
	// Equal depths and queues give every DC 1 on those scorers; unknown KV
	// occupancy scores 0 there, as a full cache; a DC with no request counts
	// is charged the longest known queue.
	cs = []Candidate{
		cand(0, "a", 3, reqs(0, 2)),
		cand(1, "b", 3, withKV(reqs(0, 2), 50, 100)),
		cand(2, "c", 3, withKV(LoadReport{}, 0, 100)),
	}
	d = route(t, r, Request{Blocks: 8, BlockSize: 16, Policy: LLMD, Key: 3}, cs...)
	for lane, w := range map[int]float64{0: 3 / 4.0, 1: 3.5 / 4, 2: 4 / 4.0} {
		if got := byLane(d, lane).Score; !near(got, w) {
			t.Errorf("equal: lane %d score %v, want %v", lane, got, w)
		}
	}
	// The waiting queue is read from the queued tokens when counts are
	// missing (in units of WaitingRequestTokens).
	cs = []Candidate{cand(0, "a", 0, served(4096)), cand(1, "b", 0, reqs(0, 2)), cand(2, "c", 0, reqs(50, 0))}
	d = route(t, r, Request{Blocks: 8, BlockSize: 16, Policy: LLMD, Key: 3}, cs...)
	for lane, w := range map[int]float64{0: 2 / 4.0, 1: 2.5 / 4, 2: 3 / 4.0} {
		if got := byLane(d, lane).Score; !near(got, w) {
			t.Errorf("tokens: lane %d score %v, want %v", lane, got, w)
		}
	}
	// An excluded lane takes no part in the normalization and is last.
	stale := cand(3, "d", 8, reqs(0, 100))
	stale.Stale = true
	d = route(t, r, Request{Blocks: 8, BlockSize: 16, Policy: LLMD, Key: 3}, cand(0, "a", 2, reqs(0, 1)), cand(1, "b", 4, reqs(0, 3)), stale)
	if a, b := byLane(d, 0).Score, byLane(d, 1).Score; !near(a, 1/4.0) || !near(b, 2/4.0) || d.Ranked[2].Lane != 3 {
		t.Errorf("with an excluded lane: a %v b %v order %v", a, b, lanes(d))
	}
}

// SGLang's gateway: balanced loads and a match above 30% of the input go to
// the best match; a match at or below it, or loads imbalanced past both
// thresholds (64 requests and 1.5×), go to the least loaded.
func TestSGLangCacheAware(t *testing.T) {
	r := New(Config{})
	req := Request{Blocks: 10, BlockSize: 10, Policy: SGLang, Key: 5}
	for _, tc := range []struct {
		name        string
		deepDepth   int
		deep, light LoadReport
		want        int
	}{
		{"balanced, good match", 4, reqs(50, 20), reqs(10, 0), 0},
		{"balanced, match at the threshold", 3, reqs(50, 20), reqs(10, 0), 1},
		{"abs gap 64, not past it", 10, reqs(64, 64), reqs(64, 0), 0},
		{"abs gap 65, ratio 2", 10, reqs(65, 65), reqs(65, 0), 1},
		{"abs gap 100, ratio 1.5, not past it", 10, reqs(150, 150), reqs(200, 0), 0},
		{"abs gap 101, ratio above 1.5", 10, reqs(151, 150), reqs(200, 0), 1},
	} {
		d := route(t, r, req, cand(0, "deep", tc.deepDepth, tc.deep), cand(1, "light", 1, tc.light))
		if d.Chosen().Lane != tc.want {
			t.Errorf("%s: chose lane %d, want %d; %+v", tc.name, d.Chosen().Lane, tc.want, d.Ranked)
		}
		if s := byLane(d, 0); s.Score != float64(tc.deep.Running+tc.deep.Waiting) {
			t.Errorf("%s: load %v", tc.name, s.Score)
		}
	}
	// Without counts the load is the queued tokens over WaitingRequestTokens;
	// a lane with no load is charged the largest known.
	d := route(t, r, req, cand(0, "a", 0, served(2048)), cand(1, "b", 0, LoadReport{}), cand(2, "c", 0, reqs(1, 0)))
	if a, b := byLane(d, 0).Score, byLane(d, 1).Score; a != 2 || b != 2 || d.Chosen().Lane != 2 {
		t.Errorf("loads a %v b %v, chose %d", a, b, d.Chosen().Lane)
	}
	// The best match is chosen among the lanes of the least penalty only.
	pr := New(Config{Stale: StalePenalize})
	stale := cand(0, "a", 10, reqs(0, 0))
	stale.Stale = true
	if d := route(t, pr, req, stale, cand(1, "b", 5, reqs(9, 0)), cand(2, "c", 0, reqs(1, 0))); d.Chosen().Lane != 1 {
		t.Errorf("penalize: chose %d, want the best match of the fresh lanes", d.Chosen().Lane)
	}
	// A lane excluded is never chosen by the cache rule.
	if d := route(t, r, req, stale, cand(1, "b", 0, reqs(3, 0))); d.Chosen().Lane != 1 {
		t.Errorf("exclude: chose %d", d.Chosen().Lane)
	}
}

// Dynamo's logit in blocks: 1.0 × (queued prompt tokens + uncached tokens)
// / block size + active decode blocks + the request's blocks; the minimum
// wins.
func TestDynamoLogit(t *testing.T) {
	r := New(Config{})
	decode := func(l LoadReport, blocks uint64) LoadReport {
		l.HasDecode, l.ActiveDecodeBlocks = true, blocks
		return l
	}
	req := Request{Blocks: 8, BlockSize: 16, InputTokens: 130, Policy: Dynamo, Key: 9}
	d := route(t, r, req,
		cand(0, "a", 8, decode(served(320), 40)), // (320 + 2) / 16 + 40 + 8
		cand(1, "b", 0, decode(served(0), 10)),   // (0 + 130) / 16 + 10 + 8
		cand(2, "c", 4, decode(served(16), 30)),  // (16 + 66) / 16 + 30 + 8
	)
	for lane, w := range map[int]float64{0: 322.0/16 + 48, 1: 130.0/16 + 18, 2: 82.0/16 + 38} {
		if got := byLane(d, lane).Score; !near(got, w) {
			t.Errorf("lane %d logit %v, want %v", lane, got, w)
		}
	}
	if !equal(lanes(d), []int{1, 2, 0}) {
		t.Errorf("order %v", lanes(d))
	}
	// Missing queued tokens and decode blocks are the worst known; waiting
	// counts stand for tokens when the prefill signal is absent.
	d = route(t, r, req, cand(0, "a", 0, decode(served(64), 5)), cand(1, "b", 0, LoadReport{}), cand(2, "c", 0, reqs(0, 1)))
	for lane, w := range map[int]float64{0: (64.0+130)/16 + 5 + 8, 1: (1024.0+130)/16 + 5 + 8, 2: (1024.0+130)/16 + 5 + 8} {
		if got := byLane(d, lane).Score; !near(got, w) {
			t.Errorf("missing: lane %d logit %v, want %v", lane, got, w)
		}
	}
}

// least-load ranks by the queue term plus the RTT.
func TestLoadAddsTheRTT(t *testing.T) {
	r := New(Config{DefaultPrefillTokensPerSec: 1000,
		RTT: map[string]time.Duration{"near": 10 * time.Millisecond, "far": 300 * time.Millisecond}})
	// far: 100 ms of queue + 300 ms; near: 200 ms of queue + 10 ms.
	d := route(t, r, Request{Blocks: 1, BlockSize: 1, Policy: Load}, cand(0, "far", 0, served(100)), cand(1, "near", 0, served(200)))
	if !equal(lanes(d), []int{1, 0}) {
		t.Errorf("order %v, want near first", lanes(d))
	}
	d = route(t, r, Request{Blocks: 1, BlockSize: 1, Policy: Load}, cand(0, "far", 0, served(100)), cand(1, "near", 0, served(400)))
	if !equal(lanes(d), []int{0, 1}) {
		t.Errorf("order %v, want far first (390 < 410)", lanes(d))
	}
}

func TestBaselineNamesParse(t *testing.T) {
	for _, p := range Policies {
		got, err := ParsePolicy(string(p))
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %q, %v", p, got, err)
		}
	}
	if len(Policies) != 8 {
		t.Errorf("%d policies", len(Policies))
	}
}
