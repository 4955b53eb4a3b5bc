package bench

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestAwaitProbeEndsAtTheFirstCheckThatSeesIt(t *testing.T) {
	checks := 0
	lat, err := awaitProbe(context.Background(), time.Now(), time.Minute, func() bool { checks++; return checks == 3 }, nil)
	if err != nil || checks != 3 || lat <= 0 {
		t.Fatalf("lat %v, err %v after %d checks; want the third check to end it", lat, err, checks)
	}
	boom := errors.New("pipeline failed")
	if _, err := awaitProbe(context.Background(), time.Now(), time.Minute, func() bool { return false }, func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want the pipeline's failure", err)
	}
	if _, err := awaitProbe(context.Background(), time.Now(), time.Millisecond, func() bool { return false }, nil); err == nil {
		t.Fatal("a probe never seen must time out")
	}
}

// A Go timer of 25µs sleeps about a millisecond in an idle process; the
// probe's pause must not, or the side that polls gains up to 1 ms.
func TestProbeTimerSleepsFarBelowAMillisecond(t *testing.T) {
	pt, err := newProbeTimer()
	if err != nil {
		t.Fatal(err)
	}
	defer pt.close()
	var d []time.Duration
	for range 101 {
		start := time.Now()
		if err := pt.sleep(probePoll); err != nil {
			t.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	if d[0] < probePoll {
		t.Fatalf("slept %v, less than %v", d[0], probePoll)
	}
	if testing.Short() || probeTimerIsGoTimer {
		return
	}
	// A Go timer this short takes a whole netpoller millisecond here; a
	// timerfd takes tens of microseconds, and the margin is for a loaded
	// machine.
	if med := d[len(d)/2]; med >= 900*time.Microsecond {
		t.Fatalf("median pause %v for %v: the poll is as coarse as a Go timer", med, probePoll)
	}
}
