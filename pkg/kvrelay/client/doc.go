// Package client is the consumer side of dynamo.kvrelay.v1 (docs/kvrelay.md,
// spec §4.4): a Follower mirrors the CKF lane of one pool of one relay into a
// LaneSink.
//
// A Follower runs "connection epochs" as Dynamo's global-view coordinator
// does. An epoch watches the relay's catalog (WatchKvPoolCatalog), selects
// the sole descriptor that registers the configured model and declares the
// AGGREGATED role (or, when allowed, LEGACY), subscribes to that producer's
// pool stream (SubscribeKvPool), assembles its CBI1 snapshot (pkg/cbi1) and
// applies its contiguous deltas. Every frame passes kvrelay.CheckFilterUpdate
// and the stream-state rules of §4.4 (one relay identity, chunks only before
// installation, deltas only at the installed sequence, heartbeats only after
// installation and at it).
//
// Failing closed: any invalid stream state (gap, wrong producer, bad
// checksum, out-of-order chunk, a producer change in the catalog, a lagged or
// limited subscriber, a stalled or ended stream, any error) makes the
// Follower call LaneSink.Invalidate before anything else, so the lane leaves
// the ready set at once; only then does it resubscribe. Resubscribing waits
// with equal-jitter exponential backoff from Config.BackoffMin (500 ms) to
// Config.BackoffMax (30 s), reset after an epoch that lasted BackoffMax. A
// selected producer replaced in the catalog (a takeover) is followed at once.
//
// Concurrency contract
//
//   - Run owns every goroutine it starts and returns only after they ended.
//   - The sink's methods are called from one goroutine at a time, never
//     concurrently, in the order Admit → Install → (Apply | Heartbeat)* →
//     Invalidate; after Invalidate the next call is Admit or Install of a
//     new stream. Invalidate may also come without a preceding Install.
//   - Status may be called from any goroutine.
package client
