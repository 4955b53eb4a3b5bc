// Package kvrelayv1 holds the generated Go bindings of Dynamo's multi-DC KV
// relay protocol, protobuf package dynamo.kvrelay.v1 (service KvEventRelay).
//
// The contract is the wire: relay.proto is a transcription of
// docs/kvrelay-v1.md §3, and its field numbers, types, enum values
// and method names must stay byte-compatible with Dynamo 1.6–1.7. Edit
// relay.proto only additively (§2.1) and regenerate with scripts/gen-proto.sh;
// never edit the .pb.go files by hand.
//
// The generated types carry no semantics beyond protobuf decoding: the
// receiver validation rules of §3.4 live in internal/kvrelay, and the CBI1
// bytes carried in FilterUpdate.payload are decoded by pkg/cbi1.
package kvrelayv1

// ContractMarker is the value every top-level request and response carries in
// field 127 (ASCII "KVR1" read big-endian). A different value means a
// different contract, not a newer revision of this one.
const ContractMarker uint32 = 0x4B565231

// ProtocolVersion is the value of protocol_version in every response.
const ProtocolVersion uint32 = 1

// PoolIdentityVersion is the only KvPoolId.identity_version v1 defines. It is
// versioned separately from ProtocolVersion.
const PoolIdentityVersion uint32 = 1

// ErrorReasonTrailer is the ASCII trailing-metadata key whose value is the
// exact RelayErrorReason value name of an application error.
const ErrorReasonTrailer = "kv-relay-error-reason"
