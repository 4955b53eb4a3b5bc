// Package routeflags is the command-line form of the router's
// configuration: the --route-*, --dc-* and --load-max-age flags of
// global-indexer, parsed into the indexer's RouteConfig and load age bound.
// ckf-bench builds its router from the same flags (Parse), so the router
// the benchmark measures is the one global-indexer runs with those flags.
package routeflags

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/inflight"
	"github.com/ckfrelay/ckfrelay/pkg/route"
)

// Flags holds the flag values until Settings reads them.
type Flags struct {
	policy       string
	stale        string
	temperature  time.Duration
	affinity     time.Duration
	defaultRTT   time.Duration
	rtts         string // dc=duration,...
	prefillRate  float64
	prefillRates string // dc=tokens/s,...
	queueRate    float64
	queueRates   string // dc=tokens/s,...
	blockSize    string // n[,domain=n,...]
	loadMaxAge   time.Duration
	inflight     bool
	inflightMax  int
	prefillSlow  float64
}

// Register defines the flags on fs with the product's defaults.
func (f *Flags) Register(fs *flag.FlagSet) {
	d := route.DefaultConfig()
	fs.StringVar(&f.policy, "route-policy", string(route.Cost), "default policy of POST /v1/route: cost, prefix, load (least-load), llm-d, sglang, dynamo, round-robin or random (a request may name another)")
	fs.StringVar(&f.stale, "route-stale", route.StaleExclude.String(), "what a route does with a stale or unready lane: exclude, or penalize (kept, with the stale penalty and an unready lane's depth as 0)")
	fs.DurationVar(&f.temperature, "route-temperature", 0, "softmax temperature of the cost policy (0: the cheapest DC, ties split by a hash of the request)")
	fs.DurationVar(&f.affinity, "route-affinity-margin", d.AffinityMargin, "the cost policy keeps the DC holding the deepest prefix unless another costs less by more than this (0 or negative: off, the cheapest DC)")
	fs.DurationVar(&f.defaultRTT, "route-default-rtt", 0, "RTT to a DC --dc-rtt does not list (a DC named by another --dc-* flag must have an RTT: from --dc-rtt or from this flag)")
	fs.StringVar(&f.rtts, "dc-rtt", "", "RTT from this router site to each DC, e.g. dc-a=5ms,dc-b=40ms (a request may override them with rtt_ms)")
	fs.Float64Var(&f.prefillRate, "route-prefill-rate", d.DefaultPrefillTokensPerSec, "prefill tokens/s of one worker of a DC --dc-prefill-rate does not list")
	fs.StringVar(&f.prefillRates, "dc-prefill-rate", "", "prefill tokens/s per DC (one worker's speed: a request's own prefill), e.g. dc-a=12000,dc-b=8000")
	fs.Float64Var(&f.queueRate, "route-queue-rate", 0, "tokens/s at which a DC --dc-queue-rate does not list drains its queued prefill when its load reports no worker count (0: its prefill rate, one worker)")
	fs.StringVar(&f.queueRates, "dc-queue-rate", "", "tokens/s at which each DC drains its queued prefill (all its workers), e.g. dc-a=96000; a DC not listed drains at the workers its load windows count × its prefill rate")
	fs.StringVar(&f.blockSize, "route-block-size", strconv.Itoa(follow.DefaultRouteBlockSize), "tokens per block of a route request given as hashes (a tokens request carries its own): a default, then per domain, e.g. 16,demo-2=32")
	fs.BoolVar(&f.inflight, "route-inflight", true, "count each route's prompt tokens against the chosen DC until its load windows can show them, shared with the domain's other routers on ckfload.<domain>.<dc>.inflight (false: a route sees the last window only)")
	fs.IntVar(&f.inflightMax, "route-inflight-max-entries", inflight.DefaultMaxEntries, "in-flight entries kept per lane; past it a route drops the lane's oldest")
	fs.Float64Var(&f.prefillSlow, "route-inflight-prefill-slowdown", follow.DefaultInflightPrefillSlowdown, "for a DC whose load estimates its prefill from request counts (vLLM's and SGLang's /metrics), a routed prompt stays in the in-flight account while it is prefilled, at one worker's prefill rate ÷ this (1 to 100)")
	fs.DurationVar(&f.loadMaxAge, "load-max-age", follow.DefaultLoadMaxAge,
		"drop a lane's load (from its relay's load windows or kvrelay load streams) older than this, by local receive time; it then counts as missing, never as zero")
}

