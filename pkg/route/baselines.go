package route

import "math"

// The baselines: the decisions of three routers a multi-DC deployment could
// run instead, each applied per DC (a DC is one of their workers), in their
// projects' default configuration, and fed the same load reports and prefix
// depths as the cost policy. They ignore the RTT, as their routers do.

// signals are the load figures the policies read from a usable report, each
// with a presence bit; a missing one is filled with the worst known value of
// the candidates (missing load is never read as zero load).
type signals struct {
	v     [nSignals]float64
	known uint8
}

const (
	// sigQueued: prompt tokens queued or in prefill (active prefill tokens,
	// else waiting requests × WaitingRequestTokens).
	sigQueued = iota
	// sigWaiting: requests waiting (the waiting count, else the queued
	// tokens in units of WaitingRequestTokens).
	sigWaiting
	// sigRequests: requests running or waiting.
	sigRequests
	// sigDecode: KV blocks of requests in decode.
	sigDecode
	// sigKVUsed: the KV cache's used fraction, in [0, 1].
	sigKVUsed
	nSignals
)

func (s *signals) set(i int, v float64) {
	s.v[i] = v
	s.known |= 1 << i
}

// signalsOf reads a usable load report.
func (r *Router) signalsOf(l *LoadReport) signals {
	var s signals
	per := r.cfg.WaitingRequestTokens
	switch {
	case l.HasPrefill:
		s.set(sigQueued, float64(l.ActivePrefillTokens))
	case l.HasRequests:
		s.set(sigQueued, float64(l.Waiting)*per)
	}
	switch {
	case l.HasRequests:
		s.set(sigWaiting, float64(l.Waiting))
		s.set(sigRequests, float64(l.Running)+float64(l.Waiting))
	case l.HasPrefill:
		s.set(sigWaiting, float64(l.ActivePrefillTokens)/per)
		s.set(sigRequests, float64(l.ActivePrefillTokens)/per)
	}
	if l.HasDecode {
		s.set(sigDecode, float64(l.ActiveDecodeBlocks))
	}
	if l.HasKV && l.KVCapacityBlocks > 0 {
		s.set(sigKVUsed, min(float64(l.KVUsedBlocks)/float64(l.KVCapacityBlocks), 1))
	}
	return s
}

// fillMissing gives every candidate's missing signal i the worst (largest)
// known value among the candidates, or 0 when none knows it.
func fillMissing(rk []Scored, i int) {
	worst := 0.0
	for k := range rk {
		if rk[k].sig.known&(1<<i) != 0 {
			worst = max(worst, rk[k].sig.v[i])
		}
	}
	for k := range rk {
		if rk[k].sig.known&(1<<i) == 0 {
			rk[k].sig.v[i] = worst
		}
	}
}

// llm-d's weighted scorers, as BLIS v0.7.15 configures its weighted
// routing by default for parity with llm-d: a precise prefix-cache scorer
// of weight 2, a queue-depth scorer of weight 1 and a KV-utilization scorer
// of weight 1, the weights normalized to sum to 1.
const (
	LLMDPrefixWeight = 2.0
	LLMDQueueWeight  = 1.0
	LLMDKVWeight     = 1.0
)

