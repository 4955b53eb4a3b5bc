package routesim

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// The load plane sweep: the relay's window interval, the engine bridge's
// scrape interval and the indexer's --load-max-age, each moved alone from
// the product's defaults, then the window and the scrape together (with
// the max age at its default).

// Knobs of the sweep.
const (
	KnobWindow = "window"
	KnobScrape = "scrape"
	KnobMaxAge = "max_age"
	// KnobWindowScrape moves the window and the scrape interval together.
	KnobWindowScrape = "window+scrape"
)

// SweepValues are the values the sweep tries, 50 ms to 1 s.
var SweepValues = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second}

// SweepPoint is one setting of the load plane and its rows.
type SweepPoint struct {
	Knob   string        `json:"knob"`
	Value  time.Duration `json:"value_ns"`
	Window time.Duration `json:"window_ns"`
	Scrape time.Duration `json:"scrape_ns"`
	MaxAge time.Duration `json:"max_age_ns"`
	// WindowMsgsPerSec is the relay's load windows per second per DC (one
	// pool a DC: 1/window); WorkerMsgsPerSec the engine bridges' worker
	// load reports per second per DC (workers/scrape), both on core NATS.
	WindowMsgsPerSec float64 `json:"window_msgs_per_s_per_dc"`
	WorkerMsgsPerSec float64 `json:"worker_msgs_per_s_per_dc"`
	Rows             []Row   `json:"rows"`
}

// SweepReport is the whole sweep.
type SweepReport struct {
	Config     Config
	RouterArgs []string
	Seeds      int
	Points     []*SweepPoint
}

// Sweep runs the load plane sweep over knobs (nil: all) for the Env's
// policies and loads.
func (e *Env) Sweep(knobs []string, o Options, progress func(format string, a ...any)) (*SweepReport, error) {
	if len(knobs) == 0 {
		knobs = []string{KnobWindow, KnobScrape, KnobMaxAge, KnobWindowScrape}
	}
	base, err := e.cfg.RouterSettings()
	if err != nil {
		return nil, err
	}
	seeds := max(o.Seeds, 1)
	rep := &SweepReport{Config: e.cfg, RouterArgs: e.cfg.RouterArgs(), Seeds: seeds}
	var jobs []job
	var cells [][]*Cell
	for _, k := range knobs {
		for _, v := range SweepValues {
			cfg := e.cfg
			cfg.RouterFlags = append([]string(nil), e.cfg.RouterFlags...)
			maxAge := base.LoadMaxAge
			switch k {
			case KnobWindow:
				cfg.WindowInterval = v
			case KnobScrape:
				cfg.ScrapeInterval = v
			case KnobMaxAge:
				maxAge = v
				cfg.RouterFlags = append(cfg.RouterFlags, "--load-max-age", v.String())
			case KnobWindowScrape:
				cfg.WindowInterval, cfg.ScrapeInterval = v, v
			default:
				return nil, fmt.Errorf("routesim: unknown sweep knob %q", k)
			}
			pt := &SweepPoint{Knob: k, Value: v, Window: cfg.WindowInterval, Scrape: cfg.ScrapeInterval, MaxAge: maxAge,
				WindowMsgsPerSec: float64(time.Second) / float64(cfg.WindowInterval),
				WorkerMsgsPerSec: float64(cfg.WorkersPerDC) * float64(time.Second) / float64(cfg.ScrapeInterval)}
			rep.Points = append(rep.Points, pt)
			var cs []*Cell
			for _, load := range cfg.Loads {
				for _, p := range cfg.Policies {
					c := &Cell{Runs: make([]*Run, seeds)}
					cs = append(cs, c)
					for s := range seeds {
						sc := cfg
						sc.Seed = cfg.Seed + uint64(s)
						jobs = append(jobs, job{cfg: sc, p: p, load: load, out: &c.Runs[s], what: k + "=" + v.String()})
					}
				}
			}
			cells = append(cells, cs)
		}
	}
	if err := runJobs(e, jobs, o.Parallel, progress); err != nil {
		return nil, err
	}
	for i, pt := range rep.Points {
		for _, c := range cells[i] {
			pt.Rows = append(pt.Rows, rowOf(c.Runs, e.cfg.Signal))
		}
	}
	return rep, nil
}

// WriteTable prints the sweep.
func (r *SweepReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "load plane sweep: defaults window %v, scrape %v; %d DCs × %d workers, %d seed(s)\nrouter: global-indexer %s\n\n",
		r.Config.WindowInterval, r.Config.ScrapeInterval, len(r.Config.DCs), r.Config.WorkersPerDC, r.Seeds, shellJoin(r.RouterArgs))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "knob\twindow\tscrape\tmax age\twindows/s/DC\tworker reports/s/DC\tload\tpolicy\treuse\tTTFT p50 ms\tp99\tE2E p99 ms\t")
	for _, pt := range r.Points {
		for _, row := range pt.Rows {
			fmt.Fprintf(tw, "%s\t%v\t%v\t%v\t%.1f\t%.1f\t%.2f\t%s\t%.3f\t%s\t%s\t%.0f\t\n", pt.Knob, pt.Window, pt.Scrape, pt.MaxAge,
				pt.WindowMsgsPerSec, pt.WorkerMsgsPerSec, row.Load, row.Policy, row.Reuse,
				pm(row.Stats[StatTTFTP50], "%.0f"), pm(row.Stats[StatTTFTP99], "%.0f"), row.E2EP99Ms)
		}
	}
	tw.Flush()
}

// shellJoin joins args for a shell, quoting those that need it.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}
