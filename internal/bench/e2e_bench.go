package bench

import (
	"context"
	"testing"
	"time"
)

// LatencyGap is the pause between two latency probes: a modest rate, well
// apart from the relays' publish interval.
const LatencyGap = 2 * time.Millisecond

// newBenchEnv starts an environment for one benchmark run and closes it
// with the benchmark.
func newBenchEnv(b *testing.B, pipeline bool) *Env {
	b.Helper()
	env, err := NewEnv(E2EConfig{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := env.Close(); err != nil {
			b.Error(err)
		}
	})
	if pipeline {
		if err := env.StartPipeline(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	return env
}

// reportThroughput reports events/s and sets ns/op to the measured time
// per request, excluding set-up and the untimed verification.
func reportThroughput(b *testing.B, t Throughput) {
	b.ReportMetric(t.EventsPerSec(), "events/s")
	b.ReportMetric(float64(t.Elapsed.Nanoseconds())/float64(b.N), "ns/request")
}

func reportLatency(b *testing.B, l Latency) {
	b.ReportMetric(float64(l.P50.Nanoseconds())/1e3, "p50_us")
	b.ReportMetric(float64(l.P99.Nanoseconds())/1e3, "p99_us")
	b.ReportMetric(float64(l.Mean.Nanoseconds())/1e3, "mean_us")
}

// EndToEndEvents replays b.N Mooncake requests over two DCs through
// JetStream: worker events → relays → lane stream → indexer, timed until
// the indexer installed every relay's final sequence.
func EndToEndEvents(b *testing.B) {
	env := newBenchEnv(b, true)
	batch, err := env.NextBatch(b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	t, err := env.Events(context.Background(), batch)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportThroughput(b, t)
}

// RawJetStreamEvents is EndToEndEvents' baseline: the same payloads
// through one stream and one pull consumer.
func RawJetStreamEvents(b *testing.B) {
	env := newBenchEnv(b, false)
	batch, err := env.NextBatch(b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	t, err := env.RawEvents(context.Background(), batch)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportThroughput(b, t)
}

// EventToQueryableLatency measures b.N probes, one at a time, from publish
// to queryable.
func EventToQueryableLatency(b *testing.B) {
	env := newBenchEnv(b, true)
	b.ResetTimer()
	l, err := env.Latency(context.Background(), b.N, LatencyGap)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportLatency(b, l)
}

// RawJetStreamLatency measures b.N single messages from publish to receipt.
func RawJetStreamLatency(b *testing.B) {
	env := newBenchEnv(b, false)
	b.ResetTimer()
	l, err := env.RawLatency(context.Background(), b.N, LatencyGap)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportLatency(b, l)
}
