package routesim

import (
	"math"
	"testing"
)

func TestStat(t *testing.T) {
	// Mean 3, sample sd √2.5, n 5: half-width 2.776 × √(2.5/5).
	s := statOf([]float64{1, 2, 3, 4, 5})
	if s.Mean != 3 || s.Min != 1 || s.Max != 5 || math.Abs(s.CI95-2.776*math.Sqrt(0.5)) > 1e-9 {
		t.Fatalf("%+v", s)
	}
	if s := statOf([]float64{7}); s.Mean != 7 || s.CI95 != 0 {
		t.Fatalf("one seed: %+v", s)
	}
	if tQuantile(1) != 12.706 || tQuantile(30) != 2.042 || tQuantile(100) != 1.96 || tQuantile(0) != 0 {
		t.Fatal("t quantiles")
	}
}
