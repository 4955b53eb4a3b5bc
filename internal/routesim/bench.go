package routesim

import (
	"fmt"
	"io"
	"runtime"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/replay"
)

// FaultLoad is the load of the fault phase.
const FaultLoad = 0.7

// Options are a benchmark's runs beyond the fleet.
type Options struct {
	// Seeds runs every (load, policy) cell with seeds Config.Seed ..
	// Config.Seed+Seeds-1 (0: one).
	Seeds int
	// Parallel runs this many simulations at once (0: GOMAXPROCS). Each
	// run is deterministic whatever the parallelism.
	Parallel int
	// NoFault skips the fault phase and the single-DC check.
	NoFault bool
}

// Row is one (policy, load) cell: every field of Result is the mean over
// the seeds, Stats the seed statistics of the headline measures. Its JSON
// keys are the benchmark's machine-readable contract.
type Row struct {
	Result
	Signal Signal          `json:"signal"`
	Seeds  int             `json:"seeds"`
	Stats  map[string]Stat `json:"stats"`
}

// The measures Row.Stats holds.
const (
	StatTTFTP50   = "ttft_p50_ms"
	StatTTFTP99   = "ttft_p99_ms"
	StatE2EP50    = "e2e_p50_ms"
	StatE2EP99    = "e2e_p99_ms"
	StatReuse     = "reuse"
	StatPrefill   = "prefill_tokens"
	StatImbalance = "imbalance"
)

// Cell is a row with its runs, one per seed.
type Cell struct {
	Row
	Runs []*Run
}

// Report is a whole benchmark: the sweep, the fault phase and the single-DC
// check.
type Report struct {
	Config Config
	// RouterArgs is the global-indexer command line of the router.
	RouterArgs []string
	// WorkerRate is one worker's calibrated capacity (prompt tokens/s).
	WorkerRate float64
	Requests   int
	Seeds      int
	// Sweep holds one cell per (load, policy), loads outermost.
	Sweep []*Cell
	// Fault holds one run per policy at FaultLoad with DC 0's relay silent
	// from the middle request on (first seed).
	Fault []*Run
	// SingleRR and SingleKV are one DC of the same workers, round robin
	// against the KV router inside the DC, at FaultLoad.
	SingleRR, SingleKV *Run
}

// Rows is the sweep's machine-readable rows.
func (r *Report) Rows() []Row {
	out := make([]Row, len(r.Sweep))
	for i, c := range r.Sweep {
		out[i] = c.Row
	}
	return out
}

// job is one simulation of a batch.
type job struct {
	cfg  Config
	p    Policy
	load float64
	out  **Run
	what string
}

