package benchplot

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/bench"
)

// WriteReport draws every figure rep has data for into dir (created if
// missing) and returns the files written:
//   - scale_latency_cdf.svg: CKF vs exact query latency CDF, hot and cold
//     (and the radix tree's when it ran);
//   - scale_memory.svg: measured bytes per (block, DC), RSS and heap;
//   - e2e_rate_latency.svg: event→queryable p50/p99 against input rate,
//     pipeline and raw JetStream.
func WriteReport(dir string, rep *bench.Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("benchplot: %w", err)
	}
	var files []string
	if sr := rep.Scale; sr != nil {
		f := filepath.Join(dir, "scale_latency_cdf.svg")
		l := sr.Latencies
		series := []Series{
			{Name: "CKF hot", Latencies: l["ckf hot"]},
			{Name: "exact hot", Latencies: l["exact hot"]},
			{Name: "CKF cold", Latencies: l["ckf cold"], Dashed: true},
			{Name: "exact cold", Latencies: l["exact cold"], Dashed: true},
		}
		if sr.Radix != nil {
			series = append(series,
				Series{Name: "radix hot", Latencies: l["radix hot"]},
				Series{Name: "radix cold", Latencies: l["radix cold"], Dashed: true})
		}
		title := fmt.Sprintf("Query latency, %d DCs × %d buckets, %d memberships (1 goroutine)", sr.Lanes, sr.Buckets, sr.Memberships)
		if err := LatencyCDF(f, title, series); err != nil {
			return files, err
		}
		files = append(files, f)
		f = filepath.Join(dir, "scale_memory.svg")
		bars := []Bar{
			{Name: "CKF (16-lane table)", Values: []float64{sr.CKF.BytesPerMembership, sr.CKF.HeapBytesPerMembership}},
			{Name: "exact (map hash → DC mask)", Values: []float64{sr.Exact.BytesPerMembership, sr.Exact.HeapBytesPerMembership}},
		}
		if rx := sr.Radix; rx != nil {
			bars = append(bars, Bar{Name: "exact (radix tree chain → DC mask)", Values: []float64{rx.BytesPerMembership, rx.HeapBytesPerMembership}})
		}
		if err := Bars(f, fmt.Sprintf("Memory per (block, DC), %d memberships", sr.Memberships), "bytes per membership (measured)",
			[]string{"RSS delta", "Go heap delta"}, bars); err != nil {
			return files, err
		}
		files = append(files, f)
	}
	if len(rep.E2ERates) > 0 {
		f := filepath.Join(dir, "e2e_rate_latency.svg")
		var pipe, raw []RatePoint
		for _, r := range rep.E2ERates {
			pipe = append(pipe, RatePoint{Rate: r.TargetRate, P50: time.Duration(r.Pipeline.P50Ns), P99: time.Duration(r.Pipeline.P99Ns)})
			raw = append(raw, RatePoint{Rate: r.TargetRate, P50: time.Duration(r.Raw.P50Ns), P99: time.Duration(r.Raw.P99Ns)})
		}
		if err := RateLatency(f, "Event → queryable latency vs input rate", map[string][]RatePoint{"pipeline": pipe, "raw JetStream": raw}, []string{"pipeline", "raw JetStream"}); err != nil {
			return files, err
		}
		files = append(files, f)
	}
	return files, nil
}
