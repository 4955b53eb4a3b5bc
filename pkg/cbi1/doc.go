// Package cbi1 is the codec of CBI1 ("Cuckoo Bucket Images v1"), the payload
// of dynamo.kvrelay.v1 FilterUpdate frames of kind SNAPSHOT_CHUNK and DELTA
// (docs/kvrelay-v1.md §5). It is a wire contract shared with Dynamo: every byte
// offset, limit, checksum and check order here is fixed by that document, and
// the byte vectors V1–V5 of §8.3 pin it.
//
// A frame is a 48-byte little-endian header followed by a body:
//
//   - a snapshot chunk carries up to SnapshotChunkBuckets consecutive bucket
//     words of a lane; a lane of bucket_count buckets is sent as
//     ChunkCount(bucket_count) chunks that an Assembler turns back into the
//     full word table;
//   - a delta carries up to MaxDeltaImages absolute (bucket, word) images that
//     move a lane from base_epoch to the header epoch.
//
// The header checksum is the low 32 bits of unseeded XXH3-64 over the body.
//
// Contract of this package:
//
//   - Decoders treat every byte as untrusted. They bound the frame before
//     reading it, never read past the input, never panic, never allocate on
//     success, and report the first failed check of §5.1 as an *Error whose
//     Kind is errors.Is-able (one kind per check; ErrMalformed and ErrFormat
//     additionally match the groups Dynamo reports as Malformed and Format).
//   - Decoded Frames are views: their bodies alias the input slice, which the
//     caller must not modify while the view is in use.
//   - Encoders append to a caller buffer and validate their input first, so
//     they never emit a frame the decoder would reject. The delta encoder and
//     the delta decoder allocate nothing once the buffer has capacity.
//   - Nothing here knows about gRPC, sequences or producer identity; checking
//     a frame's dc_id and epoch against its envelope is the caller's job
//     (§4.4), and the Assembler only enforces chunk order within one snapshot.
package cbi1
