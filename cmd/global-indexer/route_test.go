package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/pkg/inflight"
	"github.com/ckfrelay/ckfrelay/pkg/route"
)

// The route flags reach the indexer's RouteConfig, and bad values are
// usage errors naming their flag.
func TestRouteFlags(t *testing.T) {
	o, err := parseFlags([]string{"--route-policy", "prefix", "--route-stale", "penalize", "--route-temperature", "20ms",
		"--route-affinity-margin", "250ms",
		"--dc-rtt", "dc-a=5ms,dc-b=40ms", "--route-default-rtt", "100ms", "--dc-prefill-rate", "dc-a=12000",
		"--route-prefill-rate", "8000", "--route-block-size", "64", "--load-max-age", "3s",
		"--route-inflight=false", "--route-inflight-max-entries", "100"}, envOf(nil), io.Discard)
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
		{"--load-max-age", "0s"}, {"--route-inflight-max-entries", "0"},
	} {
		if _, err := parseFlags(bad, envOf(nil), io.Discard); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), strings.TrimPrefix(bad[0], "--")) {
			t.Fatalf("%v: %v", bad, err)
		}
	}
}
