package testenv

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Background runs run until the test ends. Then it cancels run's context
// and waits up to 20s: an error other than context.Canceled, or no return
// in time (with every goroutine's stack), fails the test.
func Background(t testing.TB, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("did not stop; goroutines:\n%s", Goroutines())
		}
	})
}
