package bench

import (
	"context"
	"os"
	"testing"
)

// generatorChildEnv makes this test binary the external load generator
// (see TestMain).
const generatorChildEnv = "CKF_BENCH_GENERATOR_CHILD"

// The throughput pair published from a separate process: every event
// reaches its relay and the indexer (Events checks the answers), the
// generator reports its own CPU time, and this process's CPU time no
// longer holds the publishing.
func TestAnExternalGeneratorCarriesTheThroughputPair(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server, the pipeline and a generator process")
	}
	t.Setenv(generatorChildEnv, "1")
	env, err := NewEnv(E2EConfig{Seed: 3, Generator: []string{os.Args[0]}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	if err := env.StartPipeline(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a second batch replaces the generator's first
		b, err := env.NextBatch(300)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := env.RawEvents(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := env.Events(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if raw.Events != b.Events || sub.Events != b.Events {
			t.Fatalf("raw %d, pipeline %d events of %d", raw.Events, sub.Events, b.Events)
		}
		if raw.GeneratorCPU <= 0 || sub.GeneratorCPU <= 0 {
			t.Fatalf("generator CPU raw %s, pipeline %s", raw.GeneratorCPU, sub.GeneratorCPU)
		}
		if sub.LaneDeltas <= 0 || sub.LaneDeltas > b.Events {
			t.Fatalf("%d lane deltas for %d events", sub.LaneDeltas, b.Events)
		}
	}
}