// scoreLLMD sets each candidate's Score to llm-d's weighted score in [0, 1]
// (higher is better). Each scorer gives every eligible candidate a value in
// [0, 1]: the prefix scorer min-max normalizes the cached blocks (more is
// better), the queue scorer min-max normalizes the waiting requests (fewer
// is better), both giving 1 to all when all are equal; the KV scorer is
// 1 − the used fraction of the KV cache. A DC whose KV occupancy is unknown
// scores 0 there (as a full cache).
func scoreLLMD(rk []Scored) {
	fillMissing(rk, sigWaiting)
	depthMin, depthMax := math.MaxInt, math.MinInt
	waitMin, waitMax := math.Inf(1), math.Inf(-1)
	for i := range rk {
		if rk[i].Excluded {
			continue
		}
		depthMin, depthMax = min(depthMin, rk[i].Depth), max(depthMax, rk[i].Depth)
		w := rk[i].sig.v[sigWaiting]
		waitMin, waitMax = min(waitMin, w), max(waitMax, w)
	}
	const total = LLMDPrefixWeight + LLMDQueueWeight + LLMDKVWeight
	for i := range rk {
		s := &rk[i]
		prefix, queue, kv := 1.0, 1.0, 0.0
		if depthMax > depthMin {
			prefix = float64(s.Depth-depthMin) / float64(depthMax-depthMin)
		}
		if waitMax > waitMin {
			queue = (waitMax - s.sig.v[sigWaiting]) / (waitMax - waitMin)
		}
		if s.sig.known&(1<<sigKVUsed) != 0 {
			kv = 1 - s.sig.v[sigKVUsed]
		}
		s.Score = (LLMDPrefixWeight*clamp01(prefix) + LLMDQueueWeight*clamp01(queue) + LLMDKVWeight*kv) / total
	}
}

func clamp01(v float64) float64 { return min(max(v, 0), 1) }

// The SGLang model gateway's cache-aware policy, with its documented
// defaults (--cache-threshold 0.3, --balance-abs-threshold 64,
// --balance-rel-threshold 1.5).
const (
	SGLangCacheThreshold      = 0.3
	SGLangBalanceAbsThreshold = 64.0
	SGLangBalanceRelThreshold = 1.5
)

// scoreSGLang sets each candidate's Score to its load as SGLang's gateway
// counts it, the requests running or waiting there (from the request
// counts, else the queued tokens in units of WaitingRequestTokens); the
// ranking is then by least load, and preferCache applies the cache rule.
func scoreSGLang(rk []Scored) {
	fillMissing(rk, sigRequests)
	for i := range rk {
		rk[i].Score = rk[i].sig.v[sigRequests]
	}
}

// preferCache is the gateway's choice on rk sorted by load: when the loads
// are balanced (not both max − min > the absolute threshold and max > the
// relative threshold × min), the candidate with the best prefix match goes
// first if its match ratio (cached / input tokens) exceeds the cache
// threshold; otherwise the least loaded stays first. A penalized lane is
// only chosen as the others are.
func preferCache(rk []Scored, input int) {
	n := 0
	for n < len(rk) && !rk[n].Excluded && rk[n].Terms.Penalty == rk[0].Terms.Penalty {
		n++
	}
	lo, hi := rk[0].Score, rk[n-1].Score
	if hi-lo > SGLangBalanceAbsThreshold && hi > SGLangBalanceRelThreshold*lo {
		return
	}
	a := deepest(rk, true)
	if float64(rk[a].CachedTokens) > SGLangCacheThreshold*float64(input) {
		toFront(rk, a)
	}
}

// DynamoOverlapWeight is Dynamo's KV router's default overlap score weight,
// the weight of the prefill blocks in its cost.
const DynamoOverlapWeight = 1.0

// scoreDynamo sets each candidate's Score to Dynamo's KV-router logit, in
// blocks (lower is better, temperature 0: the minimum, ties by the hash):
// the overlap weight × the prefill blocks the DC would have (its queued
// prompt tokens plus the request's uncached ones, over the block size) plus
// the decode blocks it would hold (its active decode blocks plus the
// request's blocks).
func scoreDynamo(rk []Scored, input, blockSize, blocks int) {
	fillMissing(rk, sigQueued)
	fillMissing(rk, sigDecode)
	bs := float64(blockSize)
	for i := range rk {
		s := &rk[i]
		prefill := (s.sig.v[sigQueued] + float64(input-s.CachedTokens)) / bs
		s.Score = DynamoOverlapWeight*prefill + s.sig.v[sigDecode] + float64(blocks)
	}
}
