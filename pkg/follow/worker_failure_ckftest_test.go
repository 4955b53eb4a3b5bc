//go:build ckftest

package follow

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// splitInstance returns a consumer instance whose sticky routing puts lanes
// a and b on different workers, so crashing one lane's worker leaves the
// other lane on a live worker of the same pool.
func splitInstance(t testing.TB, a, b, workers int) uint64 {
	t.Helper()
	for ci := uint64(1); ci < 1<<16; ci++ {
		if ckf.StickyWorker(ci, uint8(a), workers) != ckf.StickyWorker(ci, uint8(b), workers) {
			return ci
		}
	}
	t.Fatalf("no consumer instance splits lanes %d and %d over %d workers", a, b, workers)
	return 0
}

// lastRebuild returns the time the limiter recorded for the last rebuild
// and the interval it set for the next one.
func lastRebuild(s *Service) (time.Time, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limiter.last, s.limiter.interval
}

// waitRecovered waits until every relay's lane is active on its latest
// sequence in a pool generation other than old, and answers every chain
// with the producer's exact depth.
func waitRecovered(t *testing.T, s *Service, old *poolGen, rs []*fakeRelay, ws []*workload) *poolGen {
	t.Helper()
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		g := s.gen.Load()
		if g == old {
			return fmt.Errorf("pool not rebuilt yet")
		}
		for i, r := range rs {
			st, err := statusOf(s, r.lane)
			if err != nil {
				return err
			}
			if st.State != PhaseActive || st.Epoch != r.epoch() || st.InstalledSequence != r.pub.LastSequence() {
				return fmt.Errorf("lane %d: %+v, want active at epoch %d sequence %d", r.lane, st, r.epoch(), r.pub.LastSequence())
			}
			if ls, ok := g.pool.LaneState(r.lane); !ok || ls.State != consumer.AdmissionActive {
				return fmt.Errorf("lane %d: rebuilt pool admission state %+v", r.lane, ls)
			}
			if err := checkDepths(s, r, ws[i]); err != nil {
				return err
			}
		}
		return nil
	})
	return s.gen.Load()
}

// pausableClock is the wall clock, or a fixed time while frozen. Safe for
// concurrent use.
type pausableClock struct {
	mu     sync.Mutex
	frozen time.Time // zero: running
}

func (c *pausableClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozen.IsZero() {
		return c.frozen
	}
	return time.Now()
}

func (c *pausableClock) freeze(at time.Time) {
	c.mu.Lock()
	c.frozen = at
	c.mu.Unlock()
}

func (c *pausableClock) run() { c.freeze(time.Time{}) }

