// Package route picks the DC a request should go to, from what the indexer
// knows about each DC lane: how deep a prefix of the request it holds, how
// loaded it is, how far away it is and whether its answer is fresh.
//
// # The cost
//
// The cost policy ranks DCs by one estimate in units of time, the time to
// first token the request would see there, as the sum of four terms, each a
// non-negative duration of at most MaxTerm (the sum saturates, so a load
// report of any size can neither make a term negative nor wrap the cost):
//
//	RTT     the round trip from the router to the DC: the candidate's own
//	        value (a request override), else Config.RTT[dc], else a positive
//	        Config.DefaultRTT. A DC with none is RTTUnknown and charged the
//	        largest known RTT of the candidates, never 0; Config.MissingRTT
//	        names such DCs so a router can refuse them at start.
//	Queue   the time before the DC can start this prefill, from its load:
//	          serving load with active prefill tokens:
//	            active_prefill_tokens / queue_rate + decode_blocks × DecodeBlockTime
//	          serving load with request counts only:
//	            waiting × WaitingRequestTokens / queue_rate + decode_blocks × DecodeBlockTime
//	          KV occupancy only:  KVFullQueue × used / capacity
//	          no load, or load older than MaxLoadAge: the worst queue term of
//	            the candidates whose load is known, plus MissingLoadPenalty.
//	        Missing load is never read as zero load.
//	Prefill the tokens the DC does not hold, at its prefill rate:
//	          (input_tokens − depth × block_size) / prefill_rate
//	        (input_tokens is at least blocks × block_size, its default).
//	Penalty StalePenalty for a stale or unready lane under StalePenalize; an
//	        unready lane's depth counts as 0.
//
// queue_rate, the DC's aggregate rate of draining queued prefill, is the
// candidate's QueueTokensPerSec, else Config.QueueTokensPerSec[dc], else the
// load report's Workers × prefill_rate, else Config.DefaultQueueTokensPerSec,
// else prefill_rate (one worker). prefill_rate is the candidate's
// PrefillTokensPerSec (the speed of the one worker that runs the request),
// else Config.DefaultPrefillTokensPerSec.
//
// # Policies
//
// Every policy fills the same Decision, with every term computed for every
// candidate, so any decision can be explained and compared:
//
//	cost         lowest cost
//	prefix       deepest prefix (a penalized lane after the others)
//	load         lowest queue + RTT: least load, a step from the nearest DC
//	llm-d        llm-d's weighted scorers as BLIS configures them (baselines.go)
//	sglang       the SGLang model gateway's cache-aware policy (baselines.go)
//	dynamo       Dynamo's KV-router cost at temperature 0 (baselines.go)
//	round-robin  the next eligible lane, by a counter per Router
//	random       a uniform choice, from the request key
//
// Under StalePenalize every policy but cost (whose sum holds the penalty),
// round-robin and random ranks penalized lanes after the others.
//
// # Prefix affinity
//
// The cost policy keeps the DC holding the deepest prefix of the request
// (ties broken by the hash below) unless another DC's cost is lower by more
// than Config.AffinityMargin (default 400 ms; negative turns the rule off).
// This is SGLang's gateway rule, best prefix unless the load is imbalanced
// past a threshold, with the threshold in units of time. It does two things
// the bare minimum cost does not: a conversation stays where its cache is
// while that costs less than the margin, instead of moving for a small
// queue difference and leaving its prefix behind; and a new conversation,
// which every DC holds equally little of, goes to a DC chosen by its hash
// among those within the margin, so near DCs are not handed all of them.
// The margin is the most TTFT the rule will spend to keep a cache: about
// the prefill of a few thousand prompt tokens, and more than the spread of
// the RTTs of DCs a router sees. On the replayed Mooncake conversation
// trace (docs/benchmarks.md), 300 ms to 1 s all beat prefix-only routing's
// median and tail; 400 ms did best at every load.
//
// Ties are broken by a hash of the request key and the lane, so DCs that are
// equal are not all handed the same requests. The key of a prompt is KeyOf
// its sequence hashes (KeyHash), the same in the indexer, its replicas and
// internal/routesim. With Config.Temperature > 0 the cost policy samples
// its choice from a softmax over −cost/temperature (deterministic for the
// request key) instead of always taking the minimum.
//
// # Contract
//
//   - Route never allocates when out.Ranked has room for the candidates.
//   - A Router is safe for concurrent use; only round-robin has state.
//   - Excluded candidates are listed after the eligible ones, with a reason;
//     Best is −1 when none is eligible.
//   - Nothing here imports internal/ or any transport.
package route
