// Package routesim is the routing-quality benchmark: it replays a
// Mooncake-format trace through a simulated multi-DC fleet and measures what
// each DC routing policy costs in prefill and time to first token.
//
// The fleet has K DCs, each with an RTT from the router, and W workers per
// DC. A worker is a vLLM-style engine: an FCFS waiting queue, continuous
// batching with chunked prefill under a token budget, a prefix cache of
// fixed-size blocks with LRU eviction of free blocks, and BLIS's
// (inference-sim) roofline step-time model of Qwen2.5-7B on one H100. Inside
// a DC the worker is chosen as Dynamo's KV router does (exact local prefix
// and load); the DC is chosen by the policy under test, through pkg/route.
//
// The router is the product's: its configuration is parsed by
// internal/routeflags from global-indexer flags (Config.RouterArgs), its
// tie-break key is route.KeyOf, and its load plane is the product's
// (loadplane.go: engine scrapes, relay load windows, --load-max-age, the
// in-flight account of pkg/inflight), at the product's default intervals.
//
// The policies that read prefix depths read the real index: every worker's
// store and remove events go to its DC's real producer (pkg/producer), whose
// deltas reach a real consumer table (pkg/consumer) half an RTT later, so
// false positives and update lag count. The oracle is the cost on the exact
// per-DC block sets.
//
// Every run is deterministic for a seed: one goroutine, a time-ordered event
// queue with a sequence tie-break, hash-based tie-breaks. Runs of a
// benchmark may run side by side (Options.Parallel).
package routesim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inference-sim/inference-sim/sim"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/internal/routeflags"
	"github.com/ckfrelay/ckfrelay/pkg/lanerules"
	"github.com/ckfrelay/ckfrelay/pkg/route"
)

// Policy is a DC routing policy of the benchmark.
type Policy string

// The policies, each a mode of pkg/route.
const (
	Random     Policy = "random"
	RoundRobin Policy = "round-robin"
	LeastLoad  Policy = "least-load"
	LLMD       Policy = "llm-d"
	SGLang     Policy = "sglang"
	Dynamo     Policy = "dynamo"
	Prefix     Policy = "prefix"
	Cost       Policy = "cost"
	Oracle     Policy = "oracle"
)

// AllPolicies is every policy, baselines first.
var AllPolicies = []Policy{Random, RoundRobin, LeastLoad, LLMD, SGLang, Dynamo, Prefix, Cost, Oracle}

// usesCKF: the policy reads prefix depths from the index.
func (p Policy) usesCKF() bool {
	switch p {
	case Prefix, Cost, LLMD, SGLang, Dynamo:
		return true
	}
	return false
}

func (p Policy) routePolicy() route.Policy {
	switch p {
	case Random:
		return route.Random
	case RoundRobin:
		return route.RoundRobin
	case LeastLoad:
		return route.Load
	case Prefix:
		return route.Prefix
	case LLMD:
		return route.LLMD
	case SGLang:
		return route.SGLang
	case Dynamo:
		return route.Dynamo
	}
	return route.Cost
}

// ParsePolicy reads a policy name.
func ParsePolicy(s string) (Policy, error) {
	if slices.Contains(AllPolicies, Policy(s)) {
		return Policy(s), nil
	}
	return "", fmt.Errorf("routesim: unknown policy %q", s)
}

// DC is one data center.
type DC struct {
	Name string
	RTT  time.Duration
}

// InDCPolicy is how a DC picks the worker.
type InDCPolicy int

// The in-DC policies.
const (
	// InDCKV is Dynamo's KV router: min over workers of the prompt blocks to
	// compute (queued prefill included) plus the blocks in decode.
	InDCKV InDCPolicy = iota
	InDCRoundRobin
)

