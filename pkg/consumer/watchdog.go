package consumer

// The lag watchdog: it retires a lane whose oldest outstanding delta has
// waited past MaxDirtyToAppliedAge (the seed's lag fence).

import (
	"time"
)

func (p *Pool) runWatchdog() {
	defer close(p.watchdogDone)
	ticker := time.NewTicker(p.watchInterval)
	defer ticker.Stop()
	for {
		select {
		case <-p.watchdogStop:
			return
		case <-ticker.C:
			p.fenceExpiredLanes(p.now())
		}
	}
}

// fenceExpiredLanes retires every active lane whose oldest outstanding delta
// is at least MaxDirtyToAppliedAge old at now, not counting the time its
// worker spent installing snapshots meanwhile (Pool.lag).
func (p *Pool) fenceExpiredLanes(now time.Time) {
	for _, c := range p.lanes {
		if !c.configured.Load() {
			continue
		}
		c.mu.Lock()
		oldest, ok := c.adm.outstanding.front()
		if c.adm.state != AdmissionActive || !ok || p.lag(c, oldest, now) < c.maxAge {
			c.mu.Unlock()
			continue
		}
		lease := c.adm.lease
		_ = p.retireLocked(c)
		c.mu.Unlock()
		p.reportFault(Fault{Kind: FaultDirtyToAppliedAgeExceeded, Lane: c.lane, Lease: lease, HasLease: true})
	}
}

// stopWatchdog stops the lag watchdog and waits for it; idempotent.
func (p *Pool) stopWatchdog() {
	p.watchdogOnce.Do(func() { close(p.watchdogStop) })
	<-p.watchdogDone
}
