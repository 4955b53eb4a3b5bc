package route

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Policy names a way of choosing the DC.
type Policy string

// The policies. Every one is a real mode of the product; LLMD, SGLang and
// Dynamo are the decisions of those routers (baselines.go), applied per DC.
const (
	Cost       Policy = "cost"
	Prefix     Policy = "prefix"
	Load       Policy = "load"
	LLMD       Policy = "llm-d"
	SGLang     Policy = "sglang"
	Dynamo     Policy = "dynamo"
	RoundRobin Policy = "round-robin"
	Random     Policy = "random"
)

// Policies lists every policy, in a stable order.
var Policies = [...]Policy{Cost, Prefix, Load, LLMD, SGLang, Dynamo, RoundRobin, Random}

// ErrUnknownPolicy is returned by ParsePolicy for a name it does not know.
var ErrUnknownPolicy = errors.New("route: unknown policy")

// ParsePolicy reads a policy name; "" is the cost policy and "least-load"
// is accepted for load.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case "", Cost:
		return Cost, nil
	case Prefix, Load, LLMD, SGLang, Dynamo, RoundRobin, Random:
		return Policy(s), nil
	case "least-load":
		return Load, nil
	}
	return "", fmt.Errorf("%w %q (want cost, prefix, load, llm-d, sglang, dynamo, round-robin or random)", ErrUnknownPolicy, s)
}

// StaleMode says what to do with a stale or unready lane.
type StaleMode uint8

// The stale modes.
const (
	// StaleExclude leaves stale and unready lanes out of the choice.
	StaleExclude StaleMode = iota
	// StalePenalize keeps them, with StalePenalty added to their cost (and
	// an unready lane's depth read as 0).
	StalePenalize
)

// ParseStaleMode reads "exclude" or "penalize".
func ParseStaleMode(s string) (StaleMode, error) {
	switch s {
	case "", "exclude":
		return StaleExclude, nil
	case "penalize":
		return StalePenalize, nil
	}
	return 0, fmt.Errorf("route: unknown stale mode %q (want exclude or penalize)", s)
}

func (m StaleMode) String() string {
	if m == StalePenalize {
		return "penalize"
	}
	return "exclude"
}

// LoadReport is what a DC reports about its load. Each group of fields has
// its own presence flag: a field whose flag is false is unknown, never zero.
// The values are bounded where they enter (the wire, the engines' /metrics,
// kvrelay); Route reads any uint64 all the same, saturating its terms.
type LoadReport struct {
	// KV occupancy, from the relay's exact state.
	HasKV            bool   `json:"has_kv"`
	KVUsedBlocks     uint64 `json:"kv_used_blocks"`
	KVCapacityBlocks uint64 `json:"kv_capacity_blocks"`
	// Request counts.
	HasRequests bool   `json:"has_requests"`
	Running     uint64 `json:"running"`
	Waiting     uint64 `json:"waiting"`
	// Prompt tokens still to be prefilled across the DC, queued or running.
	// PrefillEstimated: estimated from request counts, so the prompts the
	// running requests are still prefilling are left out (an in-flight
	// account adds its own estimate of them, package inflight).
	HasPrefill          bool   `json:"has_prefill"`
	ActivePrefillTokens uint64 `json:"active_prefill_tokens"`
	PrefillEstimated    bool   `json:"prefill_estimated,omitempty"`
	// KV blocks of requests in decode.
	HasDecode          bool   `json:"has_decode"`
	ActiveDecodeBlocks uint64 `json:"active_decode_blocks"`
	// Workers is how many workers the serving load sums (0: unknown). With
	// no configured queue rate, the DC drains its queue at Workers × the
	// prefill rate of one worker.
	Workers uint64 `json:"workers"`
	// Age is how old the report is (by local receive time).
	Age time.Duration `json:"age_ns"`
}

// Known reports whether the report carries anything.
func (l *LoadReport) Known() bool {
	return l.HasKV || l.HasRequests || l.HasPrefill
}

