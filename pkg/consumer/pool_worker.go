package consumer

// The worker side of the pool: one goroutine per worker owns its lanes'
// ingestors and applies their commands in admission order (see the
// concurrency contract in pool.go).

import (
	"errors"
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

func (p *Pool) runWorker(w *worker) {
	defer p.workersDone.Done()
	defer close(w.done)
	defer p.releaseIngestors(w)
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		// Retire before publishing the failure so observers never see a
		// failed worker with live lanes.
		p.retireAll(w)
		p.markWorkerFailed(w)
		p.discardQueued(w)
	}()
	for {
		select {
		case cmd := <-w.queue:
			p.processReleasing(w, &cmd)
		case <-p.quit:
			p.retireAll(w)
			return
		}
	}
}

// processReleasing processes cmd and then releases a delta's outstanding
// entry, also while a panic unwinds (the seed drops the permit then), so a
// failed worker leaves no entry for the lag watchdog to misreport.
func (p *Pool) processReleasing(w *worker, cmd *command) {
	if cmd.op == opDelta {
		defer p.releaseDelta(p.lanes[cmd.lane], cmd.deltaID)
	}
	p.process(w, cmd)
}

// discardQueued releases the permits of deltas stranded in a failed worker's
// queue; control waiters observe w.done.
func (p *Pool) discardQueued(w *worker) {
	for {
		select {
		case cmd := <-w.queue:
			if cmd.op == opDelta {
				p.releaseDelta(p.lanes[cmd.lane], cmd.deltaID)
			}
		default:
			return
		}
	}
}

func (wl *workerLane) load() *LaneIngestor {
	if wl.ingestor == nil {
		wl.ingestor = wl.control.ingestor.Load()
	}
	return wl.ingestor
}

func (p *Pool) retireAll(w *worker) {
	for _, wl := range w.lanes {
		if wl != nil && wl.load() != nil {
			wl.ingestor.Retire()
		}
	}
}

func (p *Pool) releaseIngestors(w *worker) {
	// Every attachment that will ever reach this worker happened before
	// released is set; later ones refuse to claim.
	w.attachMu.Lock()
	w.released = true
	w.attachMu.Unlock()
	for _, wl := range w.lanes {
		if wl != nil && wl.load() != nil {
			wl.ingestor.Release()
		}
	}
}

// process applies one command per spec §9.4. Only w's goroutine calls it.
func (p *Pool) process(w *worker, cmd *command) {
	switch cmd.op {
	case opTestPause:
		cmd.ctl.pause.hold(p.quit)
		return
	case opTestCrash:
		panic("consumer: pool: injected ingestion worker failure")
	}
	wl := w.lanes[cmd.lane]
	c := wl.control
	ing := wl.load()
	if c.fenced.Load() {
		ing.Retire()
		rejectStale(cmd)
		return
	}
	current := c.publishedEpoch.Load()
	if wl.observed != current {
		ing.Retire()
		wl.observed = current
	}
	if cmd.epoch != current {
		rejectStale(cmd)
		return
	}
	epoch := cmd.epoch

	switch cmd.op {
	case opAssign:
		err := ing.Assign(cmd.ctl.identity, cmd.ctl.lease)
		cmd.ctl.reply <- controlReply{assignErr: err}
	case opSnapshot:
		s := cmd.ctl.snapshot
		began := p.now()
		w.installStart.Store(began.UnixNano())
		out := p.installGuarded(c, ing, epoch, s)
		w.installNanos.Add(int64(max(0, p.now().Sub(began))))
		w.installStart.Store(0)
		disp, hasDisp := ing.LastFailureDisposition()
		p.observeOutcome(c, epoch, s.Lease, out, disp, hasDisp)
		cmd.ctl.reply <- controlReply{outcome: out, disposition: disp, hasDisposition: hasDisp}
	case opDelta:
		if c.deltaPanic.Swap(false) {
			panic("consumer: pool: injected panic while applying a delta")
		}
		out := ing.ApplyDelta(&cmd.delta)
		if out.Kind == OutcomeLaneDeactivated {
			disp, hasDisp := ing.LastFailureDisposition()
			p.observeOutcome(c, epoch, cmd.delta.Lease, out, disp, hasDisp)
		}
	case opDrain:
		out := ing.CompleteDrain(cmd.ctl.marker)
		disp, hasDisp := ing.LastFailureDisposition()
		p.observeOutcome(c, epoch, cmd.ctl.marker.Lease, out, disp, hasDisp)
		cmd.ctl.reply <- controlReply{outcome: out, disposition: disp, hasDisposition: hasDisp}
	}

	// A retirement can race a command being applied: re-check so such a
	// command cannot leave the lane active after saturation or a timeout.
	if c.fenced.Load() || c.publishedEpoch.Load() != epoch {
		ing.Retire()
	}
}

