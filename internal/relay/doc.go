// Package relay is the per-DC relay-producer: it consumes worker KV events
// from JetStream, keeps the pool's exact ownership and CKF projection
// (pkg/producer), and publishes barrier snapshots, absolute bucket-image
// deltas, drain markers and heartbeats on the pool's lane subjects under a
// producer lease whose epoch fences every message.
//
// # What it guarantees
//
//   - One writer per lane. Only the holder of the pool's producer lease
//     publishes, every lane message carries the lease epoch, and every
//     publish expects the lane's last sequence, so a relay that lost its
//     lease (a zombie) cannot interleave with its successor. Any publish
//     failure ends the epoch (counted in ckf_relay_fences_total); the next
//     epoch starts from a fresh barrier snapshot.
//   - Every epoch starts exact. It restores the pool's checkpoint when one
//     is usable, replays the input stream after it (all of it without one),
//     and only then publishes a barrier snapshot and deltas. The rebuild
//     ends at what the input stream holds: input that retention or a purge
//     dropped is counted (ckf_relay_input_gap_messages_total,
//     ckf_relay_rebuild_tail_dropped_total) and logged, never waited for.
//   - Checkpoints are safe to restore. One is written only under a
//     confirmed lease, never when the restore would refuse the state
//     (skipped_over_budget), and never over a stored one this epoch could
//     not read (skipped_unread_checkpoint). Every outcome is a label of
//     ckf_relay_checkpoints_total.
//   - Bad input never stops the relay. It is counted and logged; the exact
//     state is bounded by Config.MaxTrackedBlocks (growth beyond it is
//     refused and reported as the tracked_blocks fault).
//
// # Concurrency
//
// Run is called once per Relay. It owns all mutable state (the epoch, the
// producer.State and Publisher, the lane position) on its goroutine, the
// actor: set-up, lease, rebuild, publishing and checkpoints happen there in
// turn. Each epoch starts helpers that only hand results to the actor: the
// lease keepalive, the input consumer's pump and, during a checkpoint, the
// object store upload; they end with the epoch's context, and the actor
// waits for the pump and the upload before it goes on. Status, Handler and
// the metrics are the only concurrent readers and are safe to call at any
// time (a mutex guards the status and the faults). Test hooks are set
// before Run.
package relay
