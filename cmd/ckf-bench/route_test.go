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
	code := run(t.Context(), []string{"--only", "route", "--requests", "150", "--loads", "0.6,0.9",
		"--policies", "least-load,cost,oracle", "--workers", "2", "--json", out, "--plots", dir, "--quiet"}, func(string) string { return "" }, &stdout, &stderr)
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
	var rows []map[string]any
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rows))
	}
	for _, r := range rows {
		if len(r) != 11 || r["policy"] == nil || r["ttft_p99_ms"] == nil || r["remote_share"] == nil {
			t.Fatalf("row %v", r)
		}
	}
	for _, f := range []string{"route-ttft-cdf-load60.svg", "route-ttft-cdf-load90.svg", "route-reuse-vs-load.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if code := run(t.Context(), []string{"--only", "route", "--policies", "nearest"}, func(string) string { return "" }, &stdout, &stderr); code != 2 {
		t.Errorf("bad policy: exit %d", code)
	}
}
