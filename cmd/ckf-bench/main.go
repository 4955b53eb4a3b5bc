// Command ckf-bench runs ckfrelay's comparative benchmarks (internal/bench)
// in one process and prints, for each, the subject, its baseline and their
// ratio: the prefix search against a linear probe, the producer's CKF
// projection against an exact refcount map, the ingestion pool against
// direct application, and the whole JetStream pipeline against raw
// JetStream on the same embedded server (throughput and latency).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/bench"
	"github.com/ckfrelay/ckfrelay/internal/benchplot"
	"github.com/ckfrelay/ckfrelay/internal/cli"
)

func main() {
	cli.Main(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr) })
}

// generatorCommand is the first argument of the e2e suite's load
// generator process (this binary, started by the suite).
const generatorCommand = "e2e-generator"

type options struct {
	only       string
	buckets    uint64
	blocks     int
	queries    int
	hot        int
	accuracy   int
	lanes      int
	rates      []float64
	rateTime   time.Duration
	plots      string
	chain      int
	ingest     float64
	dirtyAge   time.Duration
	requests   int
	repeat     int
	samples    int
	pctSamples int
	cpuProfile string
	generator  string
	// queryRequests is the query suite's requests per side.
	queryRequests int
	benchtime     string
	json          bool
	quiet         bool
	radix         bool
	radixMax      uint64
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("ckf-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cli.Usage(fs, "runs the CKF micro-benchmarks and the end-to-end latency/throughput pair, printing one report", map[string]string{"json": cli.GroupObservability, "quiet": cli.GroupObservability})
	fs.StringVar(&o.only, "only", strings.Join(bench.Suites(), ","), "comma-separated suites to run: "+strings.Join(bench.AllSuites(), ", ")+" (scale only when named); or route alone, the routing-quality benchmark with flags of its own (--only route --help)")
	fs.Uint64Var(&o.buckets, "buckets", 1<<22, "search, scale: buckets per lane (a power of two)")
	fs.IntVar(&o.blocks, "blocks", 128, "search: blocks per query")
	fs.IntVar(&o.queries, "queries", 65536, "search, scale: distinct queries of the cold set (their rows do not fit any cache)")
	fs.IntVar(&o.hot, "hot-queries", 64, "search, scale: distinct queries of the hot set (the first of the same queries; their rows stay in L2)")
	fs.IntVar(&o.accuracy, "accuracy-queries", 100000, "scale: trace queries compared with the exact index")
	fs.IntVar(&o.lanes, "lanes", 16, "scale: DC lanes")
	fs.Float64Var(&o.ingest, "ingest-rate", 1e6, "search: images/s a consumer.Pool applies while cold queries are timed beside it")
	fs.DurationVar(&o.dirtyAge, "pool-max-dirty-age", 0, "search: MaxDirtyToAppliedAge of the pool beside the cold queries (0 = the pool's default, 10ms)")
	fs.IntVar(&o.chain, "chain-blocks", 0, "search: length of the stored chains each lane holds a random prefix of (0 = 4×blocks; = blocks is the search's worst case)")
	fs.IntVar(&o.requests, "e2e-requests", 4000, "e2e: replayed Mooncake requests for the throughput pair")
	fs.IntVar(&o.repeat, "e2e-repeat", 1, "e2e: runs of the throughput pair on fresh batches (rows show the medians, --json every run)")
	fs.IntVar(&o.queryRequests, "query-requests", 20000, "query: distinct requests per side of each query-path pair")
	fs.IntVar(&o.samples, "latency-samples", 300, "e2e: probes per side of the latency pair")
	fs.IntVar(&o.pctSamples, "percentile-samples", 20000, "search: queries timed one by one behind each p50 and p99 (at least --queries)")
	fs.StringVar(&o.benchtime, "benchtime", "1s", "run time of each micro-benchmark body (go test -benchtime syntax: 1s, 500ms, 10000x)")
	rates := fs.String("e2e-rates", "10000,50000,100000", "e2e: comma-separated paced input rates in events/s (empty: no paced sweep)")
	fs.DurationVar(&o.rateTime, "e2e-rate-duration", 2*time.Second, "e2e: send time per paced rate and side")
	fs.StringVar(&o.plots, "plots", "", "write SVG plots of the scale and paced e2e results into this directory (e.g. docs/bench)")
	fs.BoolVar(&o.radix, "radix", false, "scale: add a radix-tree exact index (hashicorp/go-immutable-radix/v2) as a third side; skipped above --radix-max-memberships")
	fs.Uint64Var(&o.radixMax, "radix-max-memberships", bench.DefaultRadixMaxMemberships, "scale: the most (block, DC) memberships the radix side is built for (it needs hundreds of bytes per distinct block)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run (the server, relays and indexer; the load generator too with --e2e-generator inline or in the paced sweep) to this file")
	fs.StringVar(&o.generator, "e2e-generator", "process", "e2e: where the throughput pair's load generator runs: process (a child ckf-bench, so this process's CPU time and profile hold the pipeline alone) or inline")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON instead of a table")
	fs.BoolVar(&o.quiet, "quiet", false, "do not print progress on stderr")
	if err := cli.Parse(fs, args, getenv); err != nil {
		return nil, err
	}
	if o.buckets == 0 || o.buckets&(o.buckets-1) != 0 {
		return nil, fmt.Errorf("--buckets %d is not a power of two", o.buckets)
	}
	if o.blocks <= 0 || o.requests <= 0 || o.repeat <= 0 || o.samples <= 0 || o.pctSamples <= 0 || o.queries <= 0 || o.hot <= 0 || o.queryRequests <= 0 {
		return nil, fmt.Errorf("--blocks, --queries, --hot-queries, --e2e-requests, --query-requests, --latency-samples and --percentile-samples must be positive")
	}
	if o.accuracy <= 0 || o.lanes < 1 || o.lanes > 16 {
		return nil, fmt.Errorf("--accuracy-queries must be positive and --lanes within 1..16")
	}
	for _, r := range strings.Split(*rates, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		v, err := strconv.ParseFloat(r, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("--e2e-rates: %q is not a positive rate", r)
		}
		o.rates = append(o.rates, v)
	}
	if o.rateTime <= 0 {
		return nil, fmt.Errorf("--e2e-rate-duration must be positive")
	}
	if o.dirtyAge < 0 {
		return nil, fmt.Errorf("--pool-max-dirty-age %v must not be negative", o.dirtyAge)
	}
	if !(o.ingest > 0) || o.ingest > 1e9 {
		return nil, fmt.Errorf("--ingest-rate %v must be within (0, 1e9] images/s", o.ingest)
	}
	if o.generator != "process" && o.generator != "inline" {
		return nil, fmt.Errorf("--e2e-generator %q: want process or inline", o.generator)
	}
	if o.hot > o.queries {
		return nil, fmt.Errorf("--hot-queries %d exceeds --queries %d", o.hot, o.queries)
	}
	if o.chain != 0 && o.chain < o.blocks {
		return nil, fmt.Errorf("--chain-blocks %d is shorter than --blocks %d", o.chain, o.blocks)
	}
	return o, nil
}

func (o *options) suites() []string {
	var out []string
	for _, s := range strings.Split(o.only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if routeMode(args) {
		return runRoute(args, getenv, stdout, stderr)
	}
	if len(args) == 2 && args[0] == generatorCommand {
		// The e2e suite's load generator, started by the suite itself.
		if err := bench.RunGenerator(ctx, args[1], os.Stdin, stdout); err != nil {
			fmt.Fprintln(stderr, "ckf-bench generator:", err)
			return 1
		}
		return 0
	}
	o, err := parse(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "ckf-bench:", err)
		return 2
	}
	suites := o.suites()
	if err := bench.ValidateSuites(suites); err != nil {
		fmt.Fprintln(stderr, "ckf-bench:", err)
		return 2
	}
	// testing.Benchmark reads its run time from the testing flags.
	testing.Init()
	if err := flag.CommandLine.Set("test.benchtime", o.benchtime); err != nil {
		fmt.Fprintf(stderr, "ckf-bench: --benchtime %q: %v\n", o.benchtime, err)
		return 2
	}
	var e2e bench.E2EConfig
	if o.generator == "process" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(stderr, "ckf-bench:", err)
			return 1
		}
		e2e.Generator = []string{exe, generatorCommand}
	}
	cfg := bench.SuiteConfig{
		E2E:            e2e,
		Only:           suites,
		Search:         bench.SearchConfig{Buckets: o.buckets, Blocks: o.blocks, Queries: o.queries, HotQueries: o.hot, ChainBlocks: o.chain, IngestRate: o.ingest, PoolMaxDirtyAge: o.dirtyAge, PercentileSamples: o.pctSamples},
		Scale:          bench.ScaleConfig{Lanes: o.lanes, Buckets: o.buckets, HotQueries: o.hot, ColdQueries: o.queries, AccuracyQueries: o.accuracy, Radix: o.radix, RadixMaxMemberships: o.radixMax},
		Rates:          bench.RateConfig{Rates: o.rates, Duration: o.rateTime},
		NoRates:        len(o.rates) == 0,
		E2ERequests:    o.requests,
		E2ERepeat:      o.repeat,
		LatencySamples: o.samples,
		Query:          bench.QueryConfig{Requests: o.queryRequests, Hashes: o.blocks},
		Progress: func(format string, a ...any) {
			if !o.quiet {
				fmt.Fprintf(stderr, "ckf-bench: "+format+"\n", a...)
			}
		},
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "ckf-bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "ckf-bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	loadBefore := loadAverage()
	rep, err := bench.RunSuite(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "ckf-bench:", err)
		return 1
	}
	rep.Info["go"] = runtime.Version()
	rep.Info["gomaxprocs"] = runtime.GOMAXPROCS(0)
	rep.Info["benchtime"] = o.benchtime
	rep.Info["wall_seconds"] = time.Since(start).Round(time.Millisecond).Seconds()
	// Other processes' load explains most run-to-run swings on a shared
	// machine: record it beside the figures.
	rep.Info["loadavg_before"] = loadBefore
	rep.Info["loadavg_after"] = loadAverage()
	if o.plots != "" {
		files, err := benchplot.WriteReport(o.plots, rep)
		if err != nil {
			fmt.Fprintln(stderr, "ckf-bench:", err)
			return 1
		}
		for _, f := range files {
			cfg.Progress("wrote %s", f)
		}
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "ckf-bench:", err)
			return 1
		}
		return 0
	}
	printTable(stdout, rep)
	return 0
}