// Candidate is one DC lane the request could go to.
type Candidate struct {
	Lane int    `json:"lane"`
	DC   string `json:"dc"`
	Pool string `json:"pool"`
	// Depth is the number of the request's leading blocks the DC holds.
	Depth int  `json:"depth"`
	Ready bool `json:"ready"`
	Stale bool `json:"stale"`
	// Load is the DC's last load report; the zero value is missing load.
	Load LoadReport `json:"load"`
	// RTT overrides the configured RTT when RTTKnown.
	RTT      time.Duration `json:"-"`
	RTTKnown bool          `json:"-"`
	// PrefillTokensPerSec is the prefill speed of one worker of the DC;
	// QueueTokensPerSec the DC's aggregate rate of draining queued
	// prefill. 0 takes the Config's values.
	PrefillTokensPerSec float64 `json:"-"`
	QueueTokensPerSec   float64 `json:"-"`
}

// Request is what the policy knows of the request.
type Request struct {
	// Blocks is the number of blocks of the prompt, BlockSize the tokens of
	// one block.
	Blocks    int
	BlockSize int
	// InputTokens is the prompt length (0: Blocks × BlockSize; a value
	// below Blocks × BlockSize, which callers refuse, is read as that
	// product); OutputTokens the expected output (informational).
	InputTokens  int
	OutputTokens int
	// Policy chosen for this request; "" takes the Router's default.
	Policy Policy
	// Key seeds tie-breaks, random choice and temperature sampling; 0 draws
	// one from the Router's counter. KeyOf derives it from the prompt.
	Key uint64
}

// Config parameterizes the cost. Zero durations and rates take the defaults
// of DefaultConfig where noted; negative durations and rates read as zero.
type Config struct {
	// Policy is the default policy (cost when empty).
	Policy Policy
	// DefaultPrefillTokensPerSec is one worker's prefill speed when the
	// candidate has none (default 10000).
	DefaultPrefillTokensPerSec float64
	// QueueTokensPerSec is each DC's rate of draining queued prefill, by DC
	// name: the sum of its workers' prefill rates. A DC not listed drains at
	// its load report's Workers × its prefill rate, else at
	// DefaultQueueTokensPerSec, else at its prefill rate (one worker).
	QueueTokensPerSec map[string]float64
	// DefaultQueueTokensPerSec is a DC's rate of draining queued prefill
	// when nothing more specific is known (0: the prefill rate).
	DefaultQueueTokensPerSec float64
	// WaitingRequestTokens is the prefill assumed per waiting request when
	// only request counts are known (default 1024).
	WaitingRequestTokens float64
	// DecodeBlockTime is the queue time one active decode block adds (0: decode
	// load is ignored).
	DecodeBlockTime time.Duration
	// KVFullQueue is the queue term of a DC whose KV cache is full when
	// KV occupancy is all that is known (default 1 s).
	KVFullQueue time.Duration
	// MissingLoadPenalty is added to the worst known queue term for a
	// candidate with no usable load (default 100 ms).
	MissingLoadPenalty time.Duration
	// MaxLoadAge drops load reports older than this (0: no bound).
	MaxLoadAge time.Duration
	// Stale says whether stale and unready lanes are excluded or penalized;
	// StalePenalty is the penalty (default 1 s).
	Stale        StaleMode
	StalePenalty time.Duration
	// Temperature > 0 makes the cost policy sample from a softmax over
	// −cost/Temperature.
	Temperature time.Duration
	// AffinityMargin is the cost policy's hysteresis (SGLang's gateway rule
	// in cost form): the DC holding the deepest prefix (ties broken by the
	// request's hash, so new conversations spread evenly) is chosen unless
	// another DC's cost is lower by more than the margin. Staying keeps a
	// conversation's cache in one place; the margin bounds what staying may
	// cost. 0 takes the default (AffinityMarginDefault); negative disables
	// the rule (pure cost).
	AffinityMargin time.Duration
	// RTT per DC name; DefaultRTT (when positive) for a DC not listed. A DC
	// with neither has an unknown RTT (see MissingRTT): it is charged the
	// largest RTT of the candidates whose RTT is known, never 0.
	RTT        map[string]time.Duration
	DefaultRTT time.Duration
	// Seed mixes into every hash, so two routers can break ties apart.
	Seed uint64
}

