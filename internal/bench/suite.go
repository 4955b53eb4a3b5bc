package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// Suite names accepted by SuiteConfig.Only.
const (
	SuiteSearch   = "search"
	SuiteProducer = "producer"
	SuitePool     = "pool"
	SuiteE2E      = "e2e"
	// SuiteQuery times the query surface (HTTP JSON and binary, NATS)
	// against bare transports answering the same size.
	SuiteQuery = "query"
	// SuiteScale is opt-in (minutes at Dynamo's shape): it runs only when
	// named in Only.
	SuiteScale = "scale"
)

// Suites lists the default suites in run order.
func Suites() []string { return []string{SuiteSearch, SuiteProducer, SuitePool, SuiteE2E, SuiteQuery} }

// AllSuites lists every suite, the opt-in ones last.
func AllSuites() []string { return append(Suites(), SuiteScale) }

// SuiteConfig selects and sizes the pairs RunSuite runs.
type SuiteConfig struct {
	// Only lists the suites to run (nil: all of Suites()).
	Only     []string
	Search   SearchConfig
	Producer ProducerConfig
	Pool     PoolBenchConfig
	E2E      E2EConfig
	Scale    ScaleConfig
	Query    QueryConfig
	// Rates is the e2e suite's paced sweep; NoRates skips it.
	Rates   RateConfig
	NoRates bool
	// E2ERequests is the number of replayed requests of the throughput
	// pair (default 4000); E2ERepeat how many times the pair runs (default
	// 1), on fresh batches.
	E2ERequests int
	E2ERepeat   int
	// LatencySamples is the number of probes of each latency side
	// (default 300); LatencyGap the pause between probes (default LatencyGap).
	LatencySamples int
	LatencyGap     time.Duration
	// Benchmark runs one body (default testing.Benchmark).
	Benchmark func(func(*testing.B)) testing.BenchmarkResult
	// Progress, when set, is told what is about to run.
	Progress func(format string, args ...any)
}

// Description names what the two sides of a suite are.
type Description struct {
	Suite    string `json:"suite"`
	Subject  string `json:"subject"`
	Baseline string `json:"baseline"`
}

// Report is RunSuite's outcome.
type Report struct {
	Pairs   []Description  `json:"pairs"`
	Metrics []Metric       `json:"metrics"`
	Info    map[string]any `json:"info"`
	// Scale is the scale suite's outcome (nil unless it ran).
	Scale *ScaleReport `json:"scale,omitempty"`
	// E2ERates is the e2e suite's paced sweep, one entry per input rate.
	E2ERates []E2ERate `json:"e2e_rates,omitempty"`
}

