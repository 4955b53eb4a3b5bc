// Package inflight keeps the router's account of requests it has sent to a
// DC that the DC's load reports cannot show yet.
//
// A DC reports its load in windows (a relay every load interval, from
// engine scrapes every scrape interval). Between two windows a router that
// reads only the last window sees every DC exactly as loaded as it was, and
// sends every request of a burst to the same cheapest DC. The Ledger closes
// that gap: each route adds its request's prefill tokens to the chosen
// lane, due at route time + the RTT to that DC (when the request can have
// arrived there), and a load window of the lane observed at or after that
// instant covers the entry, which then leaves the account. What a route
// sees as a lane's load is the latest window plus the lane's pending
// tokens, summed with AddSat.
//
// # Use
//
// A router holds one Ledger over its lanes and, per request:
//
//	l.PendingInto(now, pending)          // every lane's uncovered tokens
//	inflight.Apply(&cand, pending[cand.Lane], waitingTokens, blockSize)
//	router.Route(req, cands, &dec)       // package route, unchanged
//	l.Record(&dec, inputTokens, now)     // unless the caller only asks
//
// and, per load window of a lane observed (on its clock) at w:
//
//	l.Cover(lane, w)
//
// A window whose prefill is an estimate from request counts (vLLM's and
// SGLang's /metrics give the waiting requests, not the prompts the running
// ones are still prefilling) covers with CoverPrefilling instead: each
// entry it covers stays in the lane's pending tokens, draining from its due
// instant at the rate given (one worker's prefill rate ÷ a slowdown, since
// the prompt shares its worker), until it has drained.
//
// Accounts from other routers sharing the DCs (indexer replicas) are added
// with Add at their receive time and the RTT they carry.
//
// # Bounds
//
//   - Each lane holds at most Config.MaxEntries entries; a route past that
//     drops the lane's oldest entry (counted in Stats.Dropped).
//   - An entry lives at most Config.MaxAge: when no window covers it by
//     then (the DC's load went missing, or its clock runs late), it expires
//     (Stats.Expired). The router's load age bound should not exceed it.
//   - A prefilling entry drains for at most Config.MaxAge from the window
//     that covered it, and a lane holds at most Config.MaxEntries of them
//     (past that, the one nearest to drained leaves first).
//   - An entry's tokens are capped at MaxTokens, so a lane's sum cannot
//     overflow (MaxEntries × MaxTokens < 2⁶³).
//
// # Times
//
// The Ledger keeps no clock: every method takes the instant it acts at,
// from the caller's clock (tests inject one). Entries are ordered by the
// instant they were added; an instant earlier than the last one added is
// taken as the last one, so a clock that steps back cannot reorder them.
// Times are compared through time.Time.Sub against the first instant the
// Ledger saw, so a monotonic clock reading is used when present.
//
// # Concurrency
//
// A Ledger is safe for concurrent use: one mutex guards it, held for O(1)
// on Add and Pending (plus the entries expiring, and O(log n) per drained
// prefilling entry) and for one pass over the lane's entries on Cover. No
// method allocates, except the first Add to a lane and the first
// CoverPrefilling of a lane, which allocate that lane's ring and its
// prefilling set once.
package inflight
