// Package prefillest estimates the prompt tokens a DC still has to prefill
// when its engines report request counts but not tokens, as vLLM's and
// SGLang's Prometheus endpoints do.
//
// Those endpoints give a gauge of waiting requests and two counters over
// finished requests: their prompt tokens and their number (vLLM:
// vllm:request_prompt_tokens_sum and _count, or vllm:prompt_tokens_total
// and vllm:request_success_total; SGLang: sglang:prompt_tokens_total and
// sglang:num_requests_total). The estimate is
//
//	pending prefill = waiting × mean prompt tokens
//
// The Estimator's mean follows the finished requests with a weight of
// 1/MeanWindow each (an exponentially weighted mean over about the last
// MeanWindow requests): a scrape interval sees few requests finish, and a
// mean over those alone would scale a DC's whole queue by one request's
// prompt. Mean gives the mean of one interval: the counters' deltas, else
// the previous mean, else the counters' lifetime mean, else Fallback
// tokens. The router adds its own in-flight account (package inflight) to
// the estimate, as to any other load.
//
// Everything here is a pure function or a value type: the product's
// engine bridge and the benchmark's simulator compute the same estimate.
package prefillest

import "math"

// Fallback is the mean prompt assumed before any request has finished:
// the router's default tokens per waiting request.
const Fallback = 1024

// MeanWindow is how many finished requests the Estimator's mean follows:
// each weighs 1/MeanWindow. Chosen on the benchmark's conversation trace
// (docs/benchmarks.md): 8 to 64 gave the same routing, the mean of one
// scrape interval a worse one.
const MeanWindow = 16

// MaxMeanPrompt bounds a mean prompt length (tokens): counters that say
// more are taken as corrupt.
const MaxMeanPrompt = 1 << 24

// Counters are an engine's cumulative counters over finished requests.
type Counters struct {
	PromptTokens float64
	Requests     float64
}

// valid reports whether c can be read: finite, non-negative.
func (c Counters) valid() bool {
	return c.PromptTokens >= 0 && c.Requests >= 0 && !math.IsInf(c.PromptTokens, 0) && !math.IsInf(c.Requests, 0)
}

// Mean is the mean prompt tokens of the requests finished between prev and
// cur, when some finished; else last when positive; else cur's lifetime
// mean when cur counts requests; else Fallback. A counter that went down
// (the engine restarted) gives no delta, so last is kept. Counters that are
// negative, infinite or NaN give last (or Fallback). The result is in
// 1..MaxMeanPrompt.
func Mean(prev, cur Counters, last float64) float64 {
	m := 0.0
	if cur.valid() {
		if prev.valid() && cur.Requests > prev.Requests && cur.PromptTokens >= prev.PromptTokens {
			m = (cur.PromptTokens - prev.PromptTokens) / (cur.Requests - prev.Requests)
		} else if last > 0 && !math.IsInf(last, 0) {
			m = last
		} else if cur.Requests > 0 {
			m = cur.PromptTokens / cur.Requests
		}
	}
	if !(m >= 1) { // NaN, 0 or below one token
		if last >= 1 && last <= MaxMeanPrompt {
			return last
		}
		return Fallback
	}
	return min(m, MaxMeanPrompt)
}

// Pending is waiting × mean, rounded, saturating at the uint64 maximum; a
// mean outside 1..MaxMeanPrompt reads as Fallback.
func Pending(waiting uint64, mean float64) uint64 {
	if !(mean >= 1 && mean <= MaxMeanPrompt) {
		mean = Fallback
	}
	v := math.Round(float64(waiting) * mean)
	if v >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(v)
}

// Smooth moves the mean last towards m, the mean of n newly finished
// requests, each weighing 1/MeanWindow: the weight of the n together is
// 1 − (1 − 1/MeanWindow)^n. A last outside 1..MaxMeanPrompt, or n not
// positive, gives m; the result is in 1..MaxMeanPrompt when m is.
func Smooth(last, m, n float64) float64 {
	if !(last >= 1 && last <= MaxMeanPrompt) || !(n > 0) {
		return m
	}
	a := 1 - math.Pow(1-1.0/MeanWindow, min(n, 1<<20))
	return min(max(last+a*(m-last), 1), MaxMeanPrompt)
}

// Estimator follows one engine's counters from reading to reading. The
// zero value is ready; it is not safe for concurrent use.
type Estimator struct {
	prev Counters
	mean float64
	seen bool
	// measured: mean came from finished requests, not from Fallback.
	measured bool
}

// Observe takes a reading of the counters (ok false: the engine does not
// serve them this time) and the waiting gauge, and returns the pending
// prefill estimate. The requests finished since the last reading move the
// mean by Smooth once a mean has been measured; the first measured mean
// (the first delta, or the lifetime mean of the first reading) is taken as
// it is.
func (e *Estimator) Observe(waiting uint64, c Counters, ok bool) uint64 {
	if ok {
		prev := c
		if e.seen {
			prev = e.prev
		}
		m := Mean(prev, c, e.mean)
		if e.measured {
			// Without a valid delta Mean gives the last mean back, which
			// Smooth leaves as it is; a count that is not a number gives m.
			m = Smooth(e.mean, m, c.Requests-prev.Requests)
		}
		e.mean = m
		e.measured = e.measured || (c.valid() && c.Requests > 0)
		e.prev, e.seen = c, true
	}
	return Pending(waiting, e.mean)
}

// MeanPrompt is the mean the last Observe used (0 before any counters).
func (e *Estimator) MeanPrompt() float64 { return e.mean }
