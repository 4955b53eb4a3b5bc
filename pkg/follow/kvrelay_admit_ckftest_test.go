//go:build ckftest

package follow

import (
	"sync"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// A kvrelay lane whose Admit fails for a passing reason (its ingestion
// worker failed and the rate-limited rebuild has not run yet, when a
// takeover names a new producer) is admitted once the pool is rebuilt:
// the failure is retried, not taken as a refusal for good. The rebuild is
// held by the test until the failed admission has been seen, so the order
// does not depend on the machine's speed.
func TestAKvRelayLaneRefusedWhileThePoolRebuildsIsAdmittedAfterIt(t *testing.T) {
	e := newEnv(t)
	gens := kvGenerations(t, 2)
	h, addr := newScriptRelay(t, gens...)
	cfg := kvIndexerConfig(t, addr)
	// Rebuilds after the first wait an hour of the service's clock: the
	// hook below holds the second one until the test moves the clock on.
	cfg.PoolRebuildMin, cfg.PoolRebuildMax = time.Hour, time.Hour
	clock := &skewedClock{}
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { clock.advance(2 * time.Hour); close(hold) })
	s := startService(t, e.nc, e.js, cfg, func(s *Service) {
		s.now = clock.now
		s.rebuildDelay = func(_ time.Duration, stop <-chan struct{}) bool {
			select {
			case <-hold:
				return true
			case <-stop:
				return false
			}
		}
	})
	t.Cleanup(release)
	lane := ckf.LaneCount - 1
	serving := func() error { return kvLaneServing(s.Service, lane) }
	testenv.Eventually(t, waitTotal, waitInterval, serving)

	// The first worker failure is rebuilt at once; the lane follows.
	g1 := s.gen.Load()
	consumer.CrashLaneWorkerForTest(g1.pool, lane)
	testenv.WaitFor(t, waitTotal, "first rebuild", func() bool { return s.gen.Load() != g1 })
	testenv.Eventually(t, waitTotal, waitInterval, serving)

	// The second waits for the limiter (held here); a takeover lands then.
	g2 := s.gen.Load()
	consumer.CrashLaneWorkerForTest(g2.pool, lane)
	testenv.WaitFor(t, waitTotal, "worker down", func() bool { return g2.laneDown(lane) })
	h.set(gens[1].Descriptor)
	testenv.WaitFor(t, waitTotal, "a failed admission", func() bool {
		return s.kvMetrics.Faults("a-kv", client.ReasonAdmitFailed) >= 1
	})
	if s.gen.Load() != g2 {
		t.Fatal("the pool was rebuilt before the admission failed")
	}

	release()
	testenv.WaitFor(t, waitTotal, "second rebuild", func() bool { return s.gen.Load() != g2 })
	testenv.Eventually(t, waitTotal, waitInterval, serving)
	st, _ := statusOf(s.Service, lane)
	if st.Epoch != gens[1].Key.ProducerIncarnation {
		t.Fatalf("lane %+v, want the new producer (incarnation %d)", st, gens[1].Key.ProducerIncarnation)
	}
	if n := s.kvMetrics.Faults("a-kv", client.ReasonRefused); n != 0 {
		t.Fatalf("a passing failure was counted as %v refusals", n)
	}
}
