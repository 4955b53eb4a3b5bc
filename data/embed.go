// Package data ships the Mooncake conversation trace (Apache-2.0, see
// README.md) inside the binaries so the demo runs from anywhere.
package data

import _ "embed"

// MooncakeConversationTraceGz is the gzip-compressed JSONL trace.
//
//go:embed mooncake_conversation_trace.jsonl.gz
var MooncakeConversationTraceGz []byte