func (c SuiteConfig) withDefaults() SuiteConfig {
	if c.Only == nil {
		c.Only = Suites()
	}
	if c.E2ERequests == 0 {
		c.E2ERequests = 4000
	}
	if c.LatencySamples == 0 {
		c.LatencySamples = 300
	}
	if c.LatencyGap == 0 {
		c.LatencyGap = LatencyGap
	}
	if c.Benchmark == nil {
		c.Benchmark = testing.Benchmark
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	c.Search = c.Search.withDefaults()
	c.Producer = c.Producer.withDefaults()
	c.Pool = c.Pool.withDefaults()
	c.E2E = c.E2E.withDefaults()
	return c
}

// ValidateSuites reports an unknown suite name.
func ValidateSuites(names []string) error {
	for _, n := range names {
		if !slices.Contains(AllSuites(), n) {
			return fmt.Errorf("bench: unknown suite %q (want %v)", n, AllSuites())
		}
	}
	return nil
}

// RunSuite runs the selected pairs one after the other and returns their
// rows. A benchmark body that fails makes RunSuite fail (testing.Benchmark
// reports a failed body as an empty result).
func RunSuite(ctx context.Context, cfg SuiteConfig) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := ValidateSuites(cfg.Only); err != nil {
		return nil, err
	}
	rep := &Report{Info: map[string]any{}}
	run := func(name string, body func(*testing.B)) (testing.BenchmarkResult, error) {
		cfg.Progress("running %s", name)
		r := cfg.Benchmark(body)
		if r.N == 0 {
			// testing.Benchmark discards a failed body's log.
			return r, fmt.Errorf("bench: %s failed; `go test -run ^$ -bench . ./internal/bench` shows why", name)
		}
		return r, nil
	}
	pair := func(p Pair) (s, b testing.BenchmarkResult, err error) {
		if s, err = run(p.Name+" subject", p.Subject); err != nil {
			return
		}
		b, err = run(p.Name+" baseline", p.Baseline)
		return
	}
	for _, suite := range AllSuites() {
		if !slices.Contains(cfg.Only, suite) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		switch suite {
		case SuiteSearch:
			cfg.Progress("search: building two %d-bucket 16-lane tables and %d queries", cfg.Search.Buckets, cfg.Search.Queries)
			fx, err := NewSearchFixture(cfg.Search)
			if err != nil {
				return rep, err
			}
			defer fx.Close()
			sc := fx.Config()
			for _, set := range []struct {
				name string
				n    int
			}{{"hot", sc.HotQueries}, {"cold", sc.Queries}} {
				s, b, err := pair(fx.Pair("search "+set.name, set.n))
				if err != nil {
					return rep, err
				}
				rep.Pairs = append(rep.Pairs, Description{suite + "/" + set.name,
					fmt.Sprintf("consumer FindPrefixMatches, 16 ready lanes, %d buckets, %d-block queries cycling through %d distinct, lanes hold each chain to a random depth in 0..%d", sc.Buckets, sc.Blocks, set.n, sc.ChainBlocks),
					"linear probe of every position on every lane, same table, same queries"})
				name := "search/" + set.name
				rep.Metrics = append(rep.Metrics,
					NewMetric(name, "ns/op", NsPerOp(s), NsPerOp(b), false),
					NewMetric(name+" p50", "ns", Extra(s, "p50-ns"), Extra(b, "p50-ns"), false),
					NewMetric(name+" p99", "ns", Extra(s, "p99-ns"), Extra(b, "p99-ns"), false),
					NewMetric(name, "allocs/op", AllocsPerOp(s), AllocsPerOp(b), false))
			}
			cfg.Progress("search: cold queries while a consumer.Pool applies %.0f images/s", sc.IngestRate)
			ui, err := fx.QueryUnderIngest(sc.Queries, sc.PercentileSamples, sc.IngestRate)
			if err != nil {
				return rep, err
			}
			rep.Info["search_cold_under_ingest"] = ui
			mem := fx.TableMemory()
			rep.Info["search_buckets"] = sc.Buckets
			rep.Info["search_queries"] = sc.Queries
			rep.Info["search_hot_queries"] = sc.HotQueries
			rep.Info["search_table_bytes"] = mem.Bytes
			rep.Info["search_hugepages_advised"] = mem.HugePagesAdvised
			rep.Info["search_hugepage_bytes"] = mem.HugePageBytes
		case SuiteProducer:
			s, b, err := pair(ProducerPair(cfg.Producer))
			if err != nil {
				return rep, err
			}
			rep.Pairs = append(rep.Pairs, Description{suite,
				fmt.Sprintf("producer ApplyEvent, canonical mode, %d-block store + remove at %.0f%% load", cfg.Producer.BlocksPerEvent, cfg.Producer.Load*100),
				"exact refcount map[uint64]uint32 update per block (no lineage, no CKF)"})
			rep.Metrics = append(rep.Metrics,
				NewMetric("producer/store+remove", "ns/op", NsPerOp(s), NsPerOp(b), false),
				NewMetric("producer/store+remove", "allocs/op", AllocsPerOp(s), AllocsPerOp(b), false))
		case SuitePool:
			s, b, err := pair(PoolPair(cfg.Pool))
			if err != nil {
				return rep, err
			}
			rep.Pairs = append(rep.Pairs, Description{suite,
				"consumer.Pool, 16 lanes submitting concurrently, default workers",
				"one goroutine, LaneIngestor.ApplyDelta directly (no pool)"})
			rep.Metrics = append(rep.Metrics,
				NewMetric("pool/deltas", "images/s", Extra(s, "images/s"), Extra(b, "images/s"), true),
				NewMetric("pool/deltas", "allocs/op", AllocsPerOp(s), AllocsPerOp(b), false))
		case SuiteE2E:
			ms, err := runE2E(ctx, cfg, rep)
			if err != nil {
				return rep, err
			}
			rep.Metrics = append(rep.Metrics, ms...)
		case SuiteQuery:
			ms, err := runQuery(ctx, cfg, rep)
			if err != nil {
				return rep, err
			}
			rep.Metrics = append(rep.Metrics, ms...)
		case SuiteScale:
			sc := cfg.Scale
			if sc.Progress == nil {
				sc.Progress = cfg.Progress
			}
			sr, err := RunScale(ctx, sc)
			if err != nil {
				return rep, err
			}
			rep.Scale = sr
			rep.Pairs = append(rep.Pairs, Description{suite,
				fmt.Sprintf("CKF global index, %d DC lanes × %d buckets from producer states filled with the scaled Mooncake trace (%d memberships)", sr.Lanes, sr.Buckets, sr.Memberships),
				"exact global index: Go map canonical hash → DC mask, galloping/binary search over prefix-closed masks"})
			rep.Metrics = append(rep.Metrics, sr.Metrics()...)
			if sr.Radix != nil {
				rep.Pairs = append(rep.Pairs, Description{suite + "/radix",
					"CKF global index, as above",
					"exact global index: radix tree (hashicorp/go-immutable-radix/v2) keyed by the chain of local hashes → DC mask, one walk down the query's path"})
				rep.Metrics = append(rep.Metrics, sr.RadixMetrics()...)
			}
		}
	}
	return rep, nil
}