// Settings is what the flags configure.
type Settings struct {
	Route      follow.RouteConfig
	LoadMaxAge time.Duration
}

// FlagError is a bad flag value; Flag names it (without dashes).
type FlagError struct {
	Flag string
	Err  error
}

func (e *FlagError) Error() string { return fmt.Sprintf("--%s: %v", e.Flag, e.Err) }
func (e *FlagError) Unwrap() error { return e.Err }

func bad(name, format string, a ...any) error {
	return &FlagError{Flag: name, Err: fmt.Errorf(format, a...)}
}

// pairs parses name=value,... with value read by parse.
func pairs[T any](flagName, s string, parse func(string) (T, error)) (map[string]T, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]T{}
	for _, p := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || name == "" {
			return nil, bad(flagName, "%q: want a comma-separated list of name=value", p)
		}
		if _, dup := out[name]; dup {
			return nil, bad(flagName, "%s given twice", name)
		}
		v, err := parse(val)
		if err != nil {
			return nil, bad(flagName, "%s: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

func positiveRate(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err == nil && (!(f > 0) || f > 1e12) {
		err = fmt.Errorf("%v tokens/s: want a positive rate up to 1e12", f)
	}
	return f, err
}

func blockSize(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err == nil && (n < 1 || n > api.MaxBlockSize) {
		err = fmt.Errorf("%d: want 1..%d", n, api.MaxBlockSize)
	}
	return n, err
}

// Settings checks the values and returns what they configure. A DC named
// by --dc-prefill-rate or --dc-queue-rate must have an RTT, from --dc-rtt
// or an explicit --route-default-rtt: a DC without one would otherwise
// look nearest.
func (f *Flags) Settings() (Settings, error) {
	pol, err := route.ParsePolicy(f.policy)
	if err != nil {
		return Settings{}, bad("route-policy", "%w", err)
	}
	stale, err := route.ParseStaleMode(f.stale)
	if err != nil {
		return Settings{}, bad("route-stale", "%w", err)
	}
	rtts, err := pairs("dc-rtt", f.rtts, func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err == nil && (d < 0 || d > time.Hour) {
			err = fmt.Errorf("RTT %s: want 0..1h", d)
		}
		return d, err
	})
	if err != nil {
		return Settings{}, err
	}
	rates, err := pairs("dc-prefill-rate", f.prefillRates, positiveRate)
	if err != nil {
		return Settings{}, err
	}
	queues, err := pairs("dc-queue-rate", f.queueRates, positiveRate)
	if err != nil {
		return Settings{}, err
	}
	def, perDomain, _ := strings.Cut(f.blockSize, ",")
	bs, err := blockSize(def)
	if err != nil {
		return Settings{}, bad("route-block-size", "default %w", err)
	}
	domainBS, err := pairs("route-block-size", perDomain, blockSize)
	if err != nil {
		return Settings{}, err
	}
	switch {
	case !(f.prefillRate > 0) || f.prefillRate > 1e12:
		return Settings{}, bad("route-prefill-rate", "%v: want a positive rate up to 1e12", f.prefillRate)
	case f.queueRate < 0 || f.queueRate > 1e12:
		return Settings{}, bad("route-queue-rate", "%v: want 0 (the prefill rate) or a positive rate up to 1e12", f.queueRate)
	case f.temperature < 0:
		return Settings{}, bad("route-temperature", "%s: must not be negative", f.temperature)
	case f.defaultRTT < 0:
		return Settings{}, bad("route-default-rtt", "%s: must not be negative", f.defaultRTT)
	case f.loadMaxAge <= 0:
		return Settings{}, bad("load-max-age", "%s: want a positive duration", f.loadMaxAge)
	case f.inflightMax < 1 || f.inflightMax > inflight.MaxEntriesLimit:
		return Settings{}, bad("route-inflight-max-entries", "%d: want 1..%d", f.inflightMax, inflight.MaxEntriesLimit)
	case !(f.prefillSlow >= 1 && f.prefillSlow <= follow.MaxInflightPrefillSlowdown):
		return Settings{}, bad("route-inflight-prefill-slowdown", "%v: want 1..%v", f.prefillSlow, follow.MaxInflightPrefillSlowdown)
	}
	pc := route.DefaultConfig()
	pc.Policy, pc.Stale, pc.Temperature, pc.DefaultRTT, pc.RTT = pol, stale, f.temperature, f.defaultRTT, rtts
	for _, named := range []struct {
		flag string
		dcs  []string
	}{{"dc-prefill-rate", slices.Sorted(maps.Keys(rates))}, {"dc-queue-rate", slices.Sorted(maps.Keys(queues))}} {
		if miss := pc.MissingRTT(named.dcs); len(miss) > 0 {
			return Settings{}, bad(named.flag, "DC %s has no RTT: add it to --dc-rtt (or set --route-default-rtt)", strings.Join(miss, ", "))
		}
	}
	if pc.AffinityMargin = f.affinity; f.affinity == 0 {
		pc.AffinityMargin = -1 // 0 on the command line means no margin: the rule off
	}
	pc.DefaultPrefillTokensPerSec = f.prefillRate
	pc.DefaultQueueTokensPerSec, pc.QueueTokensPerSec = f.queueRate, queues
	return Settings{
		Route: follow.RouteConfig{Policy: pc, PrefillRate: rates, BlockSize: bs, DomainBlockSize: domainBS,
			Inflight: follow.InflightConfig{Off: !f.inflight, MaxEntries: f.inflightMax, PrefillSlowdown: f.prefillSlow}},
		LoadMaxAge: f.loadMaxAge,
	}, nil
}

// ErrNotRouteFlag is returned by Parse for an argument that is not one of
// the router's flags.
var ErrNotRouteFlag = errors.New("routeflags: not a router flag")

// Parse reads args, global-indexer's router flags alone (as ckf-bench's
// router_flags), into Settings.
func Parse(args []string) (Settings, error) {
	fs := flag.NewFlagSet("router flags", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f Flags
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		return Settings{}, fmt.Errorf("%w: %w", ErrNotRouteFlag, err)
	}
	if fs.NArg() > 0 {
		return Settings{}, fmt.Errorf("%w: %q", ErrNotRouteFlag, fs.Args())
	}
	return f.Settings()
}

// Effective is the effective configuration: pkg/route's Config with its
// defaults filled in, the indexer's per-DC rates and block sizes, and the
// load age bound. It is what global-indexer --print-route-config prints.
type Effective struct {
	Route           route.Config          `json:"route"`
	PrefillRate     map[string]float64    `json:"prefill_rate"`
	BlockSize       int                   `json:"block_size"`
	DomainBlockSize map[string]int        `json:"domain_block_size"`
	Inflight        follow.InflightConfig `json:"inflight"`
	LoadMaxAge      time.Duration         `json:"load_max_age_ns"`
}

// Effective returns the effective configuration of s.
func (s Settings) Effective() Effective {
	return Effective{Route: route.New(s.Route.Policy).Config(), PrefillRate: s.Route.PrefillRate,
		BlockSize: s.Route.BlockSize, DomainBlockSize: s.Route.DomainBlockSize, Inflight: s.Route.Inflight, LoadMaxAge: s.LoadMaxAge}
}

// JSON is the indented JSON of the effective configuration.
func (s Settings) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(s.Effective(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("routeflags: %w", err)
	}
	return append(b, '\n'), nil
}
