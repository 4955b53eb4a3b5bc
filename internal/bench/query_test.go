package bench

import (
	"context"
	"testing"
	"time"
)

// TestQueryPathsMeasureEveryPath runs the query-path pairs small: every
// path answers, both sides are timed, and the answer size is the real one.
func TestQueryPathsMeasureEveryPath(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a pipeline")
	}
	env, err := NewEnv(E2EConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Close(); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := env.StartPipeline(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := env.NextBatch(200)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Events(ctx, b); err != nil {
		t.Fatal(err)
	}
	paths, err := env.QueryPaths(ctx, QueryConfig{Requests: 300, Warmup: 20, Round: 50})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"http json", "http binary", "nats json", "mirror", "http route"}
	if len(paths) != len(want) {
		t.Fatalf("paths %+v", paths)
	}
	if paths[3].TableBytes == 0 {
		t.Fatal("mirror table size not reported")
	}
	for i, p := range paths {
		if p.Name != want[i] || p.P50Ns <= 0 || p.P99Ns < p.P50Ns || p.BaseP50 <= 0 || p.BaseP99 < p.BaseP50 || p.Bytes < 50 {
			t.Fatalf("path %d: %+v", i, p)
		}
		t.Logf("%-12s p50 %6.1fµs p99 %6.1fµs | baseline p50 %6.1fµs p99 %6.1fµs | %d B", p.Name, p.P50Ns/1e3, p.P99Ns/1e3, p.BaseP50/1e3, p.BaseP99/1e3, p.Bytes)
	}
}

// BenchmarkQueryPaths is for profiling the query surface:
//
//	go test -run '^$' -bench QueryPaths -benchtime 1x -cpuprofile /tmp/q.prof ./internal/bench
func BenchmarkQueryPaths(b *testing.B) {
	env, err := NewEnv(E2EConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer env.Close()
	ctx := context.Background()
	if err := env.StartPipeline(ctx); err != nil {
		b.Fatal(err)
	}
	batch, err := env.NextBatch(2000)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := env.Events(ctx, batch); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		paths, err := env.QueryPaths(ctx, QueryConfig{})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range paths {
			b.Logf("%-12s p50 %6.1fµs p99 %6.1fµs | baseline p50 %6.1fµs p99 %6.1fµs | %d B", p.Name, p.P50Ns/1e3, p.P99Ns/1e3, p.BaseP50/1e3, p.BaseP99/1e3, p.Bytes)
		}
	}
}
