// Package lease coordinates DC pools and their producers through one
// JetStream KV bucket (DefaultBucket):
//
//	lanes.<domain>          lane map: which pool owns which of the 16 lanes
//	lease.<domain>.<dc>     producer lease: owner, producer identity, epoch, expiry
//	epoch.<domain>.<dc>     epoch counter; never deleted, so epochs never go back
//	snapreq.<domain>.<dc>   snapshot request counter, watched by the producer
//
// Every write is a compare-and-set on the key's latest revision. Exactly one
// relay holds a pool's lease at a time; taking it bumps the epoch counter,
// and the epoch is the fencing token stamped into every message. A relay
// holds it through a Session (Coordinator.NewSession), which owns the
// goroutine renewing it; Session.Close releases it for a standby to take
// at once, Session.Orphan lets it lapse. A relay whose renewal fails stops
// publishing at once (Session.Done closes).
//
// No peer's clock decides who holds a lease. Lease keys carry a per-key TTL
// that the server enforces (nats-server 2.11 per-message TTLs): a standby
// takes a lease only when its key is gone or ends in a marker, and the
// holder stops trusting it by its own monotonic clock, TTL after the start
// of its last successful write, which is never after the server's expiry.
// Epoch counters, lane maps and snapshot requests carry no TTL.
package lease