// MissingRTT lists the DCs of dcs, in their order, that c gives no RTT:
// not in c.RTT while c.DefaultRTT is not positive. A router that knows its
// DCs refuses to start with any (their RTT term would be a guess).
func (c Config) MissingRTT(dcs []string) []string {
	var out []string
	if c.DefaultRTT > 0 {
		return out
	}
	for _, dc := range dcs {
		if _, ok := c.RTT[dc]; !ok {
			out = append(out, dc)
		}
	}
	return out
}

// AffinityMarginDefault is the default AffinityMargin.
const AffinityMarginDefault = 400 * time.Millisecond

// DefaultConfig is the configuration the defaults above describe.
func DefaultConfig() Config {
	return Config{
		Policy:                     Cost,
		AffinityMargin:             AffinityMarginDefault,
		DefaultPrefillTokensPerSec: 10000,
		WaitingRequestTokens:       1024,
		KVFullQueue:                time.Second,
		MissingLoadPenalty:         100 * time.Millisecond,
		StalePenalty:               time.Second,
	}
}

// MaxTerm bounds each term of the cost (2^60 ns, about 36 years): a load
// report of any size gives a finite queue term, and the sum of the terms
// cannot wrap. It is a power of two, so a float64 holds it exactly.
const MaxTerm = time.Duration(1 << 60)

// Terms are the parts of one candidate's cost, each in [0, MaxTerm] except
// a missing-load queue term, which is the worst known plus a penalty.
type Terms struct {
	RTT     time.Duration `json:"rtt_ns"`
	Queue   time.Duration `json:"queue_ns"`
	Prefill time.Duration `json:"prefill_ns"`
	Penalty time.Duration `json:"penalty_ns"`
}

// Sum is the cost: the terms' sum, saturating at the largest Duration.
func (t Terms) Sum() time.Duration {
	return satAdd(satAdd(t.RTT, t.Queue), satAdd(t.Prefill, t.Penalty))
}

// Scored is one ranked candidate.
type Scored struct {
	Candidate
	// Cost is the cost formula's value, whatever the policy ranked by.
	Cost  time.Duration `json:"cost_ns"`
	Terms Terms         `json:"terms"`
	// Score is the llm-d, sglang or dynamo policy's own figure (baselines.go:
	// the weighted score, the load, the logit); 0 under the other policies.
	Score float64 `json:"score"`
	// CachedTokens are the request's tokens the DC holds (by Depth).
	CachedTokens int `json:"cached_tokens"`
	// LoadMissing: the queue term is the missing-load estimate.
	LoadMissing bool `json:"load_missing"`
	// RTTUnknown: no RTT is configured or given for the DC; Terms.RTT is the
	// largest known RTT of the candidates (0 if none is known).
	RTTUnknown bool   `json:"rtt_unknown"`
	Excluded   bool   `json:"excluded"`
	Reason     string `json:"reason,omitempty"`

	tie uint64
	sig signals
}

// Decision is the answer: the candidates in the policy's order, eligible
// first. Best indexes Ranked (−1: none eligible); it is 0 except under a
// temperature.
type Decision struct {
	Policy Policy   `json:"policy"`
	Ranked []Scored `json:"ranked"`
	Best   int      `json:"best"`
}

// Chosen returns the chosen candidate, or nil.
func (d *Decision) Chosen() *Scored {
	if d.Best < 0 || d.Best >= len(d.Ranked) {
		return nil
	}
	return &d.Ranked[d.Best]
}

// Router applies a Config. It is safe for concurrent use.
type Router struct {
	cfg Config
	rr  atomic.Uint64
	key atomic.Uint64
}

