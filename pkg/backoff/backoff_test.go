package backoff

import (
	"testing"
	"time"
)

func TestNextDoublesToMaxAndResetStartsOver(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("wait %d: got %v want %v", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != 100*time.Millisecond {
		t.Fatalf("after Reset: %v", got)
	}
}

func TestMaxBelowMinIsMin(t *testing.T) {
	b := New(time.Second, time.Millisecond)
	for range 3 {
		if got := b.Next(); got != time.Second {
			t.Fatalf("got %v", got)
		}
	}
}

// Equal jitter keeps each wait in [w/2, w] and reaches both ends.
func TestEqualJitterStaysWithinHalfAndWhole(t *testing.T) {
	var r int64
	b := &Backoff{Min: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: true,
		Rand: func(n int64) int64 { return r % n }}
	r = 0
	if got := b.Next(); got != 250*time.Millisecond {
		t.Fatalf("lowest jitter of 500ms: %v", got)
	}
	r = 1 << 62
	b.Reset()
	for range 10 {
		got := b.Next()
		if got < b.cur/2 || got > b.cur {
			t.Fatalf("wait %v outside [%v, %v]", got, b.cur/2, b.cur)
		}
	}
	if b.cur != 30*time.Second {
		t.Fatalf("schedule did not reach Max: %v", b.cur)
	}
	r = int64(15 * time.Second) // n is 15s+1: the top of the range
	if got := b.Next(); got != 30*time.Second {
		t.Fatalf("highest jitter of 30s: %v", got)
	}
}

func TestDefaultRandStaysInRange(t *testing.T) {
	b := &Backoff{Min: time.Millisecond, Max: 64 * time.Millisecond, Jitter: true}
	for range 1000 {
		got := b.Next()
		if got < b.cur/2 || got > b.cur {
			t.Fatalf("wait %v outside [%v, %v]", got, b.cur/2, b.cur)
		}
	}
}
