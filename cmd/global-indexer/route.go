package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/pkg/inflight"
	"github.com/ckfrelay/ckfrelay/pkg/route"
)

// routeOptions are the --route-* and --dc-* flags of POST /v1/route.
type routeOptions struct {
	policy       string
	stale        string
	temperature  time.Duration
	affinity     time.Duration
	defaultRTT   time.Duration
	rtts         string // dc=duration,...
	prefillRate  float64
	prefillRates string // dc=tokens/s,...
	blockSize    int
	inflight     bool
	inflightMax  int
}

func (r *routeOptions) register(fs *flag.FlagSet) {
	d := route.DefaultConfig()
	fs.StringVar(&r.policy, "route-policy", string(route.Cost), "default policy of POST /v1/route: cost, prefix, load, round-robin or random (a request may name another)")
	fs.StringVar(&r.stale, "route-stale", route.StaleExclude.String(), "what a route does with a stale or unready lane: exclude, or penalize (kept, with the stale penalty and an unready lane's depth as 0)")
	fs.DurationVar(&r.temperature, "route-temperature", 0, "softmax temperature of the cost policy (0: the cheapest DC, ties split by a hash of the request)")
	fs.DurationVar(&r.affinity, "route-affinity-margin", d.AffinityMargin, "the cost policy keeps the DC holding the deepest prefix unless another costs less by more than this (negative: off, the cheapest DC)")
	fs.DurationVar(&r.defaultRTT, "route-default-rtt", 0, "RTT to a DC --dc-rtt does not list")
	fs.StringVar(&r.rtts, "dc-rtt", "", "RTT from this router site to each DC, e.g. dc-a=5ms,dc-b=40ms (a request may override them with rtt_ms)")
	fs.Float64Var(&r.prefillRate, "route-prefill-rate", d.DefaultPrefillTokensPerSec, "prefill tokens/s of a DC --dc-prefill-rate does not list")
	fs.StringVar(&r.prefillRates, "dc-prefill-rate", "", "prefill tokens/s per DC (one worker's speed), e.g. dc-a=12000,dc-b=8000")
	fs.IntVar(&r.blockSize, "route-block-size", indexer.DefaultRouteBlockSize, "tokens per block of a route request given as hashes (a tokens request carries its own)")
	fs.BoolVar(&r.inflight, "route-inflight", true, "count each route's prompt tokens against the chosen DC until its load windows can show them, shared with the domain's other routers on ckfload.<domain>.<dc>.inflight (false: a route sees the last window only)")
	fs.IntVar(&r.inflightMax, "route-inflight-max-entries", inflight.DefaultMaxEntries, "in-flight entries kept per lane; past it a route drops the lane's oldest")
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
			return nil, fmt.Errorf("--%s %q: want a comma-separated list of dc=value", flagName, p)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--%s: %s given twice", flagName, name)
		}
		v, err := parse(val)
		if err != nil {
			return nil, fmt.Errorf("--%s %s: %w", flagName, name, err)
		}
		out[name] = v
	}
	return out, nil
}

// config is the indexer's RouteConfig of the flags.
func (r *routeOptions) config() (indexer.RouteConfig, error) {
	pol, err := route.ParsePolicy(r.policy)
	if err != nil {
		return indexer.RouteConfig{}, fmt.Errorf("--route-policy: %w", err)
	}
	stale, err := route.ParseStaleMode(r.stale)
	if err != nil {
		return indexer.RouteConfig{}, fmt.Errorf("--route-stale: %w", err)
	}
	rtts, err := pairs("dc-rtt", r.rtts, func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err == nil && d < 0 {
			err = fmt.Errorf("negative RTT %s", d)
		}
		return d, err
	})
	if err != nil {
		return indexer.RouteConfig{}, err
	}
	rates, err := pairs("dc-prefill-rate", r.prefillRates, func(v string) (float64, error) {
		f, err := strconv.ParseFloat(v, 64)
		if err == nil && !(f > 0) {
			err = fmt.Errorf("%v tokens/s: want a positive rate", f)
		}
		return f, err
	})
	if err != nil {
		return indexer.RouteConfig{}, err
	}
	switch {
	case !(r.prefillRate > 0):
		return indexer.RouteConfig{}, fmt.Errorf("--route-prefill-rate %v: want a positive rate", r.prefillRate)
	case r.temperature < 0 || r.defaultRTT < 0:
		return indexer.RouteConfig{}, fmt.Errorf("--route-temperature and --route-default-rtt must not be negative")
	case r.blockSize < 1:
		return indexer.RouteConfig{}, fmt.Errorf("--route-block-size %d: want at least 1", r.blockSize)
	case r.inflightMax < 1 || r.inflightMax > inflight.MaxEntriesLimit:
		return indexer.RouteConfig{}, fmt.Errorf("--route-inflight-max-entries %d: want 1..%d", r.inflightMax, inflight.MaxEntriesLimit)
	}
	pc := route.DefaultConfig()
	pc.Policy, pc.Stale, pc.Temperature, pc.DefaultRTT, pc.RTT = pol, stale, r.temperature, r.defaultRTT, rtts
	if pc.AffinityMargin = r.affinity; r.affinity == 0 {
		pc.AffinityMargin = -1 // 0 on the command line means no margin: the rule off
	}
	pc.DefaultPrefillTokensPerSec = r.prefillRate
	return indexer.RouteConfig{Policy: pc, PrefillRate: rates, BlockSize: r.blockSize,
		Inflight: indexer.InflightConfig{Off: !r.inflight, MaxEntries: r.inflightMax}}, nil
}