// installGuarded installs s with an activation guard that, under the
// admission lock, refuses activation unless the lane is unfenced, still at
// epoch, under s.Lease and awaiting a snapshot. The lock is held from the
// check until the ingestor has set the ready bit, so a retirement cannot
// interleave; the deferred unlock keeps a panicking ingestor from wedging it.
func (p *Pool) installGuarded(c *laneControl, ing *LaneIngestor, epoch uint64, s *ckf.Snapshot) IngestOutcome {
	locked := false
	defer func() {
		if locked {
			c.mu.Unlock()
		}
	}()
	return ing.InstallSnapshotGuarded(s, func() bool {
		if h := c.activationPause.Swap(nil); h != nil {
			h.hold(p.quit)
		}
		c.mu.Lock()
		if c.fenced.Load() || c.adm.epoch != epoch || !c.leaseMatchesLocked(s.Lease) ||
			c.adm.state != AdmissionAwaitingSnapshot {
			c.mu.Unlock()
			return false
		}
		locked = true
		return true
	})
}

// crashLaneWorker queues an injected panic (opTestCrash) on lane's worker,
// blocking while its queue is full. Only tests reach it: pool_export_test.go
// and, under the ckftest build tag, CrashLaneWorkerForTest.
func (p *Pool) crashLaneWorker(lane int) {
	p.workers[p.lanes[lane].worker].queue <- command{op: opTestCrash}
}

// rejectStale answers a superseded command: control waiters observe
// retirement, deltas are discarded (their permit is released by the caller).
func rejectStale(cmd *command) {
	switch cmd.op {
	case opAssign, opSnapshot, opDrain:
		cmd.ctl.reply <- controlReply{stale: true}
	}
}

// errMissingDisposition marks a broken ingestor invariant; the worker fails.
var errMissingDisposition = errors.New("consumer: pool: lane deactivation without a failure disposition")

// observeOutcome handles a deactivation: RetrySnapshot keeps the assignment,
// DeactivateAndSnapshot retires the admission generation; any other action
// is an invariant violation that fails the worker.
func (p *Pool) observeOutcome(c *laneControl, epoch uint64, lease ckf.LaneLease, out IngestOutcome,
	disp ckf.FailureDisposition, hasDisp bool) {
	if out.Kind != OutcomeLaneDeactivated {
		return
	}
	if !hasDisp {
		panic(errMissingDisposition)
	}
	switch disp.Action {
	case ckf.ActionRetrySnapshot:
		// Validation failed on an inactive lane before any write.
	case ckf.ActionDeactivateAndSnapshot:
		p.retireGeneration(c, epoch)
	default:
		panic(fmt.Sprintf("consumer: pool: unexpected consumer-lane failure action %s", disp.Action))
	}
	p.reportFault(Fault{Kind: FaultLaneDeactivated, Lane: c.lane, Lease: lease, HasLease: true,
		LaneFault: out.Fault, Disposition: disp})
}
