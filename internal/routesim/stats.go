package routesim

import "math"

// Stat is one measure over the seeds: the mean, the half-width of its 95%
// Student-t interval (0 with one seed), and the range.
type Stat struct {
	Mean float64 `json:"mean"`
	CI95 float64 `json:"ci95"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// t975 is Student's t quantile 0.975 for 1..30 degrees of freedom.
var t975 = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// tQuantile is the two-sided 95% t quantile for df degrees of freedom
// (the normal's 1.96 past 30).
func tQuantile(df int) float64 {
	if df < 1 {
		return 0
	}
	if df <= len(t975) {
		return t975[df-1]
	}
	return 1.96
}

// statOf is the Stat of xs (the zero Stat for none).
func statOf(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	s := Stat{Min: xs[0], Max: xs[0]}
	for _, x := range xs {
		s.Mean += x
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	n := float64(len(xs))
	s.Mean /= n
	if len(xs) > 1 {
		v := 0.0
		for _, x := range xs {
			v += (x - s.Mean) * (x - s.Mean)
		}
		s.CI95 = tQuantile(len(xs)-1) * math.Sqrt(v/(n-1)/n)
	}
	return s
}
