// Package bench holds ckfrelay's comparative benchmarks: each measurement
// comes as a pair of a subject (the ckfrelay code path) and a baseline (the
// naive or raw alternative it is judged against), run in the same process
// on the same data. The bodies are ordinary func(*testing.B) so they run
// under `go test -bench` and, through testing.Benchmark, from cmd/ckf-bench,
// which prints subject, baseline and their ratio side by side.
package bench

import (
	"math"
	"testing"
)

// Pair is one subject and the baseline it is compared with. Both bodies
// may share a lazily built fixture, so running one after the other costs a
// single set-up.
type Pair struct {
	// Name is the short name used by --only (search, producer, pool).
	Name string
	// Subject and Baseline are the two benchmark bodies.
	Subject, Baseline func(b *testing.B)
}

// Metric is one compared figure of a pair.
type Metric struct {
	// Name labels the row, e.g. "search/query".
	Name string `json:"name"`
	// Unit is the unit of Subject and Baseline (ns/op, allocs/op, events/s, ...).
	Unit     string  `json:"unit"`
	Subject  float64 `json:"subject"`
	Baseline float64 `json:"baseline"`
	// Ratio is Subject / Baseline, whatever the unit's direction; nil when
	// undefined (a zero baseline under a non-zero subject). Two zeros give 1.
	Ratio *float64 `json:"ratio"`
	// HigherIsBetter says how to read the ratio: rates are better above 1,
	// times and allocations below.
	HigherIsBetter bool `json:"higher_is_better"`
}

// NewMetric builds a row and computes its ratio.
func NewMetric(name, unit string, subject, baseline float64, higherIsBetter bool) Metric {
	m := Metric{Name: name, Unit: unit, Subject: subject, Baseline: baseline, HigherIsBetter: higherIsBetter}
	if r, ok := Ratio(subject, baseline); ok {
		m.Ratio = &r
	}
	return m
}

// Ratio is subject/baseline; two zeros tie at 1 (e.g. two allocation-free
// paths), a zero baseline under a non-zero subject is undefined.
func Ratio(subject, baseline float64) (float64, bool) {
	switch {
	case baseline != 0:
		return subject / baseline, true
	case subject == 0:
		return 1, true
	default:
		return 0, false
	}
}

// NsPerOp is the unrounded ns/op of a result (0 for an empty result).
func NsPerOp(r testing.BenchmarkResult) float64 {
	if r.N == 0 {
		return 0
	}
	return float64(r.T.Nanoseconds()) / float64(r.N)
}

// AllocsPerOp is the allocs/op of a result rounded to 0.01 (0 for an empty
// result): rarer allocations are set-up or runtime noise amortised over
// millions of ops, and would make ratios of two "zero" paths meaningless.
func AllocsPerOp(r testing.BenchmarkResult) float64 {
	if r.N == 0 {
		return 0
	}
	return math.Round(100*float64(r.MemAllocs)/float64(r.N)) / 100
}