// Config is one benchmark's setting.
type Config struct {
	DCs          []DC
	WorkersPerDC int
	// BlockSize is the tokens of one trace block (Mooncake: 512).
	BlockSize int
	// MaxBatchedTokens and MaxRunning are vLLM's max_num_batched_tokens and
	// max_num_seqs.
	MaxBatchedTokens int
	MaxRunning       int
	// KVBlocks per worker (0: BLIS's capacity model for the GPU).
	KVBlocks int
	// Loads are the offered prompt tokens per second as shares of the
	// fleet's prefill capacity; the trace's arrival times are scaled to
	// each.
	Loads    []float64
	Policies []Policy
	// FlushInterval is the relay's delta publish cadence; WindowInterval
	// its load window cadence; ScrapeInterval the engine bridge's scrape
	// cadence; LaneStaleAfter the indexer's lane stale bound. DefaultConfig
	// takes the product's defaults.
	FlushInterval  time.Duration
	WindowInterval time.Duration
	ScrapeInterval time.Duration
	LaneStaleAfter time.Duration
	// Signal is what the engines report (default SignalPrefill).
	Signal Signal
	// Seed sets the phases of every DC's scrape and window clocks and the
	// tie-breaks inside a DC.
	Seed uint64
	// Requests replays only the first Requests of the trace (0: all).
	Requests int
	InDC     InDCPolicy
	// FaultDC, when ≥ 0, silences that DC's relay (lane and load) from the
	// middle request on.
	FaultDC int
	// CheckIndex compares every index answer with the exact state.
	CheckIndex bool
	// RouterFlags are global-indexer flags (internal/routeflags) given
	// after the fleet's facts; RouterArgs is the whole command line of the
	// benchmark's router.
	RouterFlags []string

	workerPrefillRate float64
}

// DefaultConfig is the benchmark's default fleet: 4 DCs at 5, 40, 80 and
// 150 ms, 8 workers each, loads 0.5, 0.7 and 0.9.
func DefaultConfig() Config {
	return Config{
		DCs: []DC{{"dc-a", 5 * time.Millisecond}, {"dc-b", 40 * time.Millisecond},
			{"dc-c", 80 * time.Millisecond}, {"dc-d", 150 * time.Millisecond}},
		WorkersPerDC:     8,
		BlockSize:        512,
		MaxBatchedTokens: 8192,
		MaxRunning:       256,
		Loads:            []float64{0.5, 0.7, 0.9},
		Policies:         AllPolicies,
		FlushInterval:    relay.DefaultConfig("routesim", "routesim").PublishInterval,
		WindowInterval:   relay.DefaultLoadInterval,
		ScrapeInterval:   bridge.DefaultLoadInterval,
		LaneStaleAfter:   lanerules.DefaultLaneStaleAfter,
		Signal:           SignalPrefill,
		Seed:             1,
		FaultDC:          -1,
	}
}

// RouterArgs is the global-indexer command line of the benchmark's router:
// the facts of the simulated fleet an operator configures (each DC's RTT,
// one worker's prefill rate), then RouterFlags. A DC's capacity reaches the
// router as the product's does: its load windows count its workers, and
// the router drains its queue at workers × the prefill rate. Before
// calibration (no worker rate yet) the rates are left out.
func (c Config) RouterArgs() []string {
	var rtt, prefill []string
	for _, dc := range c.DCs {
		rtt = append(rtt, dc.Name+"="+dc.RTT.String())
		if c.workerPrefillRate > 0 {
			prefill = append(prefill, dc.Name+"="+strconv.FormatFloat(c.workerPrefillRate, 'f', -1, 64))
		}
	}
	args := []string{"--dc-rtt", strings.Join(rtt, ",")}
	if len(prefill) > 0 {
		args = append(args, "--dc-prefill-rate", strings.Join(prefill, ","))
	}
	return append(args, c.RouterFlags...)
}

// RouterSettings is the router configuration of RouterArgs, read by the
// product's flag parser.
func (c Config) RouterSettings() (routeflags.Settings, error) {
	s, err := routeflags.Parse(c.RouterArgs())
	if err != nil {
		return routeflags.Settings{}, fmt.Errorf("routesim: router flags: %w", err)
	}
	return s, nil
}

