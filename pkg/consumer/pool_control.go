package consumer

// The control plane of one lane: round trips to its worker under the
// transition lock, timeouts, retirement and fencing of admission
// generations, and the release of outstanding deltas (see the concurrency
// contract in pool.go for the lock order these functions assume).

import (
	"time"
)

// lockLane routes lane, takes its transition lock and checks its worker. On
// success the caller holds c.transition and must unlock it.
func (p *Pool) lockLane(lane int) (*laneControl, error) {
	c, err := p.route(lane)
	if err != nil {
		return nil, err
	}
	c.transition.Lock()
	if err := p.ensureWorker(c.worker); err != nil {
		c.transition.Unlock()
		return nil, err
	}
	return c, nil
}

// control runs a snapshot or drain round trip under the admission epoch it
// was admitted at; a command the worker rejected as stale means the lane was
// retired meanwhile.
func (p *Pool) control(c *laneControl, lane int, epoch uint64, op commandOp, req *controlRequest) (controlReply, error) {
	reply, err := p.roundTrip(c, epoch, command{op: op, lane: uint8(lane), epoch: epoch, ctl: req})
	if err != nil {
		return controlReply{}, err
	}
	if reply.stale {
		return controlReply{}, &IngestionError{Kind: ErrLaneRetired, Lane: lane}
	}
	return reply, nil
}

// roundTrip sends a control command and awaits its reply, each bounded by
// ControlTimeout. A timeout retires the lane (if the epoch is unchanged); a
// worker that exited yields ErrWorkerFailed, or ErrPoolClosed after Close.
func (p *Pool) roundTrip(c *laneControl, epoch uint64, cmd command) (controlReply, error) {
	w := p.workers[c.worker]
	timer := time.NewTimer(p.controlTimeout)
	defer timer.Stop()
	select {
	case w.queue <- cmd:
	case <-timer.C:
		return controlReply{}, p.controlTimedOut(c, epoch)
	case <-w.done:
		return controlReply{}, p.workerGone(c)
	}
	timer.Reset(p.controlTimeout)
	select {
	case reply := <-cmd.ctl.reply:
		return reply, nil
	case <-timer.C:
		return controlReply{}, p.controlTimedOut(c, epoch)
	case <-w.done:
		// The worker may have replied just before exiting.
		select {
		case reply := <-cmd.ctl.reply:
			return reply, nil
		default:
		}
		return controlReply{}, p.workerGone(c)
	}
}

func (p *Pool) controlTimedOut(c *laneControl, epoch uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.adm.epoch == epoch {
		if err := p.retireLocked(c); err != nil {
			return err
		}
	}
	return &IngestionError{Kind: ErrControlTimeout, Lane: c.lane}
}

func (p *Pool) workerGone(c *laneControl) error {
	if p.workers[c.worker].failed.Load() {
		return &IngestionError{Kind: ErrWorkerFailed, Worker: c.worker}
	}
	if p.closed.Load() {
		return &IngestionError{Kind: ErrPoolClosed, Lane: c.lane}
	}
	return &IngestionError{Kind: ErrLaneRetired, Lane: c.lane}
}

// retireLocked retires the lane's admission generation (spec §9.2). c.mu held.
func (p *Pool) retireLocked(c *laneControl) error {
	if c.adm.epoch == ^uint64(0) {
		p.fenceLocked(c)
		return &IngestionError{Kind: ErrAdmissionEpochExhausted, Lane: c.lane}
	}
	// Clear readiness while the admission lock excludes guarded activation:
	// a query that captured the old bit may finish, but no activation of the
	// old epoch can republish it.
	p.indexer.RetireLaneReadiness(c.lane)
	c.adm.epoch++
	c.adm.state = AdmissionRetired
	c.adm.hasLease = false
	c.publishedEpoch.Store(c.adm.epoch)
	return nil
}

// fenceLocked permanently fences the lane. c.mu held.
func (p *Pool) fenceLocked(c *laneControl) {
	p.indexer.RetireLaneReadiness(c.lane)
	c.adm.state = AdmissionRetired
	c.adm.hasLease = false
	c.fenced.Store(true)
}

// retireGeneration retires the lane if it is still at epoch.
func (p *Pool) retireGeneration(c *laneControl, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.adm.epoch == epoch {
		_ = p.retireLocked(c)
	}
}

// releaseLocked drops an outstanding delta entry. c.mu held.
func (p *Pool) releaseLocked(c *laneControl, id uint64) {
	images, ok := c.adm.outstanding.remove(id)
	if !ok {
		return
	}
	if images > c.adm.outstandingImages {
		panic("consumer: pool: outstanding-image accounting underflow")
	}
	c.adm.outstandingImages -= images
}

// releaseDelta drops an outstanding delta entry. The deferred unlock keeps
// an accounting-underflow panic from leaving the admission lock held.
func (p *Pool) releaseDelta(c *laneControl, id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p.releaseLocked(c, id)
}

// markWorkerFailed records a failed worker once, clears the ready bits of
// its lanes and reports it.
func (p *Pool) markWorkerFailed(w *worker) {
	if !w.failed.CompareAndSwap(false, true) {
		return
	}
	for lane, wl := range w.lanes {
		if wl != nil {
			p.indexer.RetireLaneReadiness(lane)
		}
	}
	p.reportFault(Fault{Kind: FaultWorkerFailed, Worker: w.index})
}

// reportFault never blocks: repeated notifications are coalesced by
// dropping them when the channel is full.
func (p *Pool) reportFault(f Fault) {
	select {
	case p.faults <- f:
	default:
	}
}
