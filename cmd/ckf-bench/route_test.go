package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRouteMode(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--only", "route"}, true},
		{[]string{"--only=route", "--json", "x"}, true},
		{[]string{"-only", "route"}, true},
		{[]string{"--only", "search"}, false},
		{[]string{"--only", "search,route"}, false},
		{nil, false},
	} {
		if got := routeMode(tc.args); got != tc.want {
			t.Errorf("routeMode(%q) = %v", tc.args, got)
		}
	}
}

// ckf-bench --only route on a short piece of the trace: the table, the JSON
// file with exactly its keys, one object per (policy, load), and the plots.
func TestRouteBench(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "route.json")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"--only", "route", "--requests", "150", "--loads", "0.6,0.9", "--seeds", "2",
		"--policies", "least-load,cost,oracle", "--workers", "2", "--json", out, "--plots", dir, "--quiet",
		"--router-flags", "--route-affinity-margin 300ms"}, func(string) string { return "" }, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, s := range []string{"TTFT p50 ms", "prefill vs oracle", "fault phase", "single DC"} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, stdout.String())
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		RouterFlags []string         `json:"router_flags"`
		Rows        []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Rows) != 6 {
		t.Fatalf("%d rows, want 6", len(doc.Rows))
	}
	// The router's command line: the fleet's facts, then --router-flags.
	if n := len(doc.RouterFlags); n < 6 || doc.RouterFlags[0] != "--dc-rtt" || doc.RouterFlags[n-2] != "--route-affinity-margin" || doc.RouterFlags[n-1] != "300ms" {
		t.Fatalf("router flags %q", doc.RouterFlags)
	}
	for _, r := range doc.Rows {
		stats, _ := r["stats"].(map[string]any)
		p50, _ := stats["ttft_p50_ms"].(map[string]any)
		tail, _ := r["tail"].(map[string]any)
		if len(r) != 15 || len(tail) != 7 || tail["wait_ms"] == nil || r["policy"] == nil || r["ttft_p99_ms"] == nil || r["remote_share"] == nil || r["seeds"] != 2.0 || r["signal"] != "prefill" ||
			len(stats) != 7 || p50["mean"] != r["ttft_p50_ms"] || p50["ci95"] == nil {
			t.Fatalf("row %v", r)
		}
	}
	for _, f := range []string{"route-ttft-cdf-load60.svg", "route-ttft-cdf-load90.svg", "route-reuse-vs-load.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	for _, bad := range [][]string{{"--policies", "nearest"}, {"--router-flags", "--nats-url x"}, {"--router-flags", "--dc-queue-rate dc-z=5"},
		{"--seeds", "0"}, {"--signal", "tokens"}, {"--sweep-load-plane", "heartbeat"}} {
		if code := run(t.Context(), append([]string{"--only", "route"}, bad...), func(string) string { return "" }, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d", bad, code)
		}
	}
}

// The load plane sweep: every knob at every value, with its NATS cost.
func TestRouteSweep(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sweep.json")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"--only", "route", "--requests", "120", "--loads", "0.9", "--policies", "cost", "--workers", "2",
		"--sweep-load-plane", "window,max_age", "--trace", "synthetic", "--json", out, "--quiet"}, func(string) string { return "" }, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Points []struct {
			Knob             string           `json:"knob"`
			Window           int64            `json:"window_ns"`
			MaxAge           int64            `json:"max_age_ns"`
			WindowMsgsPerSec float64          `json:"window_msgs_per_s_per_dc"`
			WorkerMsgsPerSec float64          `json:"worker_msgs_per_s_per_dc"`
			Rows             []map[string]any `json:"rows"`
		} `json:"points"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Points) != 10 {
		t.Fatalf("%d points, want 10", len(doc.Points))
	}
	p := doc.Points[0] // window 50 ms: 20 windows/s; the default scrape (200 ms) of 2 workers
	if p.Knob != "window" || p.Window != 50e6 || p.WindowMsgsPerSec != 20 || p.WorkerMsgsPerSec != 10 || len(p.Rows) != 1 {
		t.Fatalf("point %+v", p)
	}
	if q := doc.Points[5]; q.Knob != "max_age" || q.MaxAge != 50e6 || q.WindowMsgsPerSec != 5 {
		t.Fatalf("point %+v", q)
	}
	if !strings.Contains(stdout.String(), "windows/s/DC") {
		t.Errorf("table:\n%s", stdout.String())
	}
}
