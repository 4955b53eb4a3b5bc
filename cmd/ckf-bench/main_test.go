package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/bench"
)

func noEnv(string) string { return "" }

func TestRunPrintsJSONRowsForTheSelectedSuite(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--only", "search", "--buckets", "4096", "--blocks", "32", "--queries", "128", "--hot-queries", "8", "--benchtime", "20x", "--json", "--quiet"}, noEnv, &out, &errOut)
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
	if code := run(context.Background(), []string{"--only", "search", "--buckets", "4096", "--queries", "64", "--benchtime", "10x"}, noEnv, &out, &errOut); code != 0 {
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
		{"--benchtime", "soon"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, noEnv, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