// Result is one (policy, load) row; its JSON keys are the benchmark's
// machine-readable contract.
type Result struct {
	Policy        Policy  `json:"policy"`
	Load          float64 `json:"load"`
	Reuse         float64 `json:"reuse"`
	PrefillTokens int64   `json:"prefill_tokens"`
	TTFTP50Ms     float64 `json:"ttft_p50_ms"`
	TTFTP90Ms     float64 `json:"ttft_p90_ms"`
	TTFTP99Ms     float64 `json:"ttft_p99_ms"`
	E2EP50Ms      float64 `json:"e2e_p50_ms"`
	E2EP99Ms      float64 `json:"e2e_p99_ms"`
	Imbalance     float64 `json:"imbalance"`
	RemoteShare   float64 `json:"remote_share"`
	// Tail is what the slowest requests' TTFT is made of.
	Tail Tail `json:"tail"`
}

// TailShare is the share of the requests, the slowest by TTFT, that Tail
// describes: the requests at and above the TTFT p99.
const TailShare = 0.01

// Tail splits the mean TTFT of the slowest TailShare of the requests into
// the network, the prefill of their uncached tokens at one idle worker's
// calibrated rate (what no placement saves once the prefix is missing),
// and the rest: waiting for and sharing a worker.
type Tail struct {
	Requests     int     `json:"requests"`
	InputTokens  float64 `json:"input_tokens"`
	CachedTokens float64 `json:"cached_tokens"`
	TTFTMs       float64 `json:"ttft_ms"`
	RTTMs        float64 `json:"rtt_ms"`
	PrefillMs    float64 `json:"prefill_ms"`
	WaitMs       float64 `json:"wait_ms"`
}

// Run is one run's full measure.
type Run struct {
	Result
	E2EP90Ms float64
	// TTFT of every request, sorted.
	TTFT []time.Duration
	// DCShare is each DC's share of the requests; AfterFaultShare the
	// faulted DC's share of the requests routed after the fault.
	DCShare         []float64
	AfterFaultShare float64
	Requests        int
	// OverReports and UnderReports count CKF depths above and below the
	// exact depth (with CheckIndex); OracleMismatch oracle depths that
	// differ from the workers' caches.
	OverReports, UnderReports, OracleMismatch int
	// MaxCacheUse is the largest share of a worker's KV blocks ever used.
	MaxCacheUse float64
	// SimSeconds is the simulated time the run took.
	SimSeconds float64
	// Incomplete counts requests that did not complete exactly once, or
	// whose times are out of order; CacheOverflows workers that ever held
	// more blocks than their capacity or still hold some at the end.
	Incomplete, CacheOverflows int
}

// Env is what every run of one trace shares.
type Env struct {
	cfg   Config
	trace []traceReq
	model sim.LatencyModel
	zeros []int
	// inputTokens and span are the trace's total prompt tokens and its
	// time span (µs).
	inputTokens int64
	span        int64
}

// NewEnv prepares a trace for runs under cfg.
func NewEnv(cfg Config, reqs []replay.Request) (*Env, error) {
	if len(cfg.DCs) == 0 || len(cfg.DCs) > 16 || cfg.WorkersPerDC <= 0 || cfg.BlockSize <= 0 ||
		cfg.MaxBatchedTokens <= 0 || cfg.MaxRunning <= 0 {
		return nil, errors.New("routesim: need 1..16 DCs and positive workers, block size, batch limits")
	}
	if cfg.FlushInterval <= 0 || cfg.WindowInterval <= 0 || cfg.ScrapeInterval <= 0 || cfg.LaneStaleAfter <= 0 {
		return nil, errors.New("routesim: the publish, window and scrape intervals and the stale bound must be positive")
	}
	if _, err := ParseSignal(string(cfg.Signal)); err != nil {
		return nil, err
	}
	if _, err := cfg.RouterSettings(); err != nil {
		return nil, err
	}
	if cfg.Requests > 0 && cfg.Requests < len(reqs) {
		reqs = reqs[:cfg.Requests]
	}
	if len(reqs) < 2 {
		return nil, errors.New("routesim: the trace needs at least 2 requests")
	}
	model, err := newLatencyModel()
	if err != nil {
		return nil, err
	}
	if cfg.KVBlocks == 0 {
		if cfg.KVBlocks, err = kvBlocks(cfg.BlockSize); err != nil {
			return nil, err
		}
	}
	e := &Env{cfg: cfg, trace: Prepare(reqs), model: model}
	maxTokens := 0
	for _, t := range e.trace {
		e.inputTokens += int64(t.input)
		maxTokens = max(maxTokens, t.input+t.output)
		if need := max(len(t.seqs), (t.input+t.output+cfg.BlockSize-1)/cfg.BlockSize); need > cfg.KVBlocks {
			return nil, fmt.Errorf("routesim: a request needs %d blocks, a worker holds %d", need, cfg.KVBlocks)
		}
	}
	e.span = e.trace[len(e.trace)-1].at - e.trace[0].at
	if e.span <= 0 {
		return nil, errors.New("routesim: the trace spans no time")
	}
	e.zeros = make([]int, maxTokens)
	if e.cfg.workerPrefillRate, err = e.calibrate(); err != nil {
		return nil, err
	}
	return e, nil
}

