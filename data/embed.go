// Package data ships the Mooncake conversation and synthetic traces
// (Apache-2.0, see README.md) inside the binaries so the demo and the
// routing benchmark run from anywhere.
package data

import _ "embed"

// MooncakeConversationTraceGz is the gzip-compressed JSONL trace.
//
//go:embed mooncake_conversation_trace.jsonl.gz
var MooncakeConversationTraceGz []byte

// MooncakeSyntheticTraceGz is Mooncake's synthetic trace, gzip-compressed
// JSONL in the same form: the routing benchmark's held-out trace.
//
//go:embed mooncake_synthetic_trace.jsonl.gz
var MooncakeSyntheticTraceGz []byte
