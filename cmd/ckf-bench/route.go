package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/benchplot"
	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/internal/routeflags"
	"github.com/ckfrelay/ckfrelay/internal/routesim"
)

// routeMode reports whether args ask for the routing-quality benchmark
// (--only route), which has flags of its own.
func routeMode(args []string) bool {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == "only=route" || (a == "only" && i+1 < len(args) && args[i+1] == "route") {
			return true
		}
	}
	return false
}

type routeOptions struct {
	trace       string
	json        string
	plots       string
	loads       []float64
	policies    []routesim.Policy
	workers     int
	requests    int
	seed        uint64
	seeds       int
	parallel    int
	signal      routesim.Signal
	routerFlags []string
	sweep       []string
	noFault     bool
	quiet       bool
}

func parseRoute(args []string, getenv func(string) string, stderr io.Writer) (*routeOptions, error) {
	o := &routeOptions{}
	fs := flag.NewFlagSet("ckf-bench --only route", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cli.Usage(fs, "replays a Mooncake-format trace through a simulated multi-DC fleet and compares DC routing policies", map[string]string{"quiet": cli.GroupObservability})
	fs.String("only", "route", "route: the routing-quality benchmark")
	fs.StringVar(&o.trace, "trace", "conversation", "Mooncake-format trace: conversation or synthetic (the bundled ones in data/), or a JSONL file, gzip or not")
	fs.StringVar(&o.json, "json", "", `write {"router_flags": [...], "rows": [...]} (with --sweep-load-plane: "points") to this file`)
	fs.StringVar(&o.plots, "plots", "", "write the TTFT CDFs (first seed) and reuse against load as SVG into this directory")
	loads := fs.String("loads", "0.5,0.7,0.9", "comma-separated offered loads, as shares of the fleet's capacity")
	pols := fs.String("policies", "random,round-robin,least-load,llm-d,sglang,dynamo,prefix,cost,oracle", "comma-separated policies")
	fs.IntVar(&o.workers, "workers", 8, "workers per DC")
	fs.IntVar(&o.requests, "requests", 0, "replay only the first N requests of the trace (0: all)")
	fs.Uint64Var(&o.seed, "seed", 1, "first seed (the phases of the DCs' scrape and window clocks, the tie-breaks inside a DC)")
	fs.IntVar(&o.seeds, "seeds", 1, "seeds per cell: rows are means, with a 95% t-interval")
	fs.IntVar(&o.parallel, "parallel", 0, "simulations run at once (0: GOMAXPROCS)")
	signal := fs.String("signal", string(routesim.SignalPrefill), "what the engines report: prefill (Dynamo serving load: prompt tokens to prefill) or counts (vLLM/SGLang /metrics: request counts and prompt-token counters)")
	routerFlags := fs.String("router-flags", "", "global-indexer flags of the router, space-separated, after the fleet's RTTs and rates (e.g. \"--route-affinity-margin 300ms\")")
	sweep := fs.String("sweep-load-plane", "", "instead of the policy comparison, sweep the load plane from 50ms to 1s: all, or a comma-separated list of window, scrape, max_age, window+scrape")
	fs.BoolVar(&o.noFault, "no-fault", false, "skip the fault phase and the single-DC check")
	fs.BoolVar(&o.quiet, "quiet", false, "do not print progress on stderr")
	if err := cli.Parse(fs, args, getenv); err != nil {
		return nil, err
	}
	for _, s := range strings.Split(*loads, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || !(v > 0) || v > 2 {
			return nil, fmt.Errorf("--loads: %q is not a load within (0, 2]", s)
		}
		o.loads = append(o.loads, v)
	}
	for _, s := range strings.Split(*pols, ",") {
		p, err := routesim.ParsePolicy(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--policies: %w", err)
		}
		o.policies = append(o.policies, p)
	}
	if o.workers <= 0 || o.requests < 0 || o.seeds < 1 || o.seeds > 1000 || o.parallel < 0 {
		return nil, fmt.Errorf("--workers must be positive, --requests and --parallel not negative, --seeds within 1..1000")
	}
	var err error
	if o.signal, err = routesim.ParseSignal(*signal); err != nil {
		return nil, fmt.Errorf("--signal: %w", err)
	}
	o.routerFlags = strings.Fields(*routerFlags)
	if _, err := routeflags.Parse(o.routerFlags); err != nil {
		return nil, fmt.Errorf("--router-flags: %w", err)
	}
	switch *sweep {
	case "":
	case "all":
		o.sweep = []string{routesim.KnobWindow, routesim.KnobScrape, routesim.KnobMaxAge, routesim.KnobWindowScrape}
	default:
		for _, k := range strings.Split(*sweep, ",") {
			switch k = strings.TrimSpace(k); k {
			case routesim.KnobWindow, routesim.KnobScrape, routesim.KnobMaxAge, routesim.KnobWindowScrape:
				o.sweep = append(o.sweep, k)
			default:
				return nil, fmt.Errorf("--sweep-load-plane: unknown knob %q", k)
			}
		}
	}
	return o, nil
}

// loadTrace reads --trace.
func loadTrace(name string) ([]replay.Request, error) {
	switch name {
	case "", "conversation":
		return replay.LoadEmbedded()
	case "synthetic":
		return replay.LoadEmbeddedSynthetic()
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return replay.ReadTrace(f)
}

// routeJSON is the --json file of the policy comparison.
type routeJSON struct {
	RouterFlags []string       `json:"router_flags"`
	Trace       string         `json:"trace"`
	Rows        []routesim.Row `json:"rows"`
}

// sweepJSON is the --json file of the load plane sweep.
type sweepJSON struct {
	RouterFlags []string               `json:"router_flags"`
	Trace       string                 `json:"trace"`
	Points      []*routesim.SweepPoint `json:"points"`
}

func runRoute(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parseRoute(args, getenv, stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(stderr, "ckf-bench:", err)
		return 2
	}
	reqs, err := loadTrace(o.trace)
	if err != nil {
		fmt.Fprintln(stderr, "ckf-bench:", err)
		return 1
	}
	cfg := routesim.DefaultConfig()
	cfg.Loads, cfg.Policies, cfg.WorkersPerDC, cfg.Requests, cfg.Seed = o.loads, o.policies, o.workers, o.requests, o.seed
	cfg.Signal, cfg.RouterFlags = o.signal, o.routerFlags
	progress := func(format string, a ...any) {
		if !o.quiet {
			fmt.Fprintf(stderr, "ckf-bench: "+format+"\n", a...)
		}
	}
	start := time.Now()
	env, err := routesim.NewEnv(cfg, reqs)
	if err != nil {
		fmt.Fprintln(stderr, "ckf-bench:", err)
		return 1
	}
	opts := routesim.Options{Seeds: o.seeds, Parallel: o.parallel, NoFault: o.noFault}
	var out any
	var rep *routesim.Report
	if len(o.sweep) > 0 {
		sw, err := env.Sweep(o.sweep, opts, progress)
		if err != nil {
			fmt.Fprintln(stderr, "ckf-bench:", err)
			return 1
		}
		sw.WriteTable(stdout)
		out = sweepJSON{RouterFlags: sw.RouterArgs, Trace: o.trace, Points: sw.Points}
	} else {
		if rep, err = env.Bench(opts, progress); err != nil {
			fmt.Fprintln(stderr, "ckf-bench:", err)
			return 1
		}
		rep.WriteTable(stdout)
		out = routeJSON{RouterFlags: rep.RouterArgs, Trace: o.trace, Rows: rep.Rows()}
	}
	fmt.Fprintf(stdout, "\ntrace %s, %s, GOMAXPROCS %d, %v\n", o.trace, runtime.Version(), runtime.GOMAXPROCS(0), time.Since(start).Round(time.Second))
	if o.json != "" {
		b, err := json.MarshalIndent(out, "", "  ")
		if err == nil {
			err = os.WriteFile(o.json, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "ckf-bench:", err)
			return 1
		}
	}
	if o.plots != "" && rep != nil {
		files, err := routePlots(o.plots, rep)
		if err != nil {
			fmt.Fprintln(stderr, "ckf-bench:", err)
			return 1
		}
		for _, f := range files {
			fmt.Fprintln(stdout, "wrote", f)
		}
	}
	return 0
}

// routePlots draws a TTFT CDF per load and prefix reuse against load.
func routePlots(dir string, rep *routesim.Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	reuse := map[routesim.Policy]*benchplot.Curve{}
	var order []routesim.Policy
	for _, load := range rep.Config.Loads {
		var series []benchplot.Series
		for _, cell := range rep.Sweep {
			if cell.Load != load {
				continue
			}
			run := cell.Runs[0]
			series = append(series, benchplot.Series{Name: string(run.Policy), Latencies: run.TTFT, Dashed: run.Policy == routesim.Oracle})
			c := reuse[run.Policy]
			if c == nil {
				c = &benchplot.Curve{Name: string(run.Policy), Dashed: run.Policy == routesim.Oracle}
				reuse[run.Policy] = c
				order = append(order, run.Policy)
			}
			c.X = append(c.X, load)
			c.Y = append(c.Y, cell.Reuse)
		}
		path := filepath.Join(dir, fmt.Sprintf("route-ttft-cdf-load%02.0f.svg", load*100))
		title := fmt.Sprintf("TTFT per DC routing policy, %d DCs, load %.2f", len(rep.Config.DCs), load)
		if err := benchplot.TTFTCDF(path, title, series); err != nil {
			return nil, err
		}
		files = append(files, path)
	}
	curves := make([]benchplot.Curve, 0, len(order))
	for _, p := range order {
		curves = append(curves, *reuse[p])
	}
	path := filepath.Join(dir, "route-reuse-vs-load.svg")
	if err := benchplot.Lines(path, "Prefix reuse against load", "offered load (share of the fleet's capacity)", "prefix reuse (cached / prompt blocks)", curves); err != nil {
		return nil, err
	}
	return append(files, path), nil
}
