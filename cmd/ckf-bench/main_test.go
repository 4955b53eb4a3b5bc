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
	code := run(context.Background(), []string{"--only", "search", "--buckets", "4096", "--blocks", "32", "--benchtime", "20x", "--json", "--quiet"}, noEnv, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rep.Pairs) != 1 || rep.Pairs[0].Suite != "search" || len(rep.Metrics) != 2 {
		t.Fatalf("report %+v", rep)
	}
	m := rep.Metrics[0]
	if m.Unit != "ns/op" || m.Subject <= 0 || m.Baseline <= 0 || m.Ratio == nil || *m.Ratio <= 0 {
		t.Fatalf("row %+v", m)
	}
}

func TestRunPrintsATable(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--only", "search", "--buckets", "4096", "--benchtime", "10x"}, noEnv, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"search/query", "ns/op", "allocs/op", "ratio = subject / baseline"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errOut.String(), "running search subject") {
		t.Errorf("no progress on stderr: %q", errOut.String())
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--only", "search,bogus"},
		{"--buckets", "1000"},
		{"--e2e-requests", "0"},
		{"--blocks", "64", "--chain-blocks", "32"},
		{"--benchtime", "soon"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, noEnv, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
