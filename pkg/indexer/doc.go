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
//   - Service.mu guards the lane set, the runners and the lazily built pool
//     (built once the format is known: from Config.Format or from the first
//     snapshot marker any lane reads). The pool pointer is also published
//     atomically so queries never take the lock.
//   - One dispatcher goroutine reads pool.Faults() and routes each fault to
//     its lane's runner with a non-blocking send; the fault channel is
//     best-effort, so runners also poll the pool's admission state.
//   - Queries read only the indexer's ready mask and bucket words (the
//     seeds' weak-read contract) plus the published lane names.
package indexer