// New returns a Router; zero fields of cfg take DefaultConfig's values.
func New(cfg Config) *Router {
	d := DefaultConfig()
	if cfg.Policy == "" {
		cfg.Policy = d.Policy
	}
	if !(cfg.DefaultPrefillTokensPerSec > 0) {
		cfg.DefaultPrefillTokensPerSec = d.DefaultPrefillTokensPerSec
	}
	if !(cfg.WaitingRequestTokens > 0) {
		cfg.WaitingRequestTokens = d.WaitingRequestTokens
	}
	if cfg.KVFullQueue <= 0 {
		cfg.KVFullQueue = d.KVFullQueue
	}
	if cfg.MissingLoadPenalty <= 0 {
		cfg.MissingLoadPenalty = d.MissingLoadPenalty
	}
	if cfg.StalePenalty <= 0 {
		cfg.StalePenalty = d.StalePenalty
	}
	if cfg.AffinityMargin == 0 {
		cfg.AffinityMargin = d.AffinityMargin
	}
	cfg.KVFullQueue = min(cfg.KVFullQueue, MaxTerm)
	cfg.MissingLoadPenalty = min(cfg.MissingLoadPenalty, MaxTerm)
	cfg.StalePenalty = min(cfg.StalePenalty, MaxTerm)
	cfg.DecodeBlockTime = max(cfg.DecodeBlockTime, 0)
	cfg.DefaultRTT = max(cfg.DefaultRTT, 0)
	return &Router{cfg: cfg}
}

// Config returns the effective configuration.
func (r *Router) Config() Config { return r.cfg }

// Exclusion reasons.
const (
	ReasonStale   = "stale"
	ReasonUnready = "unready"
)

// Route ranks cands for req under its policy into out. out.Ranked is reused
// (no allocation when its capacity suffices).
func (r *Router) Route(req Request, cands []Candidate, out *Decision) {
	pol := req.Policy
	if pol == "" {
		pol = r.cfg.Policy
	}
	key := req.Key
	if key == 0 {
		key = mix(r.key.Add(1) ^ 0x5bd1e995)
	}
	key = mix(key ^ r.cfg.Seed)
	out.Policy = pol
	out.Ranked = out.Ranked[:0]
	out.Best = -1

	bs := max(req.BlockSize, 1)
	input := max(req.InputTokens, req.Blocks*bs)
	worstQueue := time.Duration(0)
	worstRTT := time.Duration(0)
	for i := range cands {
		c := &cands[i]
		s := Scored{Candidate: *c, tie: mix(key ^ uint64(c.Lane+1)*0x9e3779b97f4a7c15)}
		if !c.Ready {
			s.Depth = 0
		}
		s.Depth = min(max(s.Depth, 0), req.Blocks)
		if rtt, ok := r.rtt(c); ok {
			s.Terms.RTT = rtt
			worstRTT = max(worstRTT, rtt)
		} else {
			s.RTTUnknown = true
		}
		s.CachedTokens = s.Depth * bs
		s.Terms.Prefill = tokensTime(float64(input-s.CachedTokens), r.prefillRate(c))
		if r.usable(&c.Load) {
			s.sig = r.signalsOf(&c.Load)
		}
		if q, ok := r.queue(c, &s.sig); ok {
			s.Terms.Queue = q
			worstQueue = max(worstQueue, q)
		} else {
			s.LoadMissing = true
		}
		if !c.Ready || c.Stale {
			if r.cfg.Stale == StaleExclude {
				s.Excluded = true
				s.Reason = ReasonStale
				if !c.Ready {
					s.Reason = ReasonUnready
				}
			} else {
				s.Terms.Penalty = r.cfg.StalePenalty
			}
		}
		out.Ranked = append(out.Ranked, s)
	}
	for i := range out.Ranked {
		s := &out.Ranked[i]
		if s.LoadMissing {
			s.Terms.Queue = satAdd(worstQueue, r.cfg.MissingLoadPenalty)
		}
		if s.RTTUnknown {
			s.Terms.RTT = worstRTT
		}
		s.Cost = s.Terms.Sum()
	}

	rk := out.Ranked
	switch pol {
	case LLMD:
		scoreLLMD(rk)
	case SGLang:
		scoreSGLang(rk)
	case Dynamo:
		scoreDynamo(rk, input, bs, req.Blocks)
	}
	if pol == RoundRobin {
		// Order eligible lanes by lane number, then rotate by the counter.
		for i := range rk {
			rk[i].tie = uint64(rk[i].Lane)
		}
		sortRanked(rk, RoundRobin)
		n := 0
		for n < len(rk) && !rk[n].Excluded {
			n++
		}
		if n > 0 {
			rotate(rk[:n], int((r.rr.Add(1)-1)%uint64(n)))
		}
	} else {
		sortRanked(rk, pol)
	}
	if len(rk) == 0 || rk[0].Excluded {
		return
	}
	out.Best = 0
	if pol == SGLang {
		preferCache(rk, input)
	}
	if pol == Cost {
		preferAffinity(rk, r.cfg.AffinityMargin) // a negative margin never moves a lane
	}
	if pol == Cost && r.cfg.Temperature > 0 {
		out.Best = sample(rk, r.cfg.Temperature, mix(key^0xa0761d6478bd642f))
	}
}

