// Package kvrelay is the transport-free core of speaking dynamo.kvrelay.v1
// (docs/kvrelay-v1.md): identity derivation (§7), the receiver validation rules
// (§3.4), the frozen producer key (§3.2), the stateless per-frame checks of a
// SubscribeKvPool stream (§4.4) and the mapping of every error to a gRPC
// status code and kv-relay-error-reason trailer (§2.2).
//
// Contract:
//
//   - Nothing here opens a connection, starts a goroutine or keeps state
//     between calls. The gRPC server in the relay and the client in the
//     indexer call these functions; they own streams, limits and timers.
//   - Validation functions check the rules in the order the spec gives, so
//     the same input yields the same first error as Dynamo. They return a
//     *ValidationError whose Kind is errors.Is-able and which classifies
//     itself as unsupported (quarantine: unknown semantics, never read as a
//     default) or malformed (errors.Is(err, ErrUnsupported) / ErrMalformed).
//   - Server-side conditions that are not validation failures (pool not
//     found, producer changed, limits, lag, ...) are the Condition errors;
//     wrap them with %w to add a message. Status maps any error, wrapped or
//     not, to its code and reason; anything unrecognised is INTERNAL.
package kvrelay
