package main

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/internal/routeflags"
	"github.com/ckfrelay/ckfrelay/internal/routesim"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/inflight"
	"github.com/ckfrelay/ckfrelay/pkg/route"
)

// The route flags reach the indexer's RouteConfig, and bad values are
// usage errors naming their flag.
func TestRouteFlags(t *testing.T) {
	o, err := parseFlags([]string{"--route-policy", "prefix", "--route-stale", "penalize", "--route-temperature", "20ms",
		"--route-affinity-margin", "250ms",
		"--dc-rtt", "dc-a=5ms,dc-b=40ms", "--route-default-rtt", "100ms", "--dc-prefill-rate", "dc-a=12000",
		"--route-prefill-rate", "8000", "--route-block-size", "64,staging=32", "--load-max-age", "3s",
		"--dc-queue-rate", "dc-b=64000", "--route-queue-rate", "20000", "--route-inflight=false", "--route-inflight-max-entries", "100"}, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config(zerolog.Nop(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Route
	if r.Policy.Policy != route.Prefix || r.Policy.Stale != route.StalePenalize || r.Policy.Temperature != 20*time.Millisecond ||
		r.Policy.AffinityMargin != 250*time.Millisecond ||
		r.Policy.RTT["dc-b"] != 40*time.Millisecond || r.Policy.DefaultRTT != 100*time.Millisecond || r.PrefillRate["dc-a"] != 12000 ||
		r.Policy.DefaultPrefillTokensPerSec != 8000 || r.BlockSize != 64 || cfg.LoadMaxAge != 3*time.Second ||
		r.Policy.QueueTokensPerSec["dc-b"] != 64000 || r.Policy.DefaultQueueTokensPerSec != 20000 || r.DomainBlockSize["staging"] != 32 ||
		!r.Inflight.Off || r.Inflight.MaxEntries != 100 {
		t.Fatalf("route config %+v, load max age %s", r, cfg.LoadMaxAge)
	}
	for flag, want := range map[string]time.Duration{"": route.AffinityMarginDefault, "0s": -1, "-1s": -time.Second} {
		args := []string{}
		if flag != "" {
			args = []string{"--route-affinity-margin", flag}
		}
		o, err := parseFlags(args, envOf(nil), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		c, err := o.config(zerolog.Nop(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Route.Inflight.Off || c.Route.Inflight.MaxEntries != inflight.DefaultMaxEntries {
			t.Errorf("the in-flight account is not on by default: %+v", c.Route.Inflight)
		}
		if got := c.Route.Policy.AffinityMargin; got != want {
			t.Errorf("--route-affinity-margin %q: margin %v, want %v", flag, got, want)
		}
	}
	for _, bad := range [][]string{
		{"--route-policy", "fastest"}, {"--route-stale", "ignore"}, {"--dc-rtt", "dc-a"}, {"--dc-rtt", "dc-a=-5ms"},
		{"--dc-rtt", "dc-a=5ms,dc-a=6ms"}, {"--dc-prefill-rate", "dc-a=0"}, {"--route-prefill-rate", "0"}, {"--route-block-size", "0"},
		{"--load-max-age", "0s"}, {"--route-inflight-max-entries", "0"}, {"--dc-queue-rate", "dc-a=-1"}, {"--route-queue-rate", "-5"}, {"--route-block-size", "16,demo=0"},
		{"--route-block-size", "x"}, {"--route-block-size", "16,demo"},
		// A DC with a rate but no RTT would look nearest.
		{"--dc-prefill-rate", "dc-c=9000", "--dc-rtt", "dc-a=5ms"}, {"--dc-queue-rate", "dc-c=9000"},
	} {
		if _, err := parseFlags(bad, envOf(nil), io.Discard); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), strings.TrimPrefix(bad[0], "--")) {
			t.Fatalf("%v: %v", bad, err)
		}
	}
}

// --print-route-config prints the effective configuration and exits
// without connecting to anything; a DC with a rate and no RTT is accepted
// once --route-default-rtt gives every DC one.
func TestPrintRouteConfig(t *testing.T) {
	var out, errOut strings.Builder
	args := []string{"--print-route-config", "--dc-rtt", "dc-a=5ms", "--dc-queue-rate", "dc-a=80000,dc-z=1000", "--route-default-rtt", "200ms",
		"--route-block-size", "16,demo-2=32"}
	if code := run(t.Context(), args, envOf(nil), &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var got routeflags.Effective
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if got.Route.RTT["dc-a"] != 5*time.Millisecond || got.Route.DefaultRTT != 200*time.Millisecond || got.Route.QueueTokensPerSec["dc-z"] != 1000 ||
		got.DomainBlockSize["demo-2"] != 32 || got.BlockSize != 16 || got.LoadMaxAge != follow.DefaultLoadMaxAge ||
		got.Route.AffinityMargin != route.AffinityMarginDefault || got.Route.WaitingRequestTokens == 0 {
		t.Fatalf("effective config %+v", got)
	}
	if code := run(t.Context(), []string{"--print-route-config", "--dc-queue-rate", "dc-z=1000"}, envOf(nil), &out, &errOut); code != exitUsage {
		t.Fatalf("a DC without an RTT: exit %d", code)
	}
}

// The routing benchmark's router is this binary's: its configuration is
// what --print-route-config prints for its router_flags.
func TestBenchmarkRouterIsTheProducts(t *testing.T) {
	reqs, err := replay.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	cfg := routesim.DefaultConfig()
	cfg.RouterFlags = []string{"--route-affinity-margin", "250ms"}
	env, err := routesim.NewEnv(cfg, reqs[:60])
	if err != nil {
		t.Fatal(err)
	}
	args := env.Config().RouterArgs()
	bench, err := env.Config().RouterSettings()
	if err != nil {
		t.Fatal(err)
	}
	want, err := bench.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	if code := run(t.Context(), append([]string{"--print-route-config"}, args...), envOf(nil), &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if out.String() != string(want) {
		t.Fatalf("global-indexer %q prints\n%s\nthe benchmark routes with\n%s", args, out.String(), want)
	}
	if bench.Route.PrefillRate["dc-a"] <= 0 || bench.Route.Policy.RTT["dc-d"] != 150*time.Millisecond || bench.Route.Policy.AffinityMargin != 250*time.Millisecond {
		t.Fatalf("the fleet's facts or the flags are missing: %+v", bench.Route)
	}
}
