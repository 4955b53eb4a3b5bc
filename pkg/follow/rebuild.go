package follow

import (
	"sync/atomic"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/consumer"
)

// Ingestion pool rebuilds.
//
// A worker panic makes the consumer.Pool fail closed: the worker's lanes
// are retired and every later call for them returns ErrWorkerFailed. The
// service recovers by replacing the whole pool: it closes the failed pool
// (Close retires every lane and the workers release their ingestors, so the
// lanes can be claimed again), builds a new pool over the same
// consumer.Indexer (NewPool claims every configured lane), publishes it as a
// new generation and closes the old generation's replaced channel. Every
// lane runner then bootstraps again into the new pool: the ones on the
// failed worker because their lanes went down, the others because Close
// retired theirs. Queries keep reading the shared indexer throughout and
// answer for whichever lanes are ready.
//
// Rebuilds are spaced by rebuildLimiter so a crash loop cannot spin.

// poolGen is one generation of the ingestion pool.
type poolGen struct {
	pool *consumer.Pool
	// replaced is closed once the next generation is published.
	replaced chan struct{}
	// failed is set when a failed worker of this pool is first seen; the
	// rebuild of this generation is then pending or under way.
	failed atomic.Bool
}

func newPoolGen(p *consumer.Pool) *poolGen {
	return &poolGen{pool: p, replaced: make(chan struct{})}
}

// laneDown reports whether g cannot serve lane until it is rebuilt: g's
// pool routes lane to a failed worker, or g is failing and lane was
// configured in the shared indexer only, for the rebuilt pool. Lanes on
// live workers keep being served by g until the rebuild retires them.
func (g *poolGen) laneDown(lane int) bool {
	w, ok := g.pool.WorkerForLane(lane)
	if !ok {
		return g.failed.Load()
	}
	return g.pool.WorkerFailed(w)
}

// rebuildLimiter spaces rebuilds: the first is immediate; each later one
// waits interval after the previous, interval starting at min and doubling
// up to max while rebuilds follow each other within max, and falling back
// to min once a pool has lasted max. Guarded by Service.mu.
type rebuildLimiter struct {
	min, max time.Duration
	interval time.Duration
	last     time.Time // zero: no rebuild yet
}

// delay returns how long a rebuild wanted at now must wait.
func (l *rebuildLimiter) delay(now time.Time) time.Duration {
	if l.last.IsZero() {
		return 0
	}
	return max(0, l.last.Add(l.interval).Sub(now))
}

// record notes a rebuild attempt at now and sets the interval before the
// next one.
func (l *rebuildLimiter) record(now time.Time) {
	if l.last.IsZero() || now.Sub(l.last) >= l.max {
		l.interval = l.min
	} else {
		l.interval = min(2*l.interval, l.max)
	}
	l.last = now
}

// poolFailed starts the rebuild of g once; later calls (more failed
// workers, runners refused with ErrWorkerFailed) are no-ops.
func (s *Service) poolFailed(g *poolGen) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.poolFailedLocked(g)
}

// poolFailedLocked is poolFailed with s.mu held.
func (s *Service) poolFailedLocked(g *poolGen) {
	if s.closing || s.gen.Load() != g || !g.failed.CompareAndSwap(false, true) {
		return
	}
	// Under s.mu and before closing is set: shutdown's dispatch.Wait
	// follows this Add.
	s.dispatch.Add(1)
	go s.rebuild(g)
}

// rebuild replaces the failed generation g, waiting for the limiter before
// each attempt, until it succeeds, g is no longer current or the service
// stops.
func (s *Service) rebuild(g *poolGen) {
	defer s.dispatch.Done()
	for {
		s.mu.Lock()
		wait := s.limiter.delay(s.now())
		s.mu.Unlock()
		if wait > 0 {
			s.log.Warn().Dur("wait_ms", wait).Msg("ingestion pool rebuild rate limited")
			if !s.rebuildDelay(wait, s.stopFault) {
				return
			}
		}
		done, err := s.replacePool(g)
		if done {
			return
		}
		if err != nil {
			s.log.Error().Err(err).Msg("ingestion pool rebuild failed; retrying")
		}
	}
}

// replacePool closes g's pool, builds and publishes its successor and wakes
// the lane runners waiting on g. done is false when the attempt must be
// retried (rate limited, or the new pool could not be built: g's pool then
// stays closed and current).
func (s *Service) replacePool(g *poolGen) (done bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.gen.Load() != g {
		return true, nil
	}
	now := s.now()
	if s.limiter.delay(now) > 0 {
		return false, nil
	}
	s.limiter.record(now)
	_ = g.pool.Close() // always nil; idempotent when retried
	p, err := s.newPool(g.pool.Indexer(), s.cfg.Pool)
	if err != nil {
		return false, err
	}
	next := newPoolGen(p)
	s.gen.Store(next)
	close(g.replaced)
	rebuilds := s.m.poolRebuilt()
	s.dispatch.Add(1)
	go s.dispatchFaults(next)
	s.log.Warn().Uint64("rebuilds", rebuilds).Dur("next_min_interval_ms", s.limiter.interval).
		Msg("ingestion pool rebuilt; every lane bootstraps again")
	return true, nil
}
