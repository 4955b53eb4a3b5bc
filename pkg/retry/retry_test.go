package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

var errBusy = errors.New("busy")

func TestDoRetriesWithDoublingWaitsUntilTheStepSucceeds(t *testing.T) {
	var waits []time.Duration
	calls := 0
	p := Policy{Min: time.Millisecond, Max: 4 * time.Millisecond, OnRetry: func(n int, err error, w time.Duration) {
		if n != len(waits)+1 || !errors.Is(err, errBusy) {
			t.Errorf("attempt %d err %v", n, err)
		}
		waits = append(waits, w)
	}}
	err := p.Do(context.Background(), func(context.Context) error {
		calls++
		if calls < 5 {
			return errBusy
		}
		return nil
	})
	if err != nil || calls != 5 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond}
	if len(waits) != len(want) {
		t.Fatalf("waits %v want %v", waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v want %v", waits, want)
		}
	}
}

func TestDoStopsAtAPermanentError(t *testing.T) {
	calls := 0
	err := Policy{Min: time.Millisecond}.Do(context.Background(), func(context.Context) error {
		calls++
		return Permanent(errBusy)
	})
	if !errors.Is(err, errBusy) || calls != 1 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) must be nil")
	}
}

func TestDoEndsWithTheContextAndBoundsEachAttempt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Policy{Min: time.Millisecond, Attempt: 5 * time.Millisecond}.Do(ctx, func(actx context.Context) error {
		calls++
		if _, ok := actx.Deadline(); !ok {
			t.Error("attempt has no deadline")
		}
		if calls == 3 {
			cancel()
		}
		<-actx.Done() // a step blocked on a server that never answers
		return actx.Err()
	})
	if !errors.Is(err, context.Canceled) || calls != 3 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
}
