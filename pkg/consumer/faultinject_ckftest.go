//go:build ckftest

package consumer

import (
	"fmt"
	"sync"
	"time"
)

// CrashLaneWorkerForTest makes the worker that lane (0..15) routes to panic
// on its next command, exactly as a bug in an ingestor would: the pool
// recovers the panic, retires the worker's lanes, reports FaultWorkerFailed
// and fails closed. It blocks while that worker's queue is full. It exists
// only in builds with the ckftest tag, for other packages' fault tests.
func CrashLaneWorkerForTest(p *Pool, lane int) { p.crashLaneWorker(lane) }

// PauseLaneWorkerForTest holds the worker lane routes to, behind the
// commands already queued, until resume is called: deltas admitted
// meanwhile wait in its queue, as behind a slow apply. It fails when the
// worker does not take the pause within wait.
func PauseLaneWorkerForTest(p *Pool, lane int, wait time.Duration) (resume func(), err error) {
	h := &pauseHook{entered: make(chan struct{}, 1), release: make(chan struct{})}
	p.workers[p.lanes[lane].worker].queue <- command{op: opTestPause, ctl: &controlRequest{pause: h}}
	var once sync.Once
	resume = func() { once.Do(func() { close(h.release) }) }
	select {
	case <-h.entered:
		return resume, nil
	case <-time.After(wait):
		resume()
		return nil, fmt.Errorf("consumer: worker of lane %d did not pause within %s", lane, wait)
	}
}

// NewPoolWithClockForTest is NewPool with now as the clock of admission
// times and of the lag watchdog.
func NewPoolWithClockForTest(ix *Indexer, cfg PoolConfig, now func() time.Time) (*Pool, error) {
	return newPool(ix, cfg, now)
}

// FenceExpiredLanesForTest runs one pass of the lag watchdog at the pool's
// clock, so a test need not wait for a tick.
func FenceExpiredLanesForTest(p *Pool) { p.fenceExpiredLanes(p.now()) }
