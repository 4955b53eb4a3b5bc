package routesim

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/replay"
)

// smallConfig is a fleet small enough for the default test run, with caches
// small enough that they evict.
func smallConfig() Config {
	cfg := DefaultConfig()
	cfg.WorkersPerDC = 2
	cfg.KVBlocks = 400
	cfg.CheckIndex = true
	return cfg
}

var loadTrace = sync.OnceValues(replay.LoadEmbedded)

func embedded(t *testing.T, n int) []replay.Request {
	t.Helper()
	reqs, err := loadTrace()
	if err != nil {
		t.Fatal(err)
	}
	return reqs[:n]
}

// The simulator's invariants on a short piece of the real trace, for every
// policy: every request completes exactly once, no worker's cache ever holds
// more than its capacity (and all blocks are returned), the index never
// rejects an event, the oracle's depths are the workers' caches.
func TestInvariants(t *testing.T) {
	reqs := embedded(t, 300)
	e, err := NewEnv(smallConfig(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range AllPolicies {
		run, err := e.Run(p, 0.8)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if run.Requests != len(reqs) || run.Incomplete != 0 {
			t.Errorf("%s: %d requests, %d not completed exactly once", p, run.Requests, run.Incomplete)
		}
		if run.CacheOverflows != 0 || run.MaxCacheUse > 1 || run.MaxCacheUse < 0.99 {
			t.Errorf("%s: %d caches over capacity or leaking, max use %.3f (the caches must fill and evict)", p, run.CacheOverflows, run.MaxCacheUse)
		}
		if run.OracleMismatch != 0 {
			t.Errorf("%s: the oracle's exact index disagreed %d times with the workers' caches", p, run.OracleMismatch)
		}
		if p.usesCKF() {
			// The filter over-reports rarely (false positives, lag) and
			// under-reports only by lag.
			if run.OverReports+run.UnderReports > run.Requests*len(e.cfg.DCs)/10 {
				t.Errorf("%s: %d over- and %d under-reports in %d answers", p, run.OverReports, run.UnderReports, run.Requests*len(e.cfg.DCs))
			}
		}
		if run.Reuse <= 0 || run.PrefillTokens <= 0 || run.TTFTP50Ms <= 0 || run.TTFTP99Ms < run.TTFTP50Ms || run.E2EP99Ms < run.TTFTP99Ms {
			t.Errorf("%s: implausible measures %+v", p, run.Result)
		}
		// The tail is the slowest 1% (3 of 300): their mean TTFT is at
		// least the p99 and at most the slowest request's.
		tl := run.Tail
		slowest := float64(run.TTFT[len(run.TTFT)-1].Microseconds()) / 1e3
		if tl.Requests != 3 || tl.TTFTMs < run.TTFTP99Ms-0.01 || tl.TTFTMs > slowest+0.01 {
			t.Errorf("%s: tail %+v against p99 %.2f ms and slowest %.2f ms", p, tl, run.TTFTP99Ms, slowest)
		}
		if tl.InputTokens <= 0 || tl.CachedTokens < 0 || tl.CachedTokens >= tl.InputTokens || tl.PrefillMs <= 0 || tl.RTTMs < 10 || tl.RTTMs > 300 {
			t.Errorf("%s: implausible tail %+v", p, tl)
		}
		if d := tl.RTTMs + tl.PrefillMs + tl.WaitMs - tl.TTFTMs; d > 0.01 || d < -0.01 {
			t.Errorf("%s: tail parts sum to %.3f ms more than its TTFT", p, d)
		}
	}
}

// The oracle never sees a false positive: its depth is exactly what some
// worker of the DC holds, also on a trace the CKF checks disagree on.
func TestOracleExact(t *testing.T) {
	e, err := NewEnv(smallConfig(), embedded(t, 200))
	if err != nil {
		t.Fatal(err)
	}
	run, err := e.Run(Oracle, 1.2)
	if err != nil {
		t.Fatal(err)
	}
	if run.OracleMismatch != 0 || run.OverReports != 0 {
		t.Fatalf("oracle: %d mismatches, %d over-reports", run.OracleMismatch, run.OverReports)
	}
}

func TestDeterministic(t *testing.T) {
	e, err := NewEnv(smallConfig(), embedded(t, 150))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Policy{Random, Cost} {
		a, err := e.Run(p, 0.7)
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.Run(p, 0.7)
		if err != nil {
			t.Fatal(err)
		}
		if a.Result != b.Result || !slices.Equal(a.TTFT, b.TTFT) {
			t.Fatalf("%s: two runs differ: %+v and %+v", p, a.Result, b.Result)
		}
	}
}

// sessions builds a trace whose best policy is known by construction: n
// conversations of turns each, every turn the conversation's long prefix
// plus a block of its own, spaced so the fleet is lightly loaded. A policy
// that follows the prefix reuses all but the first turn's prefix; one that
// ignores it mostly recomputes.
func sessions(n, turns, prefix int, gap time.Duration) []replay.Request {
	var reqs []replay.Request
	id := uint64(1)
	at := int64(0)
	for range turns {
		for s := range n {
			ids := make([]uint64, 0, prefix+1)
			for k := range prefix {
				ids = append(ids, uint64(s+1)<<32|uint64(k))
			}
			ids = append(ids, 1<<60|id)
			id++
			reqs = append(reqs, replay.Request{Timestamp: at, InputLength: (prefix + 1) * 512, OutputLength: 16, HashIDs: ids})
			at += gap.Milliseconds()
		}
	}
	return reqs
}

func TestKnownBestPolicy(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WorkersPerDC = 1
	cfg.CheckIndex = true
	// 7 conversations, so round robin does not send each back by chance.
	reqs := sessions(7, 8, 40, 1500*time.Millisecond)
	e, err := NewEnv(cfg, reqs)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[Policy]*Run{}
	for _, p := range AllPolicies {
		if runs[p], err = e.Run(p, 0.1); err != nil {
			t.Fatal(err)
		}
	}
	// Following the prefix, each conversation computes its prefix once.
	best := float64(7*7*40) / float64(7*8*41)
	for _, p := range []Policy{Prefix, Cost, Oracle} {
		if r := runs[p].Reuse; r < best*0.95 {
			t.Errorf("%s: reuse %.3f, want about %.3f", p, r, best)
		}
	}
	// Least load with the RTT keeps this light load on the nearest DC,
	// reusing by accident: its median is the cost's, never better.
	for _, p := range []Policy{Random, RoundRobin, LeastLoad} {
		// least-load adds the RTT: at load 0.1 on this short trace it sends
		// most requests to the nearest idle DC, which keeps much of their
		// prefix there and may beat cost's median TTFT, but it still
		// computes more prefill than cost.
		if p == LeastLoad {
			if runs[p].PrefillTokens <= runs[Cost].PrefillTokens {
				t.Errorf("least-load computes %d prefill tokens, cost %d", runs[p].PrefillTokens, runs[Cost].PrefillTokens)
			}
			continue
		}
		if runs[p].Reuse > runs[Cost].Reuse-0.2 || runs[p].PrefillTokens <= runs[Cost].PrefillTokens ||
			runs[p].TTFTP50Ms < runs[Cost].TTFTP50Ms || (p != LeastLoad && runs[p].TTFTP50Ms == runs[Cost].TTFTP50Ms) {
			t.Errorf("%s (reuse %.3f, prefill %d, TTFT p50 %.1f ms) is not clearly worse than cost (%.3f, %d, %.1f ms)", p,
				runs[p].Reuse, runs[p].PrefillTokens, runs[p].TTFTP50Ms, runs[Cost].Reuse, runs[Cost].PrefillTokens, runs[Cost].TTFTP50Ms)
		}
	}
	if c, o := float64(runs[Cost].PrefillTokens), float64(runs[Oracle].PrefillTokens); c > o*1.02 {
		t.Errorf("cost computes %.0f prefill tokens, the oracle %.0f", c, o)
	}
}

// With one DC's relay silent, the stale lane is excluded: after the stale
// bound no request goes there (except those routed inside the bound).
func TestFaultExcludesStaleLane(t *testing.T) {
	cfg := smallConfig()
	cfg.FaultDC = 0
	cfg.LaneStaleAfter = 200 * time.Millisecond
	// Load windows (what the non-index policies hear a relay by) well
	// within the stale bound.
	cfg.WindowInterval = 50 * time.Millisecond
	e, err := NewEnv(cfg, embedded(t, 300))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range AllPolicies {
		run, err := e.Run(p, 0.7)
		if err != nil {
			t.Fatal(err)
		}
		if run.AfterFaultShare > 0.05 || run.Incomplete != 0 {
			t.Errorf("%s: %.3f of the requests after the fault went to the silent DC", p, run.AfterFaultShare)
		}
	}
	cfg.FaultDC = -1
	run, err := e.RunWith(cfg, RoundRobin, 0.7)
	if err != nil {
		t.Fatal(err)
	}
	if run.DCShare[0] < 0.2 {
		t.Errorf("without the fault DC 0 got %.3f of the requests", run.DCShare[0])
	}
}

// The single-DC comparison: the KV router inside a DC reuses more than
// round robin.
func TestSingleDCKVRouterReusesMore(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DCs = []DC{{Name: "single"}}
	cfg.WorkersPerDC = 4
	cfg.KVBlocks = 600
	e, err := NewEnv(cfg, embedded(t, 800))
	if err != nil {
		t.Fatal(err)
	}
	cfg = e.Config()
	cfg.InDC = InDCRoundRobin
	rr, err := e.RunWith(cfg, Random, 0.7)
	if err != nil {
		t.Fatal(err)
	}
	cfg.InDC = InDCKV
	kv, err := e.RunWith(cfg, Random, 0.7)
	if err != nil {
		t.Fatal(err)
	}
	if kv.Reuse <= rr.Reuse {
		t.Fatalf("KV router reuse %.3f, round robin %.3f", kv.Reuse, rr.Reuse)
	}
}

func TestResultJSONKeys(t *testing.T) {
	b, err := json.Marshal(Result{Policy: Cost})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"e2e_p50_ms", "e2e_p99_ms", "imbalance", "load", "policy", "prefill_tokens", "remote_share", "reuse",
		"tail", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
}

func TestConfigErrors(t *testing.T) {
	reqs := embedded(t, 50)
	bad := DefaultConfig()
	bad.DCs = nil
	if _, err := NewEnv(bad, reqs); err == nil {
		t.Error("no DCs accepted")
	}
	bad = DefaultConfig()
	bad.KVBlocks = 3
	if _, err := NewEnv(bad, reqs); err == nil {
		t.Error("a cache smaller than a request accepted")
	}
	if _, err := ParsePolicy("nearest"); err == nil {
		t.Error("unknown policy accepted")
	}
	e, err := NewEnv(DefaultConfig(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Run(Cost, 0); err == nil {
		t.Error("load 0 accepted")
	}
}
