package consumer

import (
	"math"
	"testing"
	"time"
)

// Test hooks for Pool. They reach unexported state only; none is public API.

const hookWait = 5 * time.Second

// pauseLaneWorker queues a pause command on lane's worker, waits until the
// worker holds it and returns the function that resumes the worker. Every
// command queued meanwhile waits behind the pause.
func (p *Pool) pauseLaneWorker(t testing.TB, lane int) (resume func()) {
	t.Helper()
	h := &pauseHook{entered: make(chan struct{}, 1), release: make(chan struct{})}
	p.workers[p.lanes[lane].worker].queue <- command{op: opTestPause, ctl: &controlRequest{pause: h}}
	select {
	case <-h.entered:
	case <-time.After(hookWait):
		t.Fatalf("worker of lane %d did not pause", lane)
	}
	released := false
	return func() {
		if !released {
			released = true
			close(h.release)
		}
	}
}

// pauseNextSnapshotActivation holds lane's worker just before the next
// snapshot activation guard takes the admission lock. entered fires when the
// worker is held; release lets it continue.
func (p *Pool) pauseNextSnapshotActivation(lane int) (entered <-chan struct{}, release func()) {
	h := &pauseHook{entered: make(chan struct{}, 1), release: make(chan struct{})}
	p.lanes[lane].activationPause.Store(h)
	return h.entered, func() { close(h.release) }
}

// retireLaneForTest retires lane's admission generation as a saturation or
// timeout would.
func (p *Pool) retireLaneForTest(lane int) error {
	c := p.lanes[lane]
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.retireLocked(c)
}

// exhaustLaneEpochForTest moves lane's admission epoch to its last value.
func (p *Pool) exhaustLaneEpochForTest(lane int) {
	c := p.lanes[lane]
	c.mu.Lock()
	defer c.mu.Unlock()
	c.adm.epoch = math.MaxUint64
	c.publishedEpoch.Store(math.MaxUint64)
}

// closeWatchdogForTest stops the lag watchdog so only admission checks ages.
func (p *Pool) closeWatchdogForTest() { p.stopWatchdog() }

// newPoolWithClock is NewPool with an injected clock for lag ages.
func newPoolWithClock(indexer *Indexer, cfg PoolConfig, now func() time.Time) (*Pool, error) {
	return newPool(indexer, cfg, now)
}

// pauseNextConfigure holds the next ConfigureLane after its worker check and
// before it claims the lane.
func (p *Pool) pauseNextConfigure() (entered <-chan struct{}, release func()) {
	h := &pauseHook{entered: make(chan struct{}, 1), release: make(chan struct{})}
	p.configurePause.Store(h)
	return h.entered, func() { close(h.release) }
}

// panicNextDeltaForTest makes lane's worker panic while applying the lane's
// next delta, as a bug in the ingestor would.
func (p *Pool) panicNextDeltaForTest(lane int) { p.lanes[lane].deltaPanic.Store(true) }

// corruptOutstandingImagesForTest breaks lane's image accounting so the next
// release underflows, as a bookkeeping bug would.
func (p *Pool) corruptOutstandingImagesForTest(lane int) {
	c := p.lanes[lane]
	c.mu.Lock()
	defer c.mu.Unlock()
	c.adm.outstandingImages = 0
}

// waitWorkerExit waits until lane's worker goroutine has exited.
func (p *Pool) waitWorkerExit(t testing.TB, lane int) {
	t.Helper()
	select {
	case <-p.workers[p.lanes[lane].worker].done:
	case <-time.After(hookWait):
		t.Fatalf("worker of lane %d did not exit", lane)
	}
}
