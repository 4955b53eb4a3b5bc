package inflight

import (
	"math"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/route"
)

func TestApply(t *testing.T) {
	for _, c := range []struct {
		name    string
		in      route.LoadReport
		pending uint64
		want    route.LoadReport
	}{
		{"prefill adds", route.LoadReport{HasPrefill: true, ActivePrefillTokens: 100}, 50,
			route.LoadReport{HasPrefill: true, ActivePrefillTokens: 150}},
		{"prefill saturates", route.LoadReport{HasPrefill: true, ActivePrefillTokens: math.MaxUint64 - 1}, 50,
			route.LoadReport{HasPrefill: true, ActivePrefillTokens: math.MaxUint64}},
		{"counts become tokens", route.LoadReport{HasRequests: true, Waiting: 3, Running: 2}, 50,
			route.LoadReport{HasRequests: true, Waiting: 3, Running: 2, HasPrefill: true, ActivePrefillTokens: 3*1024 + 50, PrefillEstimated: true}},
		{"estimated prefill stays estimated", route.LoadReport{HasPrefill: true, ActivePrefillTokens: 100, PrefillEstimated: true}, 50,
			route.LoadReport{HasPrefill: true, ActivePrefillTokens: 150, PrefillEstimated: true}},
		{"kv blocks round up", route.LoadReport{HasKV: true, KVUsedBlocks: 10, KVCapacityBlocks: 100}, 33,
			route.LoadReport{HasKV: true, KVUsedBlocks: 13, KVCapacityBlocks: 100}},
		{"kv capped", route.LoadReport{HasKV: true, KVUsedBlocks: 99, KVCapacityBlocks: 100}, 1 << 20,
			route.LoadReport{HasKV: true, KVUsedBlocks: 100, KVCapacityBlocks: 100}},
		{"missing stays missing", route.LoadReport{}, 50, route.LoadReport{}},
		{"kv without capacity", route.LoadReport{HasKV: true, KVUsedBlocks: 5}, 50, route.LoadReport{HasKV: true, KVUsedBlocks: 5}},
		{"kv exact blocks", route.LoadReport{HasKV: true, KVUsedBlocks: 10, KVCapacityBlocks: 100}, 32,
			route.LoadReport{HasKV: true, KVUsedBlocks: 12, KVCapacityBlocks: 100}},
		{"nothing pending", route.LoadReport{HasRequests: true, Waiting: 3}, 0, route.LoadReport{HasRequests: true, Waiting: 3}},
	} {
		cand := route.Candidate{Load: c.in}
		Apply(&cand, c.pending, 1024, 16)
		if cand.Load != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, cand.Load, c.want)
		}
	}
	if tokensOf(5, 0) != 0 || tokensOf(math.MaxUint64, 1e10) != math.MaxUint64 || tokensOf(1<<32, 1<<32) != math.MaxUint64 ||
		tokensOf(3, 2.5) != 7 {
		t.Error("tokensOf bounds")
	}
}

// Apply keeps the router's queue term unchanged at pending 0 and raises it
// with pending tokens, for request counts as for prefill tokens.
func TestApplyRaisesQueue(t *testing.T) {
	r := route.New(route.Config{})
	for _, l := range []route.LoadReport{{HasRequests: true, Waiting: 2}, {HasPrefill: true, ActivePrefillTokens: 2048}} {
		var prev time.Duration
		for i, p := range []uint64{0, 1, 10000} {
			cands := []route.Candidate{{Lane: 0, DC: "a", Ready: true, Load: l}}
			Apply(&cands[0], p, r.Config().WaitingRequestTokens, 16)
			var d route.Decision
			r.Route(route.Request{Blocks: 1, BlockSize: 16}, cands, &d)
			q := d.Ranked[0].Terms.Queue
			if i == 0 && q != 2048*time.Second/10000 {
				t.Fatalf("%+v: queue %s at pending 0", l, q)
			}
			if i > 0 && q <= prev {
				t.Fatalf("%+v: queue %s at pending %d not above %s", l, q, p, prev)
			}
			prev = q
		}
	}
}

func TestRecord(t *testing.T) {
	r := route.New(route.Config{RTT: map[string]time.Duration{"a": 5 * time.Millisecond, "b": time.Second}})
	l := newLedger(t, Config{Lanes: 2})
	cands := []route.Candidate{
		{Lane: 0, DC: "a", Ready: true, Depth: 2, Load: route.LoadReport{HasPrefill: true}},
		{Lane: 1, DC: "b", Ready: true, Load: route.LoadReport{HasPrefill: true}},
	}
	var d route.Decision
	r.Route(route.Request{Blocks: 4, BlockSize: 16, InputTokens: 100}, cands, &d)
	if !l.Record(&d, 100, at(0)) {
		t.Fatal("not recorded")
	}
	if p := l.Pending(0, at(1)); p != 100-32 {
		t.Fatalf("lane 0 pending %d, want the 68 uncached tokens", p)
	}
	if l.Cover(0, at(4)) != 0 || l.Cover(0, at(5)) != 1 {
		t.Fatal("the entry is not due at route time + the decision's RTT")
	}
	if _, _, _, ok := Charge(&d, 32); ok {
		t.Fatal("a prompt the lane holds whole is charged")
	}
	if lane, tokens, rtt, ok := Charge(&d, 33); !ok || lane != 0 || tokens != 1 || rtt != 5*time.Millisecond {
		t.Fatalf("Charge = %d %d %s %v", lane, tokens, rtt, ok)
	}
	// A prompt the lane holds whole, and no choice, account nothing.
	if l.Record(&d, 32, at(2)) || l.Record(&route.Decision{Best: -1}, 100, at(2)) {
		t.Fatal("recorded nothing to prefill")
	}
}
