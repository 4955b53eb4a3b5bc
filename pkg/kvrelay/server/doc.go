// Package server serves dynamo.kvrelay.v1.KvEventRelay (docs/kvrelay-v1.md)
// for the pools of one relay process: the six RPCs, the standard gRPC health
// service and reflection.
//
// Each pool comes from a Publication, which the relay implements: the
// current generation (descriptor and producer key, present only while the
// relay publishes), a consistent copy of the lane plus the deltas after it
// (Subscribe), and the pool's KV occupancy. New serves one publication;
// AddPool and RemovePool change the set at runtime (a pools manager calls
// them as pools start and stop). The catalog lists every published
// generation (a pool in standby or rebuilding is absent) and its revision
// moves when any of them, or the set, changes; readiness and load streams
// cover every published pool; SubscribeKvPool picks the pool by the
// requested producer key, and each pool has its own subscriber limit.
// The server owns everything of the protocol: admission in the order of
// §4.1, CBI1 snapshot chunks then contiguous deltas and heartbeats (§4.2),
// limits and bounded per-subscriber queues (§4.3, §8.4), catalog and
// readiness revisions with heartbeats (§6.1, §6.2) and the load windows
// (§6.3, §6.4).
//
// Concurrency: a Server is safe for concurrent use; every stream runs on its
// gRPC handler goroutine and the server starts no goroutine of its own
// besides gRPC's. A Publication's methods are called with the server's
// lock held, so they must not call back into the Server. A Fanout is safe
// for concurrent use: its producer side (Add, Publish, Close) is meant for
// the relay's actor goroutine, its Feeds are read by the stream goroutines.
package server
