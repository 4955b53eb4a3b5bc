// Package follow is the lane engine of one domain, shared by the global
// indexer (internal/indexer) and pkg/client's Mirror: it follows the lane
// map of the domain, runs one lane runner per DC pool that bootstraps from
// the lane's latest barrier snapshot and then feeds the lane's deltas and
// drain markers into the shared consumer.Pool (docs/protocol.md, "Consumer
// (indexer) rules"; docs/design.md, "Consumer lane life cycle"), and
// answers prefix queries and routes (pkg/api's types) from its table. Lanes
// followed over dynamo.kvrelay.v1 (kvrelay.go), lane load (load.go) and the
// in-flight account of routes (inflight.go) join the same table. What a
// service serves next to its lanes, such as global-indexer's NATS micro
// endpoint, plugs in through Config.Attach; pkg/domains hosts one service
// per domain.
//
// Files: service.go (the service, lane set, pool and queries), lane.go (one
// lane's runner: bootstrap, consume, pool faults), bootstrap.go (latest
// marker, install, snapshot body fetch), handle.go (lane messages and the
// epoch gate), rebuild.go (pool rebuilds after worker failures).
//
// Lane contract
//
//   - A lane bootstraps from the latest snapshot marker on its .snap
//     subject, installs it under a fresh local lease and consumes the lane
//     from just after it. A marker is installed only after its body's
//     location, size and digest match what the marker declares.
//   - Every lane message passes one epoch gate (laneRunner.gate) before it
//     is acted on: traffic of another pool, or of the installed epoch under
//     another identity, is counted and skipped; traffic of an older epoch is
//     dropped, and a lane that sees only such traffic for
//     Config.SupersededFaultAfter reports superseded_traffic, leaves the
//     ready set and bootstraps again.
//   - A newer epoch counts only if the lease coordinator granted it. A
//     snapshot marker's epoch must be at or below the pool's epoch counter.
//     Any other message's epoch must be at or below the epoch of the
//     pool's lease record (the counter is used only while no record exists),
//     because a lost acquire race leaves the counter above every lease it
//     granted. Anything else is counted (MetricUngrantedEpoch) and skipped.
//   - A granted newer epoch's marker switches the lane to that epoch. Its
//     other traffic without its marker means the lane missed the marker. If
//     the lane holds a newer marker than the installed one, it bootstraps
//     from the latest. Otherwise bootstrapping would only meet the same
//     traffic again, so the lane leaves the ready set (awaiting_snapshot),
//     asks the relay for a snapshot, and skips and counts that traffic
//     (MetricNewerEpochWithoutMarker) until a newer epoch's marker arrives.
//   - Queries answer only for lanes in the ready set: a lane that cannot
//     vouch for its installed state fails closed.
//
// Concurrency contract
//
//   - One goroutine per lane (laneRunner.run) owns that lane's protocol
//     state: the current (identity, wire epoch, local lease), its ordered
//     consumer, its local assignment epochs and its caches of the granted
//     epochs. Nothing else touches them.
//   - Service.mu guards the lane set, the runners, the lazily built pool
//     (built once the format is known: from Config.Format or from the first
//     snapshot marker any lane reads) and its replacement. The current pool
//     generation is also published atomically so queries never take the
//     lock; every generation shares one consumer.Indexer.
//   - One dispatcher goroutine per pool generation reads pool.Faults() and
//     routes each fault, tagged with its generation, to its lane's runner
//     with a non-blocking send; the fault channel is best-effort, so runners
//     also poll the pool's admission state and worker health.
//   - A worker failure starts one rebuild goroutine for that generation
//     (rate limited, see rebuild.go); it swaps in a new pool under
//     Service.mu and closes the old generation's replaced channel, which
//     sends every runner back to bootstrap.
//   - Queries read only the indexer's ready mask and bucket words (the
//     seeds' weak-read contract) plus the published lane names.
//   - The attachment (Config.Attach) is built by New; Run calls its Start
//     once its subscriptions are made and its Stop once every runner has
//     returned, before the pool closes. It may call the query methods from
//     any goroutine in between, as any caller may.
package follow
