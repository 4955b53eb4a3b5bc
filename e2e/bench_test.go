package e2e

import (
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/bench"
)

// End-to-end benchmarks; each run starts its own embedded nats-server (and,
// for the pipeline, two relays and the indexer) outside the timed part.
// b.N counts replayed requests for the event pairs and single probes for
// the latency pairs, so fix it for comparable runs:
//
//	go test -run '^$' -bench . -benchtime 4000x ./e2e
//
// or run cmd/ckf-bench, which runs each pair against its baseline on one
// server and prints the ratios.

// BenchmarkEndToEndEvents: worker events → KVEVENTS → relay → lane stream
// → indexer applied (events/s).
func BenchmarkEndToEndEvents(b *testing.B) { bench.EndToEndEvents(b) }

// BenchmarkRawJetStreamEvents: the same payloads through one stream and one
// pull consumer (events/s).
func BenchmarkRawJetStreamEvents(b *testing.B) { bench.RawJetStreamEvents(b) }

// BenchmarkEventToQueryableLatency: one stored event at a time until the
// indexer answers it (p50_us, p99_us).
func BenchmarkEventToQueryableLatency(b *testing.B) { bench.EventToQueryableLatency(b) }

// BenchmarkRawJetStreamLatency: one message at a time from publish to pull
// consumer receipt (p50_us, p99_us).
func BenchmarkRawJetStreamLatency(b *testing.B) { bench.RawJetStreamLatency(b) }
