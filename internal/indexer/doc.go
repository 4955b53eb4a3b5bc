// Package indexer is the global-indexer service: it follows the lane map of
// one domain, runs one lane runner per DC pool that bootstraps from the
// lane's latest barrier snapshot and then feeds the lane's deltas and drain
// markers into the shared consumer.Pool (docs: notes/protocol.md, "Consumer
// (indexer) rules"; DESIGN.md, "Consumer lane life cycle"), and answers
// prefix queries over HTTP (pkg/api) and a NATS micro endpoint.
//
// Concurrency contract
//
//   - One goroutine per lane (laneRunner.run) owns that lane's protocol
//     state: the current (identity, wire epoch, local lease), its ordered
//     consumer and its local assignment epochs. Nothing else touches them.
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
package indexer
