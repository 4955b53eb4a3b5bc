// Package routerevent is ckfrelay's input contract: the RouterEvent JSON a
// worker (or the engine bridge) publishes on the KVEVENTS stream, one
// RouterEvent object or an array of them per message, with Dynamo's serde
// shapes (externally tagged event data, serde names for storage tiers).
//
// DecodeRouterEvents is the reference decoder: strict, allocating, and the
// owner of every error message. DecodeRouterEventsInto accepts and rejects
// exactly the same inputs without allocating in steady state, for the
// relay's input loop. Both treat their input as untrusted: bounded nesting,
// no reads past the end, and an error rather than a panic.
//
// The subjects the events travel on are in pkg/wire; the stream that holds
// them is configured by pkg/streams.
package routerevent