// E2ERun is one repetition of the throughput pair.
type E2ERun struct {
	PipelineEventsPerSec float64 `json:"pipeline_events_per_sec"`
	RawEventsPerSec      float64 `json:"raw_events_per_sec"`
	Ratio                float64 `json:"ratio"`
	PipelineMs           float64 `json:"pipeline_ms"`
	RawMs                float64 `json:"raw_ms"`
	// CPU time of the measuring process per event over the timed part:
	// the server and the relays and indexer (pipeline) or the pull
	// consumer (raw), plus the load generator when it runs in-process.
	PipelineCPUMicrosPerEvent float64 `json:"pipeline_cpu_us_per_event"`
	RawCPUMicrosPerEvent      float64 `json:"raw_cpu_us_per_event"`
	// The external load generator's CPU time per event (0: in-process,
	// counted above).
	PipelineGeneratorCPUMicrosPerEvent float64 `json:"pipeline_generator_cpu_us_per_event"`
	RawGeneratorCPUMicrosPerEvent      float64 `json:"raw_generator_cpu_us_per_event"`
	// LaneDeltas is the number of deltas the relays published for the
	// batch's events (Events of them): the lanes' coalescing.
	LaneDeltas int `json:"lane_deltas"`
	Events     int `json:"events"`
}

// medianThroughput returns the runs' median elapsed times as throughputs
// of b's size.
func medianThroughput(runs []E2ERun, b *Batch) (raw, sub Throughput) {
	med := func(get func(E2ERun) float64) time.Duration {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		slices.Sort(v)
		return time.Duration(v[len(v)/2] * float64(time.Millisecond))
	}
	raw = Throughput{Events: b.Events, Messages: len(b.Msgs), Bytes: b.Bytes(), Elapsed: med(func(r E2ERun) float64 { return r.RawMs })}
	sub = Throughput{Events: b.Events, Messages: len(b.Msgs), Bytes: b.Bytes(), Elapsed: med(func(r E2ERun) float64 { return r.PipelineMs })}
	return raw, sub
}

// Extra returns a metric a body reported with b.ReportMetric (0 if absent).
func Extra(r testing.BenchmarkResult, unit string) float64 { return r.Extra[unit] }