// runJobs runs jobs on par goroutines; the first error wins.
func runJobs(env *Env, jobs []job, par int, progress func(string, ...any)) error {
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	var (
		mu   sync.Mutex
		next int
		errs error
		wg   sync.WaitGroup
	)
	for range min(par, len(jobs)) {
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= len(jobs) || errs != nil {
					mu.Unlock()
					return
				}
				j := &jobs[next]
				next++
				mu.Unlock()
				start := time.Now()
				run, err := env.RunWith(j.cfg, j.p, j.load)
				mu.Lock()
				if err != nil {
					if errs == nil {
						errs = fmt.Errorf("%s %s at %.2f, seed %d: %w", j.what, j.p, j.load, j.cfg.Seed, err)
					}
				} else {
					*j.out = run
					progress("route: %s %-11s load %.2f seed %d: reuse %.3f, TTFT p50 %.0f ms (%v)", j.what, j.p, j.load, j.cfg.Seed,
						run.Reuse, run.TTFTP50Ms, time.Since(start).Round(time.Millisecond))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

// Bench runs the benchmark. progress, when not nil, hears about each run.
func Bench(cfg Config, reqs []replay.Request, o Options, progress func(format string, a ...any)) (*Report, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	env, err := NewEnv(cfg, reqs)
	if err != nil {
		return nil, err
	}
	return env.Bench(o, progress)
}

// Bench runs the benchmark on the Env's trace and fleet.
func (e *Env) Bench(o Options, progress func(format string, a ...any)) (*Report, error) {
	seeds := max(o.Seeds, 1)
	cfg := e.cfg
	rep := &Report{Config: cfg, RouterArgs: cfg.RouterArgs(), WorkerRate: e.WorkerPrefillRate(), Requests: len(e.trace), Seeds: seeds}
	var jobs []job
	for _, load := range cfg.Loads {
		for _, p := range cfg.Policies {
			c := &Cell{Runs: make([]*Run, seeds)}
			rep.Sweep = append(rep.Sweep, c)
			for s := range seeds {
				sc := cfg
				sc.Seed = cfg.Seed + uint64(s)
				jobs = append(jobs, job{cfg: sc, p: p, load: load, out: &c.Runs[s], what: "sweep"})
			}
		}
	}
	if !o.NoFault {
		fc := cfg
		fc.FaultDC = 0
		rep.Fault = make([]*Run, len(cfg.Policies))
		for i, p := range cfg.Policies {
			jobs = append(jobs, job{cfg: fc, p: p, load: FaultLoad, out: &rep.Fault[i], what: "fault"})
		}
		sc := cfg
		sc.DCs = []DC{{Name: "single"}}
		// The same offered load per worker as the sweep's FaultLoad.
		sc.InDC = InDCRoundRobin
		jobs = append(jobs, job{cfg: sc, p: Random, load: FaultLoad, out: &rep.SingleRR, what: "single-DC"})
		sc.InDC = InDCKV
		jobs = append(jobs, job{cfg: sc, p: Random, load: FaultLoad, out: &rep.SingleKV, what: "single-DC"})
	}
	var mu sync.Mutex
	if err := runJobs(e, jobs, o.Parallel, func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		progress(format, a...)
	}); err != nil {
		return nil, err
	}
	for _, c := range rep.Sweep {
		c.Row = rowOf(c.Runs, cfg.Signal)
	}
	return rep, nil
}

// rowOf is the mean row of one cell's runs, with their statistics.
func rowOf(runs []*Run, signal Signal) Row {
	n := float64(len(runs))
	row := Row{Signal: signal, Seeds: len(runs), Stats: map[string]Stat{}}
	row.Policy, row.Load = runs[0].Policy, runs[0].Load
	get := func(f func(*Run) float64) []float64 {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = f(r)
		}
		return xs
	}
	mean := func(f func(*Run) float64) float64 {
		s := 0.0
		for _, x := range get(f) {
			s += x
		}
		return s / n
	}
	row.Reuse = mean(func(r *Run) float64 { return r.Reuse })
	row.PrefillTokens = int64(mean(func(r *Run) float64 { return float64(r.PrefillTokens) }) + 0.5)
	row.TTFTP50Ms = mean(func(r *Run) float64 { return r.TTFTP50Ms })
	row.TTFTP90Ms = mean(func(r *Run) float64 { return r.TTFTP90Ms })
	row.TTFTP99Ms = mean(func(r *Run) float64 { return r.TTFTP99Ms })
	row.E2EP50Ms = mean(func(r *Run) float64 { return r.E2EP50Ms })
	row.E2EP99Ms = mean(func(r *Run) float64 { return r.E2EP99Ms })
	row.Imbalance = mean(func(r *Run) float64 { return r.Imbalance })
	row.RemoteShare = mean(func(r *Run) float64 { return r.RemoteShare })
	row.Tail = Tail{
		Requests:     runs[0].Tail.Requests,
		InputTokens:  mean(func(r *Run) float64 { return r.Tail.InputTokens }),
		CachedTokens: mean(func(r *Run) float64 { return r.Tail.CachedTokens }),
		TTFTMs:       mean(func(r *Run) float64 { return r.Tail.TTFTMs }),
		RTTMs:        mean(func(r *Run) float64 { return r.Tail.RTTMs }),
		PrefillMs:    mean(func(r *Run) float64 { return r.Tail.PrefillMs }),
		WaitMs:       mean(func(r *Run) float64 { return r.Tail.WaitMs }),
	}
	for name, f := range map[string]func(*Run) float64{
		StatTTFTP50: func(r *Run) float64 { return r.TTFTP50Ms }, StatTTFTP99: func(r *Run) float64 { return r.TTFTP99Ms },
		StatE2EP50: func(r *Run) float64 { return r.E2EP50Ms }, StatE2EP99: func(r *Run) float64 { return r.E2EP99Ms },
		StatReuse: func(r *Run) float64 { return r.Reuse }, StatPrefill: func(r *Run) float64 { return float64(r.PrefillTokens) },
		StatImbalance: func(r *Run) float64 { return r.Imbalance },
	} {
		row.Stats[name] = statOf(get(f))
	}
	return row
}

// pm formats a stat as mean ± its 95% half-width.
func pm(s Stat, format string) string {
	if s.CI95 == 0 {
		return fmt.Sprintf(format, s.Mean)
	}
	return fmt.Sprintf(format+" ±"+format, s.Mean, s.CI95)
}

// WriteTable prints the report as tables.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "route: %d requests, %d DCs × %d workers (KV %d blocks of %d tokens each), worker capacity %.0f prompt tokens/s, signal %s, %d seed(s)\n",
		r.Requests, len(r.Config.DCs), r.Config.WorkersPerDC, r.Config.KVBlocks, r.Config.BlockSize, r.WorkerRate, r.Config.Signal, r.Seeds)
	fmt.Fprintf(w, "load plane: relay window %v, engine scrape %v, relay publish %v, lane stale after %v\n",
		r.Config.WindowInterval, r.Config.ScrapeInterval, r.Config.FlushInterval, r.Config.LaneStaleAfter)
	fmt.Fprintf(w, "router: global-indexer %s\n\n", shellJoin(r.RouterArgs))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\tpolicy\treuse\tprefill Mtok\tTTFT p50 ms\tp90\tp99\tE2E p50 ms\tp99\timbalance\tremote\t")
	for _, c := range r.Sweep {
		fmt.Fprintf(tw, "%.2f\t%s\t%s\t%.2f\t%s\t%.0f\t%s\t%s\t%s\t%.2f\t%.2f\t\n", c.Load, c.Policy, pm(c.Stats[StatReuse], "%.3f"),
			float64(c.PrefillTokens)/1e6, pm(c.Stats[StatTTFTP50], "%.0f"), c.TTFTP90Ms, pm(c.Stats[StatTTFTP99], "%.0f"),
			pm(c.Stats[StatE2EP50], "%.0f"), pm(c.Stats[StatE2EP99], "%.0f"), c.Imbalance, c.RemoteShare)
	}
	tw.Flush()
	if r.Seeds > 1 {
		fmt.Fprintf(w, "(mean over %d seeds ± the half-width of its 95%% t-interval)\n", r.Seeds)
	}
	fmt.Fprintf(w, "\nthe tail: the slowest %.0f%% of the requests by TTFT, their mean TTFT split into the RTT, the prefill of their uncached tokens on an idle worker, and the rest (waiting for and sharing a worker)\n", TailShare*100)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\tpolicy\trequests\tinput tokens\tcached\tTTFT ms\tRTT\tprefill\twait\t")
	for _, c := range r.Sweep {
		t := c.Tail
		fmt.Fprintf(tw, "%.2f\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", c.Load, c.Policy, t.Requests, t.InputTokens, t.CachedTokens, t.TTFTMs, t.RTTMs, t.PrefillMs, t.WaitMs)
	}
	tw.Flush()
	fmt.Fprintf(w, "\ncost against the others, per load (mean ratios; < 1 favours cost):\n")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\tprefill vs oracle\tTTFT p50 vs oracle\tp50 vs least-load\tp99 vs least-load\tp50 vs prefix\tp99 vs prefix\tp50 vs best other\tp99 vs best other\tleast-load p50 / cost p50\t")
	for _, load := range r.Config.Loads {
		c, o, ll, px := r.find(load, Cost), r.find(load, Oracle), r.find(load, LeastLoad), r.find(load, Prefix)
		if c == nil {
			continue
		}
		b50, b99 := r.bestOther(load)
		fmt.Fprintf(tw, "%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", load,
			ratio(float64(c.PrefillTokens), o, func(x *Cell) float64 { return float64(x.PrefillTokens) }),
			ratio(c.TTFTP50Ms, o, func(x *Cell) float64 { return x.TTFTP50Ms }),
			ratio(c.TTFTP50Ms, ll, func(x *Cell) float64 { return x.TTFTP50Ms }),
			ratio(c.TTFTP99Ms, ll, func(x *Cell) float64 { return x.TTFTP99Ms }),
			ratio(c.TTFTP50Ms, px, func(x *Cell) float64 { return x.TTFTP50Ms }),
			ratio(c.TTFTP99Ms, px, func(x *Cell) float64 { return x.TTFTP99Ms }),
			div(c.TTFTP50Ms, b50), div(c.TTFTP99Ms, b99), invRatio(c.TTFTP50Ms, ll))
	}
	tw.Flush()
	if len(r.Fault) > 0 {
		fmt.Fprintf(w, "\nfault phase at load %.2f, seed %d: %s's relay (lane and load) goes silent at the middle request; the indexer marks it stale after %v\n",
			FaultLoad, r.Config.Seed, r.Config.DCs[0].Name, r.Config.LaneStaleAfter)
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

func (r *Report) find(load float64, p Policy) *Cell {
	for _, c := range r.Sweep {
		if c.Load == load && c.Policy == p {
			return c
		}
	}
	return nil
}

// bestOther is the lowest mean TTFT p50 and p99 among the policies other
// than cost and the oracle at load.
func (r *Report) bestOther(load float64) (p50, p99 float64) {
	for _, c := range r.Sweep {
		if c.Load != load || c.Policy == Cost || c.Policy == Oracle {
			continue
		}
		if p50 == 0 || c.TTFTP50Ms < p50 {
			p50 = c.TTFTP50Ms
		}
		if p99 == 0 || c.TTFTP99Ms < p99 {
			p99 = c.TTFTP99Ms
		}
	}
	return p50, p99
}

func ratio(v float64, other *Cell, get func(*Cell) float64) string {
	if other == nil {
		return "-"
	}
	return div(v, get(other))
}

func invRatio(v float64, other *Cell) string {
	if other == nil {
		return "-"
	}
	return div(other.TTFTP50Ms, v)
}

func div(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", a/b)
}
