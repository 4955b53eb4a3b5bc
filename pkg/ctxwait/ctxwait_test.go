package ctxwait

import (
	"context"
	"testing"
	"time"
)

func TestSleepEndsWithTheContext(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("a live context reported done")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("a cancelled context did not end the wait")
	}
	if Sleep(ctx, 0) || !Sleep(context.Background(), -1) {
		t.Fatal("non-positive durations")
	}
}
