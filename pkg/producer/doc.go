// Package producer is the DC-local side of the CKF pipeline (spec §5–§7):
// the bounded-kick cuckoo mutator on an owned lane, the exact ownership state
// of one pool (State, DcCkfState upstream) with its publication window, and
// the Publisher that sequences absolute bucket-image deltas onto a Sink.
//
// Concurrency: nothing here is safe for concurrent use. A State and its
// Publisher belong to one actor goroutine, exactly as upstream keeps them
// actor-owned; callers serialise every call.
package producer