// rtt is the candidate's RTT, false when none is given or configured.
func (r *Router) rtt(c *Candidate) (time.Duration, bool) {
	if c.RTTKnown {
		return clampTerm(c.RTT), true
	}
	if v, ok := r.cfg.RTT[c.DC]; ok {
		return clampTerm(v), true
	}
	if r.cfg.DefaultRTT > 0 {
		return min(r.cfg.DefaultRTT, MaxTerm), true
	}
	return 0, false
}

func (r *Router) prefillRate(c *Candidate) float64 {
	if c.PrefillTokensPerSec > 0 {
		return c.PrefillTokensPerSec
	}
	return r.cfg.DefaultPrefillTokensPerSec
}

// queueRate is the DC's rate of draining its queue: the candidate's, the
// configured one of its DC, its workers × the prefill rate, the default,
// or one worker's prefill rate, in that order.
func (r *Router) queueRate(c *Candidate) float64 {
	if c.QueueTokensPerSec > 0 {
		return c.QueueTokensPerSec
	}
	if v := r.cfg.QueueTokensPerSec[c.DC]; v > 0 {
		return v
	}
	if c.Load.Workers > 0 {
		return float64(c.Load.Workers) * r.prefillRate(c)
	}
	if r.cfg.DefaultQueueTokensPerSec > 0 {
		return r.cfg.DefaultQueueTokensPerSec
	}
	return r.prefillRate(c)
}

// usable reports whether a load report carries anything and is young enough.
func (r *Router) usable(l *LoadReport) bool {
	return l.Known() && (r.cfg.MaxLoadAge <= 0 || l.Age <= r.cfg.MaxLoadAge)
}

// queue is the candidate's queue term from its signals, false when its load
// is missing or too old.
func (r *Router) queue(c *Candidate, sg *signals) (time.Duration, bool) {
	if sg.known&(1<<sigQueued) != 0 {
		q := tokensTime(sg.v[sigQueued], r.queueRate(c))
		if c.Load.HasDecode {
			q = min(satAdd(q, mulTerm(c.Load.ActiveDecodeBlocks, r.cfg.DecodeBlockTime)), MaxTerm)
		}
		return q, true
	}
	if sg.known&(1<<sigKVUsed) != 0 {
		return time.Duration(sg.v[sigKVUsed] * float64(r.cfg.KVFullQueue)), true
	}
	return 0, false
}

// tokensTime is the time to process tokens (not negative) at perSec (> 0),
// at most MaxTerm.
func tokensTime(tokens, perSec float64) time.Duration {
	return time.Duration(min(tokens/perSec*float64(time.Second), float64(MaxTerm)))
}

// mulTerm is n × d (d not negative), at most MaxTerm.
func mulTerm(n uint64, d time.Duration) time.Duration {
	return time.Duration(min(float64(n)*float64(d), float64(MaxTerm)))
}

