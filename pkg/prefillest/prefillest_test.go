package prefillest

import (
	"math"
	"testing"
)

func TestMean(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		name      string
		prev, cur Counters
		last      float64
		want      float64
	}{
		{"delta", Counters{1000, 10}, Counters{9000, 14}, 5, 2000},
		{"no finish keeps last", Counters{1000, 10}, Counters{1000, 10}, 700, 700},
		{"no finish no last: lifetime", Counters{1000, 10}, Counters{1000, 10}, 0, 100},
		{"nothing yet", Counters{}, Counters{}, 0, Fallback},
		{"restart keeps last", Counters{9000, 14}, Counters{300, 1}, 900, 900},
		{"restart no last: lifetime", Counters{9000, 14}, Counters{300, 1}, 0, 300},
		{"tokens down, requests up", Counters{9000, 14}, Counters{8000, 15}, 50, 50},
		{"nan counters", Counters{}, Counters{nan, 3}, 40, 40},
		{"inf counters", Counters{}, Counters{inf, 3}, 0, Fallback},
		{"negative", Counters{}, Counters{-5, 3}, 0, Fallback},
		{"huge mean capped", Counters{0, 0}, Counters{1e30, 1}, 0, MaxMeanPrompt},
		{"below one token", Counters{0, 0}, Counters{0, 5}, 0, Fallback},
		{"below one token keeps last", Counters{0, 0}, Counters{1, 5}, 64, 64},
		{"inf last", Counters{}, Counters{}, inf, Fallback},
		{"zero counters are valid", Counters{0, 0}, Counters{500, 5}, 7, 100},
		{"a mean of exactly one token", Counters{0, 0}, Counters{5, 5}, 0, 1},
		{"last of exactly one token", Counters{0, 0}, Counters{0, 5}, 1, 1},
		{"last at the bound", Counters{0, 0}, Counters{0, 5}, MaxMeanPrompt, MaxMeanPrompt},
		{"last past the bound", Counters{0, 0}, Counters{0, 5}, MaxMeanPrompt + 1, Fallback},
		{"one more request", Counters{100, 1}, Counters{300, 2}, 0, 200},
		{"tokens unchanged, one more request", Counters{100, 1}, Counters{100, 2}, 50, 50},
		{"prev invalid: last", Counters{-1, 1}, Counters{300, 2}, 9, 9},
		{"prev invalid, no last: lifetime", Counters{-1, 1}, Counters{300, 2}, 0, 150},
		{"tokens up, no request finished", Counters{1000, 10}, Counters{2000, 10}, 700, 700},
		{"tokens unchanged, one more request, no last", Counters{100, 1}, Counters{100, 2}, 0, Fallback},
		{"tokens without requests", Counters{}, Counters{5, 0}, 0, Fallback},
	} {
		if got := Mean(c.prev, c.cur, c.last); got != c.want {
			t.Errorf("%s: Mean = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPending(t *testing.T) {
	for _, c := range []struct {
		waiting uint64
		mean    float64
		want    uint64
	}{{4, 2000, 8000}, {3, 0, 3 * Fallback}, {3, math.NaN(), 3 * Fallback}, {2, MaxMeanPrompt + 1, 2 * Fallback},
		{0, 5000, 0}, {math.MaxUint64, MaxMeanPrompt, math.MaxUint64}, {1, 1.4, 1},
		{3, 1, 3}, {1, MaxMeanPrompt, MaxMeanPrompt}, {1 << 40, 1 << 24, math.MaxUint64}, {2, 0.999, 2 * Fallback}} {
		if got := Pending(c.waiting, c.mean); got != c.want {
			t.Errorf("Pending(%d, %v) = %d, want %d", c.waiting, c.mean, got, c.want)
		}
	}
}

func TestSmooth(t *testing.T) {
	for _, c := range []struct {
		name       string
		last, m, n float64
		want       float64
	}{
		{"one request weighs 1/MeanWindow", 1000, 1000 + MeanWindow*100, 1, 1100},
		{"two requests", 1600, 1600 - 256, 2, 1600 - 31},
		{"last of one token", 1, 17, 1, 2},
		{"last at the bound", MaxMeanPrompt, MaxMeanPrompt - 16, 1, MaxMeanPrompt - 1},
		{"no last", 0, 700, 3, 700},
		{"last past the bound", MaxMeanPrompt + 1, 700, 3, 700},
		{"nan last", math.NaN(), 700, 3, 700},
		{"no request", 1000, 5000, 0, 5000},
		{"nan count", 1000, 5000, math.NaN(), 5000},
		{"many requests: the new mean", 1000, 5000, 1e12, 5000},
		{"inf requests", 1000, 5000, math.Inf(1), 5000},
	} {
		if got := Smooth(c.last, c.m, c.n); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: Smooth(%v, %v, %v) = %v, want %v", c.name, c.last, c.m, c.n, got, c.want)
		}
	}
}

func TestEstimator(t *testing.T) {
	var e Estimator
	if got := e.Observe(2, Counters{}, false); got != 2*Fallback || e.MeanPrompt() != 0 {
		t.Fatalf("no counters: %d", got)
	}
	if got := e.Observe(2, Counters{PromptTokens: 3000, Requests: 3}, true); got != 2000 {
		t.Fatalf("first reading (lifetime mean 1000): %d", got)
	}
	// 8 requests of 4096 tokens move the mean by 1 − (1 − 1/MeanWindow)^8 of the way.
	want := 1000 + (1-math.Pow(1-1.0/MeanWindow, 8))*3096
	if got := e.Observe(5, Counters{PromptTokens: 3000 + 8*4096, Requests: 11}, true); got != uint64(math.Round(5*want)) || e.MeanPrompt() != want {
		t.Fatalf("8 requests of 4096: %d (mean %v), want mean %v", got, e.MeanPrompt(), want)
	}
	if got := e.Observe(1, Counters{PromptTokens: 3000 + 8*4096, Requests: 11}, true); got != uint64(math.Round(want)) {
		t.Fatalf("no finish keeps the mean: %d", got)
	}
	if got := e.Observe(1, Counters{}, false); got != uint64(math.Round(want)) || e.MeanPrompt() != want {
		t.Fatalf("a scrape without counters keeps the mean: %d", got)
	}
	// One request of a huge prompt moves the mean by 1/MeanWindow of the gap only.
	big := want + (1<<20-want)/MeanWindow
	if e.Observe(0, Counters{PromptTokens: 3000 + 8*4096 + 1<<20, Requests: 12}, true); math.Abs(e.MeanPrompt()-big) > 1e-6 {
		t.Fatalf("one outlier: mean %v, want %v", e.MeanPrompt(), big)
	}
	// A restart (counters down) keeps the mean; the next delta smooths from it.
	if e.Observe(0, Counters{PromptTokens: 100, Requests: 1}, true); math.Abs(e.MeanPrompt()-big) > 1e-6 {
		t.Fatalf("restart: mean %v, want %v", e.MeanPrompt(), big)
	}
}

func TestEstimatorFirstDeltaTakenAsIs(t *testing.T) {
	var e Estimator
	// The engine had finished nothing at the first reading: no mean is measured yet.
	if got := e.Observe(1, Counters{}, true); got != Fallback {
		t.Fatalf("nothing finished: %d", got)
	}
	if got := e.Observe(1, Counters{PromptTokens: 9000, Requests: 2}, true); got != 4500 {
		t.Fatalf("the first delta replaces the fallback: %d", got)
	}
}

func FuzzMean(f *testing.F) {
	f.Add(1000.0, 10.0, 9000.0, 14.0, 5.0, uint64(3))
	f.Fuzz(func(t *testing.T, pt, pr, ct, cr, last float64, waiting uint64) {
		m := Mean(Counters{pt, pr}, Counters{ct, cr}, last)
		if !(m >= 1 && m <= MaxMeanPrompt) {
			t.Fatalf("Mean = %v outside 1..MaxMeanPrompt", m)
		}
		if s := Smooth(last, m, cr-pr); !(s >= 1 && s <= MaxMeanPrompt) {
			t.Fatalf("Smooth = %v outside 1..MaxMeanPrompt", s)
		}
		if p := Pending(waiting, m); waiting > 0 && p < waiting {
			t.Fatalf("Pending(%d, %v) = %d below one token per request", waiting, m, p)
		}
	})
}