// runE2E runs both end-to-end pairs on one embedded server: the raw
// baseline and the pipeline carry the same batch of replayed payloads.
func runE2E(ctx context.Context, cfg SuiteConfig, rep *Report) (ms []Metric, err error) {
	cfg.Progress("e2e: starting embedded nats-server, %d relays and the indexer", len(cfg.E2E.DCs))
	env, err := NewEnv(cfg.E2E)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := env.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := env.StartPipeline(ctx); err != nil {
		return nil, err
	}
	// The throughput pair, E2ERepeat times on fresh batches: one short
	// batch is at the mercy of a few milliseconds of stolen CPU, so the
	// rows report the medians and Info every run, with the process CPU
	// time each side spent per event (load-independent).
	var (
		batch    *Batch
		raw, sub Throughput
		runs     []E2ERun
	)
	for i := range max(cfg.E2ERepeat, 1) {
		if batch, err = env.NextBatch(cfg.E2ERequests); err != nil {
			return nil, err
		}
		cfg.Progress("e2e: throughput %d/%d, %d requests = %d events in %d messages (%d KiB)", i+1, max(cfg.E2ERepeat, 1), cfg.E2ERequests, batch.Events, len(batch.Msgs), batch.Bytes()>>10)
		r, err := env.RawEvents(ctx, batch)
		if err != nil {
			return nil, err
		}
		s, err := env.Events(ctx, batch)
		if err != nil {
			return nil, err
		}
		perEvent := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(batch.Events) }
		run := E2ERun{
			PipelineEventsPerSec: s.EventsPerSec(), RawEventsPerSec: r.EventsPerSec(),
			PipelineMs: float64(s.Elapsed.Microseconds()) / 1e3, RawMs: float64(r.Elapsed.Microseconds()) / 1e3,
			PipelineCPUMicrosPerEvent: perEvent(s.CPU), RawCPUMicrosPerEvent: perEvent(r.CPU),

			PipelineGeneratorCPUMicrosPerEvent: perEvent(s.GeneratorCPU),
			RawGeneratorCPUMicrosPerEvent:      perEvent(r.GeneratorCPU),
			LaneDeltas:                         s.LaneDeltas, Events: batch.Events,
		}
		run.Ratio, _ = Ratio(run.PipelineEventsPerSec, run.RawEventsPerSec)
		runs = append(runs, run)
	}
	raw, sub = medianThroughput(runs, batch)
	rep.Info["e2e_runs"] = runs
	cfg.Progress("e2e: latency, %d probes per side, %s apart", cfg.LatencySamples, cfg.LatencyGap)
	rawLat, err := env.RawLatency(ctx, cfg.LatencySamples, cfg.LatencyGap)
	if err != nil {
		return nil, err
	}
	lat, err := env.Latency(ctx, cfg.LatencySamples, cfg.LatencyGap)
	if err != nil {
		return nil, err
	}
	rep.Pairs = append(rep.Pairs,
		Description{SuiteE2E + "/events",
			fmt.Sprintf("Mooncake replay over %d DCs: KVEVENTS → relay → lane stream → indexer applied", len(cfg.E2E.DCs)),
			"raw JetStream: same payloads, one stream, one pull consumer, same server"},
		Description{SuiteE2E + "/latency",
			"one stored event, published without waiting for its ack → queryable through the indexer's Match (polled every 25µs)",
			"raw JetStream: one message, published the same way → pull consumer receipt (polled the same way)"})
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	rep.Info["e2e_requests"] = cfg.E2ERequests
	rep.Info["e2e_events"] = batch.Events
	rep.Info["e2e_messages"] = len(batch.Msgs)
	rep.Info["e2e_payload_bytes"] = batch.Bytes()
	rep.Info["e2e_elapsed_ms"] = float64(sub.Elapsed.Microseconds()) / 1e3
	rep.Info["raw_elapsed_ms"] = float64(raw.Elapsed.Microseconds()) / 1e3
	rep.Info["latency_samples"] = cfg.LatencySamples
	med := func(get func(E2ERun) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	ms = []Metric{
		NewMetric("e2e/events", "events/s", sub.EventsPerSec(), raw.EventsPerSec(), true),
		NewMetric("e2e/cpu per event", "CPU-µs", med(func(r E2ERun) float64 { return r.PipelineCPUMicrosPerEvent }),
			med(func(r E2ERun) float64 { return r.RawCPUMicrosPerEvent }), false),
		NewMetric("e2e/latency p50", "µs", us(lat.P50), us(rawLat.P50), false),
		NewMetric("e2e/latency p99", "µs", us(lat.P99), us(rawLat.P99), false),
	}
	if cfg.NoRates {
		return ms, nil
	}
	rates, err := env.RateSweep(ctx, cfg.Rates, cfg.Progress)
	if err != nil {
		return ms, err
	}
	rep.E2ERates = rates
	rep.Pairs = append(rep.Pairs, Description{SuiteE2E + "/paced",
		"replayed events paced at a fixed input rate through the pipeline; probe event → queryable every 10ms under that load",
		"raw JetStream: same kind of payloads paced into one stream and drained by one pull consumer; probe publish → receipt, polled like the pipeline's"})
	behind := "none"
	for _, r := range rates {
		name := fmt.Sprintf("e2e/paced %.0f/s", r.TargetRate)
		ms = append(ms,
			NewMetric(name+" p50", "µs", r.Pipeline.P50Ns/1e3, r.Raw.P50Ns/1e3, false),
			NewMetric(name+" p99", "µs", r.Pipeline.P99Ns/1e3, r.Raw.P99Ns/1e3, false),
			NewMetric(name+" applied", "events/s", r.Pipeline.AppliedPerSec, r.Raw.AppliedPerSec, true),
			NewMetric(name+" drain", "ms", r.Pipeline.DrainMs, r.Raw.DrainMs, false),
			NewMetric(name+" cpu", "cores", r.Pipeline.CPUCores, r.Raw.CPUCores, false))
		if r.Pipeline.Behind && behind == "none" {
			behind = fmt.Sprintf("%.0f", r.TargetRate)
		}
	}
	rep.Info["e2e_pipeline_behind_at_events_per_sec"] = behind
	return ms, nil
}

