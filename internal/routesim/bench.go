package routesim

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/replay"
)

// FaultLoad is the load of the fault phase.
const FaultLoad = 0.7

// Report is a whole benchmark: the sweep, the fault phase and the single-DC
// check.
type Report struct {
	Config Config
	// WorkerRate is one worker's calibrated capacity (prompt tokens/s).
	WorkerRate float64
	Requests   int
	// Sweep holds one run per (load, policy), loads outermost.
	Sweep []*Run
	// Fault holds one run per policy at FaultLoad with DC 0's relay silent
	// from the middle request on.
	Fault []*Run
	// SingleRR and SingleKV are one DC of the same workers, round robin
	// against the KV router inside the DC, at FaultLoad.
	SingleRR, SingleKV *Run
}

// Results is the sweep's machine-readable rows.
func (r *Report) Results() []Result {
	out := make([]Result, len(r.Sweep))
	for i, run := range r.Sweep {
		out[i] = run.Result
	}
	return out
}

// Bench runs the benchmark. progress, when not nil, hears about each run.
func Bench(cfg Config, reqs []replay.Request, progress func(format string, a ...any)) (*Report, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	env, err := NewEnv(cfg, reqs)
	if err != nil {
		return nil, err
	}
	rep := &Report{Config: env.Config(), WorkerRate: env.WorkerPrefillRate(), Requests: len(env.trace)}
	one := func(c Config, p Policy, load float64, what string) (*Run, error) {
		start := time.Now()
		run, err := env.RunWith(c, p, load)
		if err != nil {
			return nil, fmt.Errorf("%s %s at %.2f: %w", what, p, load, err)
		}
		progress("route: %s %-11s load %.2f: reuse %.3f, TTFT p50 %.0f ms (%v)", what, p, load, run.Reuse,
			run.TTFTP50Ms, time.Since(start).Round(time.Millisecond))
		return run, nil
	}
	for _, load := range cfg.Loads {
		for _, p := range cfg.Policies {
			run, err := one(env.cfg, p, load, "sweep")
			if err != nil {
				return nil, err
			}
			rep.Sweep = append(rep.Sweep, run)
		}
	}
	fc := env.cfg
	fc.FaultDC = 0
	for _, p := range cfg.Policies {
		run, err := one(fc, p, FaultLoad, "fault")
		if err != nil {
			return nil, err
		}
		rep.Fault = append(rep.Fault, run)
	}
	sc := env.cfg
	sc.DCs = []DC{{Name: "single"}}
	// The same offered load per worker as the sweep's FaultLoad.
	for _, in := range []InDCPolicy{InDCRoundRobin, InDCKV} {
		sc.InDC = in
		run, err := one(sc, Random, FaultLoad, "single-DC")
		if err != nil {
			return nil, err
		}
		if in == InDCKV {
			rep.SingleKV = run
		} else {
			rep.SingleRR = run
		}
	}
	return rep, nil
}

// WriteTable prints the report as tables.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "route: %d requests, %d DCs × %d workers (KV %d blocks of %d tokens each), worker capacity %.0f prompt tokens/s\n\n",
		r.Requests, len(r.Config.DCs), r.Config.WorkersPerDC, r.Config.KVBlocks, r.Config.BlockSize, r.WorkerRate)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\tpolicy\treuse\tprefill Mtok\tTTFT p50 ms\tp90\tp99\tE2E p50 ms\tp90\tp99\timbalance\tremote\t")
	for _, run := range r.Sweep {
		fmt.Fprintf(tw, "%.2f\t%s\t%.3f\t%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t\n", run.Load, run.Policy, run.Reuse,
			float64(run.PrefillTokens)/1e6, run.TTFTP50Ms, run.TTFTP90Ms, run.TTFTP99Ms, run.E2EP50Ms, run.E2EP90Ms, run.E2EP99Ms,
			run.Imbalance, run.RemoteShare)
	}
	tw.Flush()
	fmt.Fprintf(w, "\ncost against the others, per load (ratios < 1 favour cost):\n")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\tprefill vs oracle\tTTFT p50 vs oracle\tp50 vs least-load\tp99 vs least-load\tp50 vs prefix\tp99 vs prefix\tp50 vs best baseline\tp99 vs best baseline\t")
	for _, load := range r.Config.Loads {
		c, o, ll, px := r.find(load, Cost), r.find(load, Oracle), r.find(load, LeastLoad), r.find(load, Prefix)
		if c == nil {
			continue
		}
		b50, b99 := r.bestBaseline(load)
		fmt.Fprintf(tw, "%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", load,
			ratio(float64(c.PrefillTokens), o, func(x *Run) float64 { return float64(x.PrefillTokens) }),
			ratio(c.TTFTP50Ms, o, func(x *Run) float64 { return x.TTFTP50Ms }),
			ratio(c.TTFTP50Ms, ll, func(x *Run) float64 { return x.TTFTP50Ms }),
			ratio(c.TTFTP99Ms, ll, func(x *Run) float64 { return x.TTFTP99Ms }),
			ratio(c.TTFTP50Ms, px, func(x *Run) float64 { return x.TTFTP50Ms }),
			ratio(c.TTFTP99Ms, px, func(x *Run) float64 { return x.TTFTP99Ms }),
			div(c.TTFTP50Ms, b50), div(c.TTFTP99Ms, b99))
	}
	tw.Flush()
	if len(r.Fault) > 0 {
		fmt.Fprintf(w, "\nfault phase at load %.2f: %s's relay (lane and load) goes silent at the middle request; the indexer marks it stale after %v\n",
			FaultLoad, r.Config.DCs[0].Name, r.Config.StaleAfter)
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\treuse\tTTFT p50 ms\tp99\tE2E p99 ms\tshare to the silent DC after the fault\t")
		for _, run := range r.Fault {
			fmt.Fprintf(tw, "%s\t%.3f\t%.0f\t%.0f\t%.0f\t%.3f\t\n", run.Policy, run.Reuse, run.TTFTP50Ms, run.TTFTP99Ms, run.E2EP99Ms, run.AfterFaultShare)
		}
		tw.Flush()
	}
	if r.SingleRR != nil && r.SingleKV != nil {
		fmt.Fprintf(w, "\nsingle DC, %d workers, load %.2f: prefix reuse %.3f with round robin, %.3f with the KV router; TTFT p50 %.0f ms against %.0f ms\n",
			r.Config.WorkersPerDC, FaultLoad, r.SingleRR.Reuse, r.SingleKV.Reuse, r.SingleRR.TTFTP50Ms, r.SingleKV.TTFTP50Ms)
	}
}

func (r *Report) find(load float64, p Policy) *Run {
	for _, run := range r.Sweep {
		if run.Load == load && run.Policy == p {
			return run
		}
	}
	return nil
}

// bestBaseline is the lowest TTFT p50 and p99 among random, round robin,
// least load and prefix at load.
func (r *Report) bestBaseline(load float64) (p50, p99 float64) {
	for _, p := range []Policy{Random, RoundRobin, LeastLoad, Prefix} {
		if x := r.find(load, p); x != nil {
			if p50 == 0 || x.TTFTP50Ms < p50 {
				p50 = x.TTFTP50Ms
			}
			if p99 == 0 || x.TTFTP99Ms < p99 {
				p99 = x.TTFTP99Ms
			}
		}
	}
	return p50, p99
}

func ratio(v float64, other *Run, get func(*Run) float64) string {
	if other == nil {
		return "-"
	}
	return div(v, get(other))
}

func div(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", a/b)
}