// calibrationRequests is the sample of the trace that measures a worker.
const calibrationRequests = 256

// calibrate measures one worker's capacity on this trace: the prompt tokens
// per second it sustains when saturated with an even sample of the trace's
// requests (their prompts and outputs, so decode takes its share), all
// arriving at once.
func (e *Env) calibrate() (float64, error) {
	n := min(calibrationRequests, len(e.trace))
	sample := make([]traceReq, n)
	var tokens int64
	for i := range n {
		sample[i] = e.trace[i*len(e.trace)/n]
		sample[i].at = 0
		tokens += int64(sample[i].input)
	}
	cfg := e.cfg
	cfg.DCs = []DC{{Name: "calibration"}}
	cfg.WorkersPerDC = 1
	cfg.FaultDC = -1
	f, err := newFleet(cfg, Random, sample, 1, e.model, e.zeros)
	if err != nil {
		return 0, err
	}
	if err := f.run(); err != nil {
		return 0, err
	}
	return float64(tokens) / (float64(f.now) / 1e6), nil
}

// Config is the effective configuration (KV blocks filled in).
func (e *Env) Config() Config { return e.cfg }

// WorkerPrefillRate is one worker's capacity on the trace in prompt tokens
// per second (see calibrate).
func (e *Env) WorkerPrefillRate() float64 { return e.cfg.workerPrefillRate }

// FleetCapacity is the fleet's prefill capacity in tokens per second.
func (e *Env) FleetCapacity() float64 {
	return e.cfg.workerPrefillRate * float64(len(e.cfg.DCs)*e.cfg.WorkersPerDC)
}

// Run replays the trace under policy p at load (share of the fleet's
// prefill capacity).
func (e *Env) Run(p Policy, load float64) (*Run, error) {
	return e.RunWith(e.cfg, p, load)
}

// RunWith is Run with another configuration of the same fleet size and
// block size (a fault, another in-DC policy).
func (e *Env) RunWith(cfg Config, p Policy, load float64) (*Run, error) {
	if !(load > 0) || math.IsInf(load, 0) {
		return nil, fmt.Errorf("routesim: load %v must be positive", load)
	}
	cfg.KVBlocks = e.cfg.KVBlocks
	cfg.workerPrefillRate = e.cfg.workerPrefillRate
	capacity := cfg.workerPrefillRate * float64(len(cfg.DCs)*cfg.WorkersPerDC)
	simSpan := float64(e.inputTokens) / (load * capacity) * 1e6 // µs
	f, err := newFleet(cfg, p, e.trace, float64(e.span)/simSpan, e.model, e.zeros)
	if err != nil {
		return nil, err
	}
	if err := f.run(); err != nil {
		return nil, err
	}
	return f.measure(load), nil
}

