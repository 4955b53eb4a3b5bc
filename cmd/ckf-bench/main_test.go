package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/bench"
	"github.com/ckfrelay/ckfrelay/internal/cli/clitest"
)

func TestRunPrintsJSONRowsForTheSelectedSuite(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--only", "search", "--buckets", "4096", "--blocks", "32", "--queries", "128", "--hot-queries", "8", "--benchtime", "20x", "--percentile-samples", "500", "--ingest-rate", "20000", "--pool-max-dirty-age", "1s", "--json", "--quiet"}, clitest.NoEnv, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rep.Pairs) != 2 || rep.Pairs[0].Suite != "search/hot" || rep.Pairs[1].Suite != "search/cold" || len(rep.Metrics) != 8 {
		t.Fatalf("report %+v", rep)
	}
	for _, m := range rep.Metrics {
		if m.Unit == "allocs/op" {
			continue
		}
		if m.Subject <= 0 || m.Baseline <= 0 || m.Ratio == nil || *m.Ratio <= 0 {
			t.Fatalf("row %+v", m)
		}
	}
	if rep.Metrics[1].Name != "search/hot p50" || rep.Metrics[5].Name != "search/cold p50" {
		t.Fatalf("rows %+v", rep.Metrics)
	}
}

func TestRunPrintsATable(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--only", "search", "--buckets", "4096", "--blocks", "32", "--queries", "64", "--benchtime", "10x", "--percentile-samples", "500", "--ingest-rate", "20000", "--pool-max-dirty-age", "1s"}, clitest.NoEnv, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"search/hot", "search/cold p99", "ns/op", "allocs/op", "ratio = subject / baseline"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errOut.String(), "running search cold subject") {
		t.Errorf("no progress on stderr: %q", errOut.String())
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--only", "search,bogus"},
		{"--buckets", "1000"},
		{"--e2e-requests", "0"},
		{"--blocks", "64", "--chain-blocks", "32"},
		{"--queries", "8", "--hot-queries", "16"},
		{"--queries", "0"},
		{"--percentile-samples", "0"},
		{"--e2e-rates", "10000,fast"},
		{"--e2e-rates", "-5"},
		{"--e2e-rate-duration", "0s"},
		{"--benchtime", "soon"},
		{"--ingest-rate", "0"},
		{"--ingest-rate", "NaN"},
		{"--pool-max-dirty-age", "-1s"},
		{"--e2e-generator", "thread"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, clitest.NoEnv, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestScaleJSONKeepsItsStableNamesAndWritesPlots: scripts rely on the
// scale report's names; --plots draws the latency CDF and the memory bars.
func TestScaleJSONKeepsItsStableNamesAndWritesPlots(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--only", "scale", "--buckets", "1024", "--queries", "256", "--hot-queries", "8",
		"--accuracy-queries", "2000", "--plots", dir, "--json", "--quiet"}, clitest.NoEnv, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var doc struct {
		Scale map[string]json.RawMessage `json:"scale"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	for _, k := range []string{"lanes", "buckets", "memberships", "ckf", "exact", "accuracy"} {
		if _, ok := doc.Scale[k]; !ok {
			t.Fatalf("scale lacks %q: %s", k, out.String())
		}
	}
	for _, side := range []string{"ckf", "exact"} {
		var m map[string]float64
		if err := json.Unmarshal(doc.Scale[side], &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"hot_p50_ns", "hot_p99_ns", "cold_p50_ns", "cold_p99_ns", "bytes_per_membership"} {
			if v, ok := m[k]; !ok || !(v > 0) {
				t.Errorf("%s.%s = %v (present %v)", side, k, v, ok)
			}
		}
	}
	var acc map[string]float64
	if err := json.Unmarshal(doc.Scale["accuracy"], &acc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"queries", "under", "inflated", "wrong_best"} {
		if _, ok := acc[k]; !ok {
			t.Errorf("accuracy lacks %q", k)
		}
	}
	if acc["queries"] != 2000 || acc["under"] != 0 {
		t.Errorf("accuracy %v", acc)
	}
	for _, f := range []string{"scale_latency_cdf.svg", "scale_memory.svg"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
	if _, ok := doc.Scale["radix"]; ok {
		t.Errorf("radix side present without --radix")
	}
}

// TestScaleRadixFromTheEnvironment: CKFRELAY_RADIX adds the radix side
// under "scale", with the exact side's names, no answer differing from the
// map's, its rows and its plot series; above --radix-max-memberships the
// table says it was skipped.
func TestScaleRadixFromTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	env := func(k string) string {
		if k == "CKFRELAY_RADIX" {
			return "true"
		}
		return ""
	}
	args := []string{"--only", "scale", "--buckets", "1024", "--queries", "256", "--hot-queries", "8", "--accuracy-queries", "2000", "--quiet"}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), append(args, "--plots", dir, "--json"), env, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var doc struct {
		Metrics []bench.Metric `json:"metrics"`
		Scale   struct {
			Radix map[string]float64 `json:"radix"`
		} `json:"scale"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	for _, k := range []string{"hot_p50_ns", "hot_p99_ns", "cold_p50_ns", "cold_p99_ns", "bytes_per_membership", "heap_bytes_per_membership", "ingest_blocks_per_sec", "cold_p99_ns_2g", "checked_answers"} {
		if v, ok := doc.Scale.Radix[k]; !ok || !(v > 0) {
			t.Errorf("radix.%s = %v (present %v)", k, v, ok)
		}
	}
	if m, ok := doc.Scale.Radix["mismatches"]; !ok || m != 0 {
		t.Errorf("radix mismatches %v (present %v)", m, ok)
	}
	rows := 0
	for _, m := range doc.Metrics {
		if strings.HasPrefix(m.Name, "scale/radix ") {
			rows++
		}
	}
	if rows != 11 {
		t.Errorf("%d scale/radix rows", rows)
	}
	cdf, err := os.ReadFile(filepath.Join(dir, "scale_latency_cdf.svg"))
	if err != nil || !bytes.Contains(cdf, []byte("radix cold")) {
		t.Errorf("latency CDF without a radix series (%v)", err)
	}

	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), append(args, "--radix-max-memberships", "1000"), env, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "scale radix: skipped:") || strings.Contains(out.String(), "scale/radix ") {
		t.Errorf("capped radix side not reported as skipped:\n%s", out.String())
	}
}