func printTable(w io.Writer, rep *bench.Report) {
	fmt.Fprintf(w, "ckf-bench  %s  GOMAXPROCS=%v  benchtime=%v  wall=%vs  load average %v → %v\n", rep.Info["go"], rep.Info["gomaxprocs"], rep.Info["benchtime"], rep.Info["wall_seconds"], rep.Info["loadavg_before"], rep.Info["loadavg_after"])
	if n, ok := rep.Info["search_table_bytes"]; ok {
		fmt.Fprintf(w, "search: %v buckets, %v cold / %v hot queries; table %v bytes, huge pages advised %v, %v bytes on huge pages\n",
			rep.Info["search_buckets"], rep.Info["search_queries"], rep.Info["search_hot_queries"], n, rep.Info["search_hugepages_advised"], rep.Info["search_hugepage_bytes"])
	}
	if ui, ok := rep.Info["search_cold_under_ingest"].(bench.UnderIngest); ok {
		pace := "no fault, every lane ready"
		if !ui.KeptPace() {
			// The figure stands but says the pool fell behind.
			pace = fmt.Sprintf("POOL FELL BEHIND: %d lane retirements re-armed, %d faults, all lanes ready %.1f%% of the time, %d queries over fewer lanes left out",
				ui.Retirements, ui.Faults, 100*ui.AllReadyFraction, ui.DegradedQueries)
		}
		fmt.Fprintf(w, "search: cold queries while a consumer.Pool applies %.2fM images/s (paced at %.2fM, %s): p50 %.0f ns, p99 %.0f ns over %d queries\n",
			ui.ImagesPerSec/1e6, ui.TargetImagesPerSec/1e6, pace, ui.P50Ns, ui.P99Ns, ui.Queries)
	}
	if sr := rep.Scale; sr != nil {
		a := sr.Accuracy
		fmt.Fprintf(w, "scale: %d DCs × %d buckets, %d memberships (%d unique blocks, %d requests over %d trace copies), CKF on huge pages %v\n",
			sr.Lanes, sr.Buckets, sr.Memberships, sr.UniqueBlocks, sr.Requests, sr.TraceCopies, sr.HugePages)
		fmt.Fprintf(w, "scale accuracy over %d queries (%d DC answers): under %d, inflated %d (%.4f%%; %d from depth 0), wrong best DC %d (%.4f%%)\n",
			a.Queries, a.Answers, a.Under, a.Inflated, a.InflatedPct, a.InflatedFromZero, a.WrongBest, a.WrongBestPct)
		fmt.Fprintf(w, "scale false positives: %.4f%% of %d single probes of absent hashes hit; the format's floor for this load is %.0f inflated answers\n",
			a.ProbeFPPct, a.ProbeFPProbes, a.ExpectedInflated)
		if rx := sr.Radix; rx != nil {
			fmt.Fprintf(w, "scale radix: %d prefixes, %d memberships; answers differing from the exact map %d of %d (%d queries); %.2g heap allocations per query (process-wide count)\n",
				rx.Prefixes, rx.Memberships, rx.Mismatches, rx.CheckedAnswers, rx.CheckedQueries, rx.AllocsPerQuery)
		} else if sr.RadixSkipped != "" {
			fmt.Fprintf(w, "scale radix: skipped: %s\n", sr.RadixSkipped)
		}
	}
	if runs, ok := rep.Info["e2e_runs"].([]bench.E2ERun); ok {
		for i, r := range runs {
			fmt.Fprintf(w, "e2e run %d: pipeline %.0f events/s (%.1fms, %.1f CPU-µs/event, %d lane deltas), raw %.0f events/s (%.1fms, %.1f CPU-µs/event), ratio %.2f; generator %.1f / %.1f CPU-µs/event\n",
				i+1, r.PipelineEventsPerSec, r.PipelineMs, r.PipelineCPUMicrosPerEvent, r.LaneDeltas, r.RawEventsPerSec, r.RawMs, r.RawCPUMicrosPerEvent, r.Ratio,
				r.PipelineGeneratorCPUMicrosPerEvent, r.RawGeneratorCPUMicrosPerEvent)
		}
	}
	if b, ok := rep.Info["e2e_pipeline_behind_at_events_per_sec"]; ok {
		fmt.Fprintf(w, "e2e paced: pipeline first falls behind at %v events/s (behind = applied < 90%% of the target or a drain > 25%% of the send time)\n", b)
	}
	if n, ok := rep.Info["e2e_events"]; ok {
		fmt.Fprintf(w, "e2e: %v requests → %v events in %v messages (%v bytes); pipeline %vms, raw %vms; %v latency probes per side\n",
			rep.Info["e2e_requests"], n, rep.Info["e2e_messages"], rep.Info["e2e_payload_bytes"], rep.Info["e2e_elapsed_ms"], rep.Info["raw_elapsed_ms"], rep.Info["latency_samples"])
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range rep.Pairs {
		fmt.Fprintf(tw, "%s\tsubject:\t%s\n", p.Suite, p.Subject)
		fmt.Fprintf(tw, "\tbaseline:\t%s\n", p.Baseline)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "name\tunit\tsubject\tbaseline\tratio\t better\t")
	for _, m := range rep.Metrics {
		ratio := "n/a"
		if m.Ratio != nil {
			ratio = fmt.Sprintf("%.3gx", *m.Ratio)
		}
		better := " lower"
		if m.HigherIsBetter {
			better = " higher"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", m.Name, m.Unit, num(m.Subject), num(m.Baseline), ratio, better)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nratio = subject / baseline; 'better' is the direction in which the subject wins.")
}

// num formats a figure with three significant digits at least, without
// exponent notation for the magnitudes benchmarks produce.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1e4:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// loadAverage is the 1-minute load average from /proc/loadavg ("" where
// unavailable).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}
