package inflight

import (
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/route"
)

// The two calls a router makes around route.Router.Route: Apply before
// (each candidate's load plus its lane's pending tokens), Record after (the
// chosen lane takes the request's tokens). The indexer, the Mirror and the
// benchmark's simulator all route through these.

// Apply adds pending prefill tokens to a candidate's load, keeping the
// queue term monotone in them whatever the load reports:
//
//   - prompt tokens to prefill (HasPrefill): they add, saturating;
//   - request counts only: the counts' tokens (waiting × waitingTokens, the
//     router's Config.WaitingRequestTokens) plus pending become the prefill
//     tokens, marked PrefillEstimated, so pending 0 leaves the queue term
//     as it was;
//   - KV occupancy only: the pending tokens' blocks (blockSize tokens each)
//     add to the used blocks, up to the capacity;
//   - no load: nothing (missing load stays missing, never zero plus pending).
func Apply(c *route.Candidate, pending uint64, waitingTokens float64, blockSize int) {
	l := &c.Load
	if pending == 0 {
		return
	}
	if l.HasPrefill {
		l.ActivePrefillTokens = AddSat(l.ActivePrefillTokens, pending)
	} else if l.HasRequests {
		// Made from the counts, so an estimate as the bridge's is.
		l.HasPrefill, l.PrefillEstimated = true, true
		l.ActivePrefillTokens = AddSat(tokensOf(l.Waiting, waitingTokens), pending)
	} else if l.HasKV && l.KVCapacityBlocks > 0 {
		bs := uint64(max(blockSize, 1))
		blocks := pending/bs + min(pending%bs, 1)
		l.KVUsedBlocks = min(AddSat(l.KVUsedBlocks, blocks), l.KVCapacityBlocks)
	}
}

// tokensOf is waiting × per, saturating (per ≤ 0 reads as 0).
func tokensOf(waiting uint64, per float64) uint64 {
	if !(per > 0) {
		return 0
	}
	v := float64(waiting) * per
	if v >= 1<<64 {
		return 1<<64 - 1
	}
	return uint64(v)
}

// Charge is what a decision accounts: the chosen lane, the prompt tokens it
// does not hold (the decision's input tokens less its cached tokens), and
// the RTT the decision used for it. ok is false when no lane was chosen or
// the lane holds the whole prompt.
func Charge(d *route.Decision, inputTokens int) (lane int, tokens uint64, rtt time.Duration, ok bool) {
	c := d.Chosen()
	if c == nil || inputTokens <= c.CachedTokens {
		return 0, 0, 0, false
	}
	return c.Lane, uint64(inputTokens - c.CachedTokens), c.Terms.RTT, true
}

// Record adds Charge(d, inputTokens) to the ledger at now, and returns
// whether it added an entry.
func (l *Ledger) Record(d *route.Decision, inputTokens int, now time.Time) bool {
	lane, tokens, rtt, ok := Charge(d, inputTokens)
	return ok && l.Add(lane, tokens, now, rtt)
}
