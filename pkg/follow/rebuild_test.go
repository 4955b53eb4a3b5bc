package follow

import (
	"testing"
	"time"
)

func TestRebuildLimiterSpacesConsecutiveRebuilds(t *testing.T) {
	const lo, hi = time.Second, 8 * time.Second
	l := rebuildLimiter{min: lo, max: hi}
	t0 := time.Unix(1000, 0)
	if d := l.delay(t0); d != 0 {
		t.Fatalf("first rebuild waits %s, want 0", d)
	}
	// Each rebuild is recorded when its delay has passed.
	steps := []struct {
		at        time.Duration // since t0, when the next rebuild is wanted
		wantDelay time.Duration
	}{
		{0, 0}, // first: immediate; interval lo, last 0s
		{100 * time.Millisecond, 900 * time.Millisecond}, // waits out lo; interval 2s, last 1s
		{2 * time.Second, time.Second},                   // 1s+2s-2s; interval 4s, last 3s
		{4 * time.Second, 3 * time.Second},               // 3s+4s-4s; interval 8s (max), last 7s
	}
	now := t0
	for i, st := range steps {
		now = t0.Add(st.at)
		if d := l.delay(now); d != st.wantDelay {
			t.Fatalf("step %d: delay %s, want %s", i, d, st.wantDelay)
		}
		now = now.Add(st.wantDelay)
		l.record(now)
	}
	// Four rebuilds in a loop: the interval doubled to the maximum.
	if l.interval != hi {
		t.Fatalf("interval %s after a crash loop, want %s", l.interval, hi)
	}
	// A pool that lasted max resets the spacing.
	later := now.Add(hi)
	if d := l.delay(later); d != 0 {
		t.Fatalf("delay after a stable period %s, want 0", d)
	}
	l.record(later)
	if l.interval != lo {
		t.Fatalf("interval %s after a stable period, want %s", l.interval, lo)
	}
}
