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
	"github.com/ckfrelay/ckfrelay/internal/routesim"
	"github.com/ckfrelay/ckfrelay/pkg/route"
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
	trace    string
	json     string
	plots    string
	loads    []float64
	policies []routesim.Policy
	workers  int
	requests int
	seed     uint64
	affinity time.Duration
	quiet    bool
}

func parseRoute(args []string, getenv func(string) string, stderr io.Writer) (*routeOptions, error) {
	o := &routeOptions{}
	fs := flag.NewFlagSet("ckf-bench --only route", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cli.Usage(fs, "replays a Mooncake-format trace through a simulated multi-DC fleet and compares DC routing policies", map[string]string{"quiet": cli.GroupObservability})
	fs.String("only", "route", "route: the routing-quality benchmark")
	fs.StringVar(&o.trace, "trace", "", "Mooncake-format JSONL trace, gzip or not (default: the conversation trace in data/)")
	fs.StringVar(&o.json, "json", "", "write one JSON object per (policy, load) to this file")
	fs.StringVar(&o.plots, "plots", "", "write the TTFT CDFs and reuse against load as SVG into this directory")
	loads := fs.String("loads", "0.5,0.7,0.9", "comma-separated offered loads, as shares of the fleet's capacity")
	pols := fs.String("policies", "random,round-robin,least-load,prefix,cost,oracle", "comma-separated policies")
	fs.IntVar(&o.workers, "workers", 8, "workers per DC")
	fs.IntVar(&o.requests, "requests", 0, "replay only the first N requests of the trace (0: all)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of every tie-break and random choice")
	fs.DurationVar(&o.affinity, "affinity-margin", route.AffinityMarginDefault, "the cost policy's prefix affinity margin (route.Config.AffinityMargin; 0 or negative: off)")
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
	if o.workers <= 0 || o.requests < 0 {
		return nil, fmt.Errorf("--workers must be positive and --requests not negative")
	}
	return o, nil
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
	var reqs []replay.Request
	if o.trace == "" {
		reqs, err = replay.LoadEmbedded()
	} else {
		var f *os.File
		if f, err = os.Open(o.trace); err == nil {
			reqs, err = replay.ReadTrace(f)
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "ckf-bench:", err)
		return 1
	}
	cfg := routesim.DefaultConfig()
	cfg.Loads, cfg.Policies, cfg.WorkersPerDC, cfg.Requests, cfg.Seed = o.loads, o.policies, o.workers, o.requests, o.seed
	cfg.Route.AffinityMargin = o.affinity
	if o.affinity == 0 {
		cfg.Route.AffinityMargin = -1 // 0 on the command line means no margin
	}
	start := time.Now()
	rep, err := routesim.Bench(cfg, reqs, func(format string, a ...any) {
		if !o.quiet {
			fmt.Fprintf(stderr, "ckf-bench: "+format+"\n", a...)
		}
	})
	if err != nil {
		fmt.Fprintln(stderr, "ckf-bench:", err)
		return 1
	}
	rep.WriteTable(stdout)
	fmt.Fprintf(stdout, "\n%s, GOMAXPROCS %d, %v\n", runtime.Version(), runtime.GOMAXPROCS(0), time.Since(start).Round(time.Second))
	if o.json != "" {
		b, err := json.MarshalIndent(rep.Results(), "", "  ")
		if err == nil {
			err = os.WriteFile(o.json, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "ckf-bench:", err)
			return 1
		}
	}
	if o.plots != "" {
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
		for _, run := range rep.Sweep {
			if run.Load != load {
				continue
			}
			series = append(series, benchplot.Series{Name: string(run.Policy), Latencies: run.TTFT, Dashed: run.Policy == routesim.Oracle})
			c := reuse[run.Policy]
			if c == nil {
				c = &benchplot.Curve{Name: string(run.Policy), Dashed: run.Policy == routesim.Oracle}
				reuse[run.Policy] = c
				order = append(order, run.Policy)
			}
			c.X = append(c.X, load)
			c.Y = append(c.Y, run.Reuse)
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
