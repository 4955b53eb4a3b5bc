package benchplot

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func sorted(n int, scale time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = scale + time.Duration(i)*scale/time.Duration(n)
	}
	return out
}

func TestPlotsAreWrittenAsSVGAndPNG(t *testing.T) {
	dir := t.TempDir()
	for _, ext := range []string{".svg", ".png"} {
		cdf := filepath.Join(dir, "cdf"+ext)
		if err := LatencyCDF(cdf, "t", []Series{{Name: "a", Latencies: sorted(1000, time.Microsecond)}, {Name: "b", Latencies: sorted(10, 3*time.Microsecond), Dashed: true}}); err != nil {
			t.Fatal(err)
		}
		bars := filepath.Join(dir, "bars"+ext)
		if err := Bars(bars, "t", "B", []string{"x", "y"}, []Bar{{"ckf", []float64{2.5, 0.1}}, {"exact", []float64{25, 22}}}); err != nil {
			t.Fatal(err)
		}
		rate := filepath.Join(dir, "rate"+ext)
		pts := []RatePoint{{10000, 300 * time.Microsecond, time.Millisecond}, {50000, 400 * time.Microsecond, 2 * time.Millisecond}}
		if err := RateLatency(rate, "t", map[string][]RatePoint{"pipeline": pts, "raw": pts}, []string{"pipeline", "raw"}); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{cdf, bars, rate} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			magic := []byte("<svg")
			if ext == ".png" {
				magic = []byte("\x89PNG")
			}
			if !bytes.Contains(b[:min(len(b), 512)], magic) {
				t.Fatalf("%s does not start like a %s file: %q", f, ext, b[:min(len(b), 40)])
			}
		}
	}
}

func TestPlotsRejectBadSeries(t *testing.T) {
	dir := t.TempDir()
	if err := LatencyCDF(filepath.Join(dir, "x.svg"), "t", []Series{{Name: "unsorted", Latencies: []time.Duration{3, 1}}}); err == nil {
		t.Fatal("unsorted latencies accepted")
	}
	if err := Bars(filepath.Join(dir, "x.svg"), "t", "B", []string{"x"}, []Bar{{"a", []float64{1, 2}}}); err == nil {
		t.Fatal("a series with more values than categories accepted")
	}
}