// runQuery starts a pipeline, loads it with replayed events and times the
// query paths against their bare transports.
func runQuery(ctx context.Context, cfg SuiteConfig, rep *Report) (ms []Metric, err error) {
	cfg.Progress("query: starting embedded nats-server, %d relays and the indexer", len(cfg.E2E.DCs))
	env, err := NewEnv(cfg.E2E)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := env.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := env.StartPipeline(ctx); err != nil {
		return nil, err
	}
	batch, err := env.NextBatch(2000)
	if err != nil {
		return nil, err
	}
	if _, err := env.Events(ctx, batch); err != nil {
		return nil, err
	}
	qc := cfg.Query.withDefaults()
	cfg.Progress("query: %d distinct %d-hash requests per side, alternating rounds of %d", qc.Requests, qc.Hashes, qc.Round)
	paths, err := env.QueryPaths(ctx, qc)
	if err != nil {
		return nil, err
	}
	rep.Info["query_paths"] = paths
	for _, p := range paths {
		rep.Pairs = append(rep.Pairs, Description{SuiteQuery + "/" + p.Name,
			fmt.Sprintf("%s with %d sequence hashes, keep-alive loopback, the indexer's own stack, %d-byte answers", p.Name, qc.Hashes, p.Bytes),
			p.Baseline})
		ms = append(ms,
			NewMetric("query/"+p.Name+" p50", "µs", p.P50Ns/1e3, p.BaseP50/1e3, false),
			NewMetric("query/"+p.Name+" p99", "µs", p.P99Ns/1e3, p.BaseP99/1e3, false))
		if p.TableBytes > 0 {
			rep.Info["query_mirror_table_bytes"] = p.TableBytes
		}
	}
	return ms, nil
}
