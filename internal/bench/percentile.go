package bench

import (
	"slices"
	"testing"
	"time"
)

// defaultPercentileSamples is the least number of timed calls behind a
// search p99 unless SearchConfig.PercentileSamples says otherwise.
const defaultPercentileSamples = 20000

// Latencies is a sorted set of per-call durations.
type Latencies []time.Duration

// TimeEach times n calls of f(k) one by one and returns the sorted
// durations. Each timing costs two monotonic clock reads (~20-40 ns with a
// TSC clock source), which the figures include.
func TimeEach(n int, f func(k int)) Latencies {
	lat := make(Latencies, n)
	for k := range lat {
		t0 := time.Now()
		f(k)
		lat[k] = time.Since(t0)
	}
	slices.Sort(lat)
	return lat
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of sorted durations, by the
// nearest-rank rule; 0 for an empty set.
func (l Latencies) Quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(q * float64(len(l)))
	return l[min(max(i, 0), len(l)-1)]
}

// reportPercentiles adds p50-ns and p99-ns to a benchmark's result.
func reportPercentiles(b *testing.B, lat Latencies) {
	b.ReportMetric(float64(lat.Quantile(0.50).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat.Quantile(0.99).Nanoseconds()), "p99-ns")
}
