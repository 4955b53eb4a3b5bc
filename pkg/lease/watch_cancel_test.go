package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// A watch whose context ends at any point, even while nats.go is still
// creating the subscription, closes its channel promptly: the indexer's
// and the relay's shutdown wait for that.
func TestWatchesEndWhenTheirContextEndsAtAnyMoment(t *testing.T) {
	c, _, _ := startCoordinator(t)
	watches := map[string]func(context.Context) (func() bool, error){
		"lane map": func(ctx context.Context) (func() bool, error) {
			ch, err := c.WatchLaneMap(ctx, domain)
			return func() bool { _, ok := <-ch; return ok }, err
		},
		"snapshot requests": func(ctx context.Context) (func() bool, error) {
			ch, err := c.WatchSnapshotRequests(ctx, domain, "dc-a")
			return func() bool { _, ok := <-ch; return ok }, err
		},
	}
	for name, watch := range watches {
		// Sweep the cancel over the watch's creation and first delivery
		// (0–2ms; with nats.go's unclosed channel this hit within a few
		// hundred iterations on the 2-core machine).
		for i := range 1000 {
			ctx, cancel := context.WithCancel(context.Background())
			timer := time.AfterFunc(time.Duration(i)*2*time.Microsecond, cancel)
			next, err := watch(ctx)
			if err != nil {
				timer.Stop()
				cancel()
				continue // cancelled before the watch existed: nothing to close
			}
			closed := make(chan struct{})
			go func() {
				for next() {
				}
				close(closed)
			}()
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s watch cancelled after %s: channel still open 5s later; goroutines:\n%s",
					name, time.Duration(i)*2*time.Microsecond, testenv.Goroutines())
			}
			timer.Stop()
			cancel()
		}
	}
}

// neverClosed is a KeyWatcher whose channel nats.go never closes.
type neverClosed struct {
	ch      chan jetstream.KeyValueEntry
	stopped bool
}

func (w *neverClosed) Updates() <-chan jetstream.KeyValueEntry { return w.ch }
func (w *neverClosed) Stop() error                             { w.stopped = true; return nil }

func TestStopWatcherDrainsAndReturnsWithoutAClose(t *testing.T) {
	w := &neverClosed{ch: make(chan jetstream.KeyValueEntry, 4)}
	for range 3 {
		w.ch <- nil
	}
	done := make(chan struct{})
	go func() {
		lease.StopWatcher(w)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stopWatcher still waiting for a close that never comes")
	}
	if !w.stopped || len(w.ch) != 0 {
		t.Fatalf("stopped %v, %d updates left undrained", w.stopped, len(w.ch))
	}
}