func TestWorkerFailureRebuildsPoolAndRecoversEveryLane(t *testing.T) {
	e := newEnv(t)
	a := e.relay(t, "dc-a")
	b := e.relay(t, "dc-b")
	if a.lane == b.lane {
		t.Fatalf("both DCs on lane %d", a.lane)
	}
	wa, wb := newWorkload(21, 24, 12), newWorkload(22, 24, 12)
	feed(a, wa, func(i int) int { return 1 + i%6 })
	feed(b, wb, func(i int) int { return 6 - i%6 })

	cfg := testConfig(t)
	cfg.ConsumerInstance = splitInstance(t, a.lane, b.lane, cfg.Pool.WorkerCount)
	const rebuildMin, rebuildMax = 2 * time.Second, 20 * time.Second
	cfg.PoolRebuildMin, cfg.PoolRebuildMax = rebuildMin, rebuildMax
	clock := &pausableClock{}
	s := startService(t, e.nc, e.js, cfg, func(s *Service) { s.now = clock.now })
	relays, loads := []*fakeRelay{a, b}, []*workload{wa, wb}
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		for i, r := range relays {
			if err := checkDepths(s.Service, r, loads[i]); err != nil {
				return err
			}
		}
		return nil
	})
	g1 := s.gen.Load()
	if promtest.Count(s.reg, MetricPoolRebuilds) != 0 || promtest.Count(s.reg, MetricWorkerFailures) != 0 {
		t.Fatalf("rebuilds %d, worker failures %d before any crash", promtest.Count(s.reg, MetricPoolRebuilds), promtest.Count(s.reg, MetricWorkerFailures))
	}

	// First crash: lane a's worker. The pool fails closed for lane a only.
	consumer.CrashLaneWorkerForTest(g1.pool, a.lane)
	testenv.WaitFor(t, waitTotal, "condition not met", func() bool { return promtest.Count(s.reg, MetricWorkerFailures) == 1 })
	testenv.WaitFor(t, waitTotal, "condition not met", func() bool {
		return metricCount(s.reg, MetricFaults, strconv.Itoa(a.lane), "kind", "worker_failed") >= 1
	})
	// The producers keep publishing while the lane is down: the stream
	// replays it all into the rebuilt pool.
	feed(a, wa, func(i int) int { return 6 + i%6 })
	feed(b, wb, func(i int) int { return 12 - i%6 })
	g2 := waitRecovered(t, s.Service, g1, relays, loads)
	if got := promtest.Count(s.reg, MetricPoolRebuilds); got != 1 {
		t.Fatalf("pool rebuilds = %d after one crash, want 1", got)
	}
	t1, interval := lastRebuild(s.Service)
	if interval != rebuildMin {
		t.Fatalf("interval after the first rebuild %s, want %s", interval, rebuildMin)
	}
	// Close retired the live lane too: both bootstrapped again.
	for _, r := range relays {
		if got := metricCount(s.reg, MetricBootstraps, strconv.Itoa(r.lane), "outcome", "installed"); got != 2 {
			t.Fatalf("lane %d installed %d snapshots, want 2 (initial, after the rebuild)", r.lane, got)
		}
	}

	// Second crash, soon after: lane b's worker in the rebuilt pool. The
	// rebuild waits for the limiter; meanwhile lane a, on a live worker,
	// keeps answering exactly. The limiter's clock stands still at the
	// first rebuild until lane a has been checked, so the rebuild is
	// pending then however slow the machine is.
	clock.freeze(t1)
	consumer.CrashLaneWorkerForTest(g2.pool, b.lane)
	testenv.WaitFor(t, waitTotal, "condition not met", func() bool { return promtest.Count(s.reg, MetricWorkerFailures) == 2 })
	testenv.WaitFor(t, waitTotal, "condition not met", func() bool { return !isReady(s.Service, b.lane) })
	if err := checkDepths(s.Service, a, wa); err != nil {
		t.Fatalf("lane a while the rebuild is pending: %v", err)
	}
	if got := promtest.Count(s.reg, MetricPoolRebuilds); got != 1 || s.gen.Load() != g2 {
		t.Fatalf("pool rebuilt (%d rebuilds) while the limiter's clock stood still", got)
	}
	clock.run()
	feed(b, wb, func(i int) int { return 12 })
	waitRecovered(t, s.Service, g2, relays, loads)
	t2, interval := lastRebuild(s.Service)
	if gap := t2.Sub(t1); gap < rebuildMin {
		t.Fatalf("second rebuild %s after the first, want >= %s", gap, rebuildMin)
	}
	if interval != 2*rebuildMin {
		t.Fatalf("interval after two quick rebuilds %s, want %s", interval, 2*rebuildMin)
	}
	// Not spinning: one rebuild per crash, one install per lane per pool.
	if got := promtest.Count(s.reg, MetricPoolRebuilds); got != 2 {
		t.Fatalf("pool rebuilds = %d after two crashes, want 2", got)
	}
	for _, r := range relays {
		if got := metricCount(s.reg, MetricBootstraps, strconv.Itoa(r.lane), "outcome", "installed"); got != 3 {
			t.Fatalf("lane %d installed %d snapshots, want 3", r.lane, got)
		}
	}
	if got := metricCount(s.reg, MetricFaults, strconv.Itoa(b.lane), "kind", "worker_failed"); got < 1 {
		t.Fatalf("lane %d worker_failed faults = %d, want >= 1", b.lane, got)
	}
	if !s.Ready() {
		t.Fatal("Ready() = false after recovery")
	}
}