func (f *fleet) measure(load float64) *Run {
	k := len(f.cfg.DCs)
	run := &Run{Result: Result{Policy: f.policy, Load: load}, Requests: len(f.reqs), DCShare: make([]float64, k),
		OverReports: f.overReports, UnderReports: f.underReports, OracleMismatch: f.oracleMismatch,
		SimSeconds: float64(f.now) / 1e6}
	nearest := 0
	for d, dc := range f.cfg.DCs {
		if dc.RTT < f.cfg.DCs[nearest].RTT {
			nearest = d
		}
	}
	perDC := make([]float64, k)
	var hit, blocks, remote, after, afterFault int
	ttft := make([]time.Duration, len(f.reqs))
	e2e := make([]time.Duration, len(f.reqs))
	for i := range f.reqs {
		r := &f.reqs[i]
		hit += r.hitBlocks
		blocks += len(r.tr.seqs)
		computed := r.tr.input - min(r.hitBlocks*f.cfg.BlockSize, r.tr.input-1)
		run.PrefillTokens += int64(computed)
		perDC[r.dc] += float64(computed)
		run.DCShare[r.dc]++
		if r.dc != nearest {
			remote++
		}
		if f.faultAt > 0 && r.arrival >= f.faultAt {
			after++
			if r.dc == f.cfg.FaultDC {
				afterFault++
			}
		}
		if r.completions != 1 || r.firstToken < r.arrival || r.done < r.firstToken {
			run.Incomplete++
		}
		h := f.halfRTT[r.dc]
		ttft[i] = time.Duration(r.firstToken+h-r.arrival) * time.Microsecond
		e2e[i] = time.Duration(r.done+h-r.arrival) * time.Microsecond
	}
	run.Tail = f.tail(ttft)
	for d := range run.DCShare {
		run.DCShare[d] /= float64(len(f.reqs))
	}
	if after > 0 {
		run.AfterFaultShare = float64(afterFault) / float64(after)
	}
	run.Reuse = float64(hit) / float64(max(blocks, 1))
	run.RemoteShare = float64(remote) / float64(len(f.reqs))
	mean := float64(run.PrefillTokens) / float64(k)
	run.Imbalance = slices.Max(perDC) / max(mean, 1)
	slices.Sort(ttft)
	slices.Sort(e2e)
	run.TTFT = ttft
	run.TTFTP50Ms, run.TTFTP90Ms, run.TTFTP99Ms = ms(pct(ttft, 50)), ms(pct(ttft, 90)), ms(pct(ttft, 99))
	run.E2EP50Ms, run.E2EP90Ms, run.E2EP99Ms = ms(pct(e2e, 50)), ms(pct(e2e, 90)), ms(pct(e2e, 99))
	for _, ws := range f.workers {
		for _, w := range ws {
			run.MaxCacheUse = max(run.MaxCacheUse, float64(w.maxUsed)/float64(w.capacity))
			if w.maxUsed > w.capacity || w.allocated != 0 {
				run.CacheOverflows++
			}
		}
	}
	return run
}

// tail describes the slowest TailShare of the requests, ttft in request
// order (before sorting).
func (f *fleet) tail(ttft []time.Duration) Tail {
	n := len(ttft)
	k := max(int(math.Ceil(TailShare*float64(n))), 1)
	if n == 0 {
		return Tail{}
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	// Slowest first; equal TTFTs by request index, so the set is the same
	// on every run of a seed.
	slices.SortFunc(idx, func(a, b int) int {
		if c := cmp.Compare(ttft[b], ttft[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	var t Tail
	rate := f.cfg.workerPrefillRate
	for _, i := range idx[:k] {
		r := &f.reqs[i]
		cached := min(r.hitBlocks*f.cfg.BlockSize, r.tr.input-1)
		rtt := 2 * f.halfRTT[r.dc] // µs: to the DC and back
		prefill := 0.0
		if rate > 0 {
			prefill = float64(r.tr.input-cached) / rate * 1e6
		}
		t.InputTokens += float64(r.tr.input)
		t.CachedTokens += float64(cached)
		t.TTFTMs += float64(ttft[i].Microseconds())
		t.RTTMs += float64(rtt)
		t.PrefillMs += prefill
	}
	kf := float64(k)
	t.Requests = k
	t.InputTokens /= kf
	t.CachedTokens /= kf
	t.TTFTMs /= kf * 1e3
	t.RTTMs /= kf * 1e3
	t.PrefillMs /= kf * 1e3
	t.WaitMs = t.TTFTMs - t.RTTMs - t.PrefillMs
	return t
}

// pct is the nearest-rank percentile of sorted s.
func pct(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d.Microseconds())/10) / 100 }
