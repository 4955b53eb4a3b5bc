package api

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestAppendMsMatchesStrconv checks that the integer path writes what
// strconv's shortest formatting writes, on durations' milliseconds and on
// values near its bounds.
func TestAppendMsMatchesStrconv(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	vals := []float64{0, math.Copysign(0, -1), 1e-6, math.Nextafter(1e-6, 0), math.Nextafter(1e-6, 1), 5, 0.1, 0.5, 1.25, -3.000001,
		1 << 31, math.Nextafter(1<<31, 0), -(1 << 31), 123456.789012, 0.000999, 1e21, 1e-7, math.NaN(), math.Inf(1),
		float64(time.Hour) / float64(time.Millisecond)}
	for range 200000 {
		d := time.Duration(rng.Int64N(1 << uint(rng.IntN(60)+1)))
		if rng.IntN(8) == 0 {
			d = -d
		}
		vals = append(vals, float64(d)/float64(time.Millisecond), rng.Float64()*math.Pow(10, float64(rng.IntN(24)-8)))
	}
	fast := 0
	for _, v := range vals {
		got, want := string(appendMs(nil, v)), string(appendMsFloat(nil, v))
		if got != want {
			t.Fatalf("appendMs(%v) = %s, strconv %s", v, got, want)
		}
		if abs := math.Abs(v); abs >= 1e-6 && abs < 1<<31 && math.Round(v*1e6)/1e6 == v {
			fast++
		}
	}
	if fast < len(vals)/3 {
		t.Fatalf("only %d of %d values took the integer path", fast, len(vals))
	}
}

func BenchmarkAppendMs(b *testing.B) {
	v := float64(123456789*time.Nanosecond) / float64(time.Millisecond)
	buf := make([]byte, 0, 64)
	b.Run("integer", func(b *testing.B) {
		for b.Loop() {
			buf = appendMs(buf[:0], v)
		}
	})
	b.Run("strconv", func(b *testing.B) {
		for b.Loop() {
			buf = appendMsFloat(buf[:0], v)
		}
	})
}