// clampTerm bounds a duration to [0, MaxTerm].
func clampTerm(d time.Duration) time.Duration { return min(max(d, 0), MaxTerm) }

// satAdd adds two non-negative durations, saturating at the largest one
// (a sum that wraps is below its operand).
func satAdd(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// less orders two scored candidates under a policy: eligible first, then
// (except under cost, which has it in its sum, and the orders that ignore
// it) the least penalty, then the policy's key, then the tie hash. Each key
// is compared both ways, so equal keys fall through to the next.
func less(a, b *Scored, pol Policy) bool {
	if a.Excluded != b.Excluded {
		return !a.Excluded
	}
	if pol != Cost && pol != RoundRobin && pol != Random {
		if r, ok := order(a.Terms.Penalty, b.Terms.Penalty); ok {
			return r
		}
	}
	var r, ok bool
	switch pol {
	case Cost:
		r, ok = order(a.Cost, b.Cost)
	case Prefix:
		r, ok = order(b.Depth, a.Depth)
	case Load:
		r, ok = order(satAdd(a.Terms.RTT, a.Terms.Queue), satAdd(b.Terms.RTT, b.Terms.Queue))
	case LLMD:
		r, ok = order(b.Score, a.Score)
	case SGLang, Dynamo:
		r, ok = order(a.Score, b.Score)
	}
	if ok {
		return r
	}
	return a.tie < b.tie
}

// order is whether x sorts before y by ascending value, and whether they
// differ at all.
func order[T int | float64 | time.Duration](x, y T) (before, differ bool) {
	if x < y {
		return true, true
	}
	if x > y {
		return false, true
	}
	return false, false
}

// sortRanked is an insertion sort: at most a few dozen lanes, no allocation.
func sortRanked(s []Scored, pol Policy) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && less(&s[j], &s[j-1], pol); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// preferAffinity moves to the front the eligible candidate with the deepest
// prefix (ties by the hash) when its cost is within margin of the cheapest,
// rk[0]; the rest keep their cost order.
func preferAffinity(rk []Scored, margin time.Duration) {
	a := deepest(rk, false)
	if rk[a].Cost-rk[0].Cost > margin {
		return
	}
	toFront(rk, a)
}

// deepest is the index of the eligible candidate with the deepest prefix,
// ties by the hash; with samePenalty, only among those with rk[0]'s penalty.
func deepest(rk []Scored, samePenalty bool) int {
	a := 0
	for i := 1; i < len(rk) && !rk[i].Excluded; i++ {
		if samePenalty && rk[i].Terms.Penalty != rk[0].Terms.Penalty {
			break
		}
		if rk[i].Depth > rk[a].Depth || (rk[i].Depth == rk[a].Depth && rk[i].tie < rk[a].tie) {
			a = i
		}
	}
	return a
}

// toFront moves rk[a] to the front, keeping the others' order.
func toFront(rk []Scored, a int) {
	for i := a; i > 0; i-- {
		rk[i], rk[i-1] = rk[i-1], rk[i]
	}
}

// rotate moves the first k elements of s to its end, keeping the order of
// both parts (k < len(s), a few dozen lanes at most).
func rotate(s []Scored, k int) {
	for range k {
		first := s[0]
		copy(s, s[1:])
		s[len(s)-1] = first
	}
}

// sample draws an eligible index from a softmax over −cost/temp, using u
// from the hash h. rk is sorted, so rk[0] has the lowest cost.
func sample(rk []Scored, temp time.Duration, h uint64) int {
	base := float64(rk[0].Cost)
	t := float64(temp)
	total := 0.0
	n := 0
	for n < len(rk) && !rk[n].Excluded {
		total += math.Exp(-(float64(rk[n].Cost) - base) / t)
		n++
	}
	u := float64(h>>11) / (1 << 53) * total
	for i := 0; i < n; i++ {
		u -= math.Exp(-(float64(rk[i].Cost) - base) / t)
		if u < 0 {
			return i
		}
	}
	return n - 1
}

// mix is SplitMix64's finalizer.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
