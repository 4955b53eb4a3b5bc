// Package wire is the NATS wire format of ckfrelay: the msgpack messages a
// relay publishes on a pool's lane subjects, the Object Store body of a
// barrier snapshot, subject and bucket names, and message headers.
//
// # Message layout
//
// Every message is one msgpack array whose first two elements are the wire
// version ([WireVersion]) and the message kind ([MessageKind]); the remaining
// elements are positional:
//
//	Delta          [1, 1, identity, lease, base_sequence, sequence, images]
//	SnapshotMarker [1, 2, identity, lease, sequence, bucket_count,
//	                object_bucket, object_name, digest, size]
//	DrainMarker    [1, 3, identity, lease, expected_sequence]
//	Heartbeat      [1, 4, identity, lease, sequence, relay_instance, unix_nanos]
//
//	identity = [cache_semantics_digest bin16, cache_semantics_source,
//	            routing_scope_digest bin16, routing_scope_source, dc_id,
//	            producer_incarnation, layout_generation,
//	            [format_version, seed, bucket_count, fingerprint_bits, slots_per_bucket]]
//	lease    = [epoch, relay_instance]
//
// images is a bin of 12-byte records (bucket u32 LE, value u64 LE) in strictly
// ascending bucket order; digest is a bin of the 32-byte SHA-256 of the
// snapshot body object. Integers, lengths and strings always use the smallest
// msgpack encoding (the one msgpack.Encoder.EncodeUint/EncodeArrayLen/
// EncodeString/EncodeBytes produce), so every accepted message has exactly one
// encoding: decoding then re-encoding reproduces the input bytes.
//
// # Strictness
//
// Decoders reject, with a *DecodeError whose Kind is one of the ErrorKind
// constants, anything the encoder would not have produced: another version or
// kind, wrong element counts or types, non-minimal encodings, unknown enum
// values, unsupported CKF formats, oversize or truncated input, images that
// are out of range, duplicated or unordered, non-contiguous sequences and
// trailing bytes. Lengths read from the input are checked against the limits
// in limits.go and against the remaining input before anything is allocated.
//
// Encoders run the same checks and return a *EncodeError, so a relay cannot
// publish a message its consumers would refuse.
package wire
