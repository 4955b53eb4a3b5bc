package consumer

// Bounded lane-sticky ingestion pool (spec §9, seed ingestion_pool.rs).
//
// Concurrency contract
//
//   - Ownership. Every lane routes to exactly one worker goroutine,
//     ckf.StickyWorker(consumer, lane, W). That worker is the only goroutine
//     that touches the lane's *LaneIngestor (assign, install, apply, drain,
//     retire, release) and its workerLane.observed epoch. Each worker has one
//     bounded FIFO channel of QueueCapacity commands shared by all its lanes,
//     so snapshots, deltas and drain markers of one lane are applied in
//     admission order, while other lanes and queries proceed concurrently.
//   - Locks, per lane, always taken in this order: laneControl.transition
//     (serialises Assign, InstallSnapshot and CompleteDrain of one lane; held
//     across their round trip to the worker), then laneControl.mu (the
//     admission lock; guards laneControl.adm: state, epoch, lease, last
//     assignment epoch, delta ids, outstanding images and the outstanding
//     FIFO). SubmitDelta takes only mu and never blocks while holding it (the
//     enqueue is non-blocking). Pool.configMu serialises ConfigureLane and
//     Close and is never held with a lane lock. worker.attachMu (taken
//     after configMu) orders a runtime lane claim against the worker's exit,
//     so every claim is released by the worker or never made.
//   - Epochs. Every admission change that invalidates queued work (assign,
//     retire) bumps adm.epoch under mu and mirrors it into the atomic
//     publishedEpoch. Commands carry the epoch they were admitted under; the
//     worker drops a command whose epoch is no longer published and retires
//     its ingestor when it observes a new epoch, so queued tails of a retired
//     lane are discarded without scanning the queue. fenced is the permanent
//     form of retirement (epoch exhausted) and is also atomic.
//   - Ready bit. Readiness lives in the Indexer's atomic mask (Go atomics
//     are sequentially consistent). Retirement clears the bit under mu before
//     the new epoch is published; snapshot activation sets it under mu after
//     checking that the epoch, lease and state are unchanged and after every
//     bucket word has been stored. Hence a retirement either precedes an
//     activation (which then refuses) or follows it (and clears the bit): a
//     racing command can never leave a retired lane ready. After every
//     command the worker re-checks the epoch and retires the ingestor if it
//     moved. Queries read only the mask and bucket words, never pool state.
//   - Outstanding deltas. SubmitDelta records (id, images, submittedAt) in
//     the lane's FIFO ring under mu before enqueueing; the worker releases the
//     entry under mu after applying or discarding the delta. The lag watchdog
//     goroutine reads the ring's head under mu.
//   - Failure. Readiness is authoritative; the fault channel is bounded and
//     best-effort. A worker panic is recovered on that worker: it retires its
//     ingestors, marks itself failed (clearing its lanes' ready bits) and
//     reports FaultWorkerFailed; every later call for its lanes fails with
//     ErrWorkerFailed.

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// laneAdmission is the admission state of one lane, guarded by laneControl.mu.
type laneAdmission struct {
	epoch               uint64
	state               AdmissionState
	lease               ckf.LaneLease
	hasLease            bool
	lastAssignmentEpoch uint64
	hasLastAssignment   bool
	nextDeltaID         uint64
	outstandingImages   uint64
	outstanding         deltaRing
}

// pauseHook lets tests hold a worker at a chosen point.
type pauseHook struct {
	entered chan struct{}
	release chan struct{}
}

// hold signals entered and waits for release or quit.
func (h *pauseHook) hold(quit <-chan struct{}) {
	h.entered <- struct{}{}
	select {
	case <-h.release:
	case <-quit:
	}
}

// laneControl is the shared per-lane state; see the contract above.
type laneControl struct {
	lane           int
	worker         int
	configured     atomic.Bool
	ingestor       atomic.Pointer[LaneIngestor] // handed to the worker once, at configuration
	publishedEpoch atomic.Uint64
	fenced         atomic.Bool

	transition sync.Mutex
	mu         sync.Mutex // admission lock; guards adm
	adm        laneAdmission

	maxOutstanding uint64
	maxAge         time.Duration

	// activationPause is a test hook taken once before the next snapshot
	// activation guard.
	activationPause atomic.Pointer[pauseHook]
	// deltaPanic is a test hook: the worker panics while applying the next
	// delta of this lane, as a bug in the ingestor would.
	deltaPanic atomic.Bool
}

func (c *laneControl) leaseMatchesLocked(lease ckf.LaneLease) bool {
	return c.adm.hasLease && c.adm.lease == lease
}

type commandOp uint8

const (
	opDelta commandOp = iota + 1
	opAssign
	opSnapshot
	opDrain
	opTestPause
	opTestCrash
)

// command travels by value on a worker's queue. Deltas are inline so the hot
// path allocates nothing; the rare control operations carry a request.
type command struct {
	op      commandOp
	lane    uint8
	epoch   uint64
	deltaID uint64
	delta   ckf.Delta
	ctl     *controlRequest
}

type controlRequest struct {
	identity ckf.ProducerIdentity
	lease    ckf.LaneLease
	snapshot *ckf.Snapshot
	marker   ckf.DrainMarker
	pause    *pauseHook
	reply    chan controlReply // buffered 1: the worker never blocks on it
}

type controlReply struct {
	outcome        IngestOutcome
	disposition    ckf.FailureDisposition
	hasDisposition bool
	assignErr      error
	stale          bool // rejected as superseded: the waiter observes retirement
}

// workerLane is a lane as its worker sees it; touched only by that worker.
type workerLane struct {
	control  *laneControl
	ingestor *LaneIngestor
	observed uint64
}

type worker struct {
	index  int
	queue  chan command
	done   chan struct{} // closed when the goroutine exits, for any reason
	failed atomic.Bool
	lanes  [ckf.LaneCount]*workerLane

	// attachMu orders a runtime ConfigureLane against the worker's exit:
	// either the lane's ingestor is published before releaseIngestors runs
	// (which then releases it), or the attachment sees released and claims
	// nothing, so no claim outlives the worker.
	attachMu sync.Mutex
	released bool

	// installStart is when the worker began the snapshot install it is
	// running (unix nanoseconds of Pool.now; 0: none) and installNanos the
	// total length of its finished installs. A lane's deltas that wait
	// behind another lane's install (a bootstrap, a kvrelay source's
	// resubscription) are not late by their own lane's doing: the lag
	// bound excludes that time (installTime), so one lane's snapshots
	// cannot retire the others sharing its worker.
	installStart atomic.Int64
	installNanos atomic.Int64
}

// installTime is the worker's time spent installing snapshots up to now,
// in nanoseconds, the install under way included.
func (w *worker) installTime(now time.Time) int64 {
	t := w.installNanos.Load()
	if s := w.installStart.Load(); s != 0 {
		t += max(0, now.UnixNano()-s)
	}
	return t
}

// lag is how long d has waited for application at now, less the time its
// worker spent installing snapshots meanwhile.
func (p *Pool) lag(c *laneControl, d outstandingDelta, now time.Time) time.Duration {
	waited := now.Sub(d.submittedAt)
	behind := time.Duration(p.workers[c.worker].installTime(now) - d.installMark)
	return waited - max(behind, 0)
}

// Pool is GlobalCkfIngestionPool: bounded lane-sticky ingestion for one
// Indexer. All methods are safe for concurrent use.
type Pool struct {
	indexer        *Indexer
	controlTimeout time.Duration
	lanes          [ckf.LaneCount]*laneControl
	workers        []*worker
	faults         chan Fault
	now            func() time.Time

	quit          chan struct{}
	workersDone   sync.WaitGroup
	watchdogStop  chan struct{}
	watchdogDone  chan struct{}
	watchdogOnce  sync.Once
	watchInterval time.Duration

	configMu  sync.Mutex
	closed    atomic.Bool
	closeDone chan struct{} // closed when the first Close has failed closed

	// configurePause is a test hook taken once by the next ConfigureLane,
	// after its worker check and before it claims the lane.
	configurePause atomic.Pointer[pauseHook]
}

// NewPool starts the workers and the lag watchdog for indexer and claims the
// ingestor of every configured lane. It fails with a *PoolBuildError
// (ErrInvalid… for config, ErrClaimLane wrapping the indexer error).
func NewPool(indexer *Indexer, cfg PoolConfig) (*Pool, error) {
	return newPool(indexer, cfg, time.Now)
}

func newPool(indexer *Indexer, cfg PoolConfig, now func() time.Time) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	manifest := indexer.Manifest()
	limit := cfg.MaxOutstandingImagesPerLane
	if limit == 0 {
		limit = manifest.Format().BucketCount
	}
	p := &Pool{
		indexer:        indexer,
		controlTimeout: cfg.ControlTimeout,
		workers:        make([]*worker, cfg.WorkerCount),
		// Readiness is the authoritative failure signal; keep diagnostics
		// bounded so an unread channel cannot retain repeated faults.
		faults:       make(chan Fault, 2*ckf.LaneCount+cfg.WorkerCount),
		now:          now,
		quit:         make(chan struct{}),
		watchdogStop: make(chan struct{}),
		watchdogDone: make(chan struct{}),
		closeDone:    make(chan struct{}),
		watchInterval: min(max(cfg.MaxDirtyToAppliedAge/4, 100*time.Microsecond),
			10*time.Millisecond),
	}
	for i := range p.workers {
		p.workers[i] = &worker{
			index: i,
			queue: make(chan command, cfg.QueueCapacity),
			done:  make(chan struct{}),
		}
	}
	consumer := uint64(manifest.ConsumerInstance())
	// Admission state exists for all lanes so ConfigureLane can add one later;
	// the route is a pure function of (consumer, lane, W).
	for lane := range ckf.LaneCount {
		w := ckf.StickyWorker(consumer, uint8(lane), cfg.WorkerCount)
		c := &laneControl{lane: lane, worker: w, maxOutstanding: limit, maxAge: cfg.MaxDirtyToAppliedAge}
		p.lanes[lane] = c
		p.workers[w].lanes[lane] = &workerLane{control: c}
	}
	configured := manifest.ConfiguredLanes()
	for lane := range ckf.LaneCount {
		if configured&(1<<lane) == 0 {
			continue
		}
		if err := p.attachLane(lane); err != nil {
			for _, c := range p.lanes {
				if ing := c.ingestor.Load(); ing != nil {
					ing.Release()
				}
			}
			return nil, err
		}
	}
	for _, w := range p.workers {
		p.workersDone.Add(1)
		go p.runWorker(w)
	}
	go p.runWatchdog()
	return p, nil
}

// attachLane claims lane's ingestor and publishes it to the routed worker.
// The ingestor pointer is stored before configured is set, and commands are
// admitted only after configured is observed, so the worker always finds it.
func (p *Pool) attachLane(lane int) error {
	ing, err := p.indexer.ClaimLane(lane)
	if err != nil {
		return &PoolBuildError{Kind: ErrClaimLane, Lane: lane, Err: err}
	}
	c := p.lanes[lane]
	c.ingestor.Store(ing)
	c.configured.Store(true)
	return nil
}

// ConfigureLane configures lane for pool in the indexer at runtime and hands
// its ingestor to the lane's sticky worker. It fails with the indexer's
// *BuildError (e.g. ErrLaneAlreadyConfigured, ErrDuplicatePool), a
// *PoolBuildError (ErrClaimLane), ErrWorkerFailed or ErrPoolClosed.
func (p *Pool) ConfigureLane(lane int, pool ckf.PoolID) error {
	p.configMu.Lock()
	defer p.configMu.Unlock()
	if p.closed.Load() {
		return &IngestionError{Kind: ErrPoolClosed, Lane: lane}
	}
	if lane < 0 || lane >= ckf.LaneCount {
		return p.indexer.ConfigureLane(lane, pool) // the indexer's lane error
	}
	w := p.workers[p.lanes[lane].worker]
	if err := p.ensureWorker(w.index); err != nil {
		return err
	}
	if h := p.configurePause.Swap(nil); h != nil {
		h.hold(p.quit)
	}
	// A failed worker releases its ingestors once and would never release a
	// new one: the worker may fail after the check above, so check again
	// under attachMu, which its exit path also takes.
	w.attachMu.Lock()
	defer w.attachMu.Unlock()
	if w.released || w.failed.Load() {
		return &IngestionError{Kind: ErrWorkerFailed, Worker: w.index}
	}
	if err := p.indexer.ConfigureLane(lane, pool); err != nil {
		return err
	}
	return p.attachLane(lane)
}

// Indexer returns the indexer the pool ingests into.
func (p *Pool) Indexer() *Indexer { return p.indexer }

// WorkerForLane returns the worker a configured lane is routed to.
func (p *Pool) WorkerForLane(lane int) (int, bool) {
	if lane < 0 || lane >= ckf.LaneCount || !p.lanes[lane].configured.Load() {
		return 0, false
	}
	return p.lanes[lane].worker, true
}

// FailedWorker returns the lowest-numbered failed worker, if any.
func (p *Pool) FailedWorker() (int, bool) {
	for _, w := range p.workers {
		if w.failed.Load() {
			return w.index, true
		}
	}
	return 0, false
}

// WorkerFailed reports whether worker has failed.
func (p *Pool) WorkerFailed(worker int) bool {
	return worker >= 0 && worker < len(p.workers) && p.workers[worker].failed.Load()
}

// Faults returns the bounded, best-effort fault notification channel. It is
// never closed; readiness remains the authoritative failure signal.
func (p *Pool) Faults() <-chan Fault { return p.faults }

// TryRecvFault returns a pending fault without blocking.
func (p *Pool) TryRecvFault() (Fault, bool) {
	select {
	case f := <-p.faults:
		return f, true
	default:
		return Fault{}, false
	}
}

// LaneState returns a copy of a configured lane's admission state.
func (p *Pool) LaneState(lane int) (LaneStatus, bool) {
	if lane < 0 || lane >= ckf.LaneCount || !p.lanes[lane].configured.Load() {
		return LaneStatus{}, false
	}
	c := p.lanes[lane]
	c.mu.Lock()
	defer c.mu.Unlock()
	return LaneStatus{
		Worker:            c.worker,
		State:             c.adm.state,
		Epoch:             c.adm.epoch,
		Fenced:            c.fenced.Load(),
		Lease:             c.adm.lease,
		HasLease:          c.adm.hasLease,
		OutstandingImages: c.adm.outstandingImages,
		OutstandingDeltas: c.adm.outstanding.n,
	}, true
}

func (p *Pool) route(lane int) (*laneControl, error) {
	if p.closed.Load() {
		return nil, &IngestionError{Kind: ErrPoolClosed, Lane: lane}
	}
	if lane < 0 || lane >= ckf.LaneCount || !p.lanes[lane].configured.Load() {
		return nil, &IngestionError{Kind: ErrLaneNotConfigured, Lane: lane}
	}
	return p.lanes[lane], nil
}

func (p *Pool) ensureWorker(worker int) error {
	if p.workers[worker].failed.Load() {
		return &IngestionError{Kind: ErrWorkerFailed, Worker: worker}
	}
	return nil
}

// Assign starts a new assignment of lease.PhysicalLane to identity and waits
// for the worker to accept it; the lane then awaits a snapshot. A stale or
// foreign assignment fails with ErrAssignment (wrapping *AssignmentError)
// without disturbing the current lane. Other failures: ErrLaneNotConfigured,
// ErrWorkerFailed, ErrAdmissionEpochExhausted, ErrControlTimeout,
// ErrLaneRetired, ErrPoolClosed.
func (p *Pool) Assign(identity ckf.ProducerIdentity, lease ckf.LaneLease) error {
	lane := int(lease.PhysicalLane)
	c, err := p.lockLane(lane)
	if err != nil {
		return err
	}
	defer c.transition.Unlock()
	c.mu.Lock()
	if c.fenced.Load() {
		c.mu.Unlock()
		return &IngestionError{Kind: ErrAdmissionEpochExhausted, Lane: lane}
	}
	if err := p.indexer.ValidateAssignment(lane, identity, lease, c.adm.lastAssignmentEpoch, c.adm.hasLastAssignment); err != nil {
		c.mu.Unlock()
		return &IngestionError{Kind: ErrAssignment, Lane: lane, Err: err}
	}
	if c.adm.epoch == ^uint64(0) {
		p.fenceLocked(c)
		c.mu.Unlock()
		return &IngestionError{Kind: ErrAdmissionEpochExhausted, Lane: lane}
	}
	// A rejected assignment never gets here, so it cannot clear a valid lane.
	// Once the transition starts, readiness is retired before the lease changes.
	epoch := c.adm.epoch + 1
	p.indexer.RetireLaneReadiness(lane)
	c.adm.epoch = epoch
	c.adm.state = AdmissionTransitioning
	c.adm.lease, c.adm.hasLease = lease, true
	c.publishedEpoch.Store(epoch)
	c.mu.Unlock()

	req := &controlRequest{identity: identity, lease: lease, reply: make(chan controlReply, 1)}
	reply, err := p.roundTrip(c, epoch, command{op: opAssign, lane: uint8(lane), epoch: epoch, ctl: req})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if reply.stale || c.adm.epoch != epoch {
		return &IngestionError{Kind: ErrLaneRetired, Lane: lane}
	}
	if reply.assignErr != nil {
		c.adm.state = AdmissionRetired
		c.adm.hasLease = false
		return &IngestionError{Kind: ErrAssignment, Lane: lane, Err: reply.assignErr}
	}
	c.adm.state = AdmissionAwaitingSnapshot
	c.adm.lastAssignmentEpoch, c.adm.hasLastAssignment = lease.AssignmentEpoch, true
	return nil
}

// InstallSnapshot installs s on its lane and waits for the outcome. The lane
// must await a snapshot or be active under s.Lease (else ErrLaneUnassigned or
// ErrLaneRetired). The worker reads s.Buckets until it replies or the lane is
// retired; the caller must not modify it meanwhile. A stale snapshot on an
// active lane returns OutcomeIgnoredStaleOrDuplicate and changes nothing; a
// rejected snapshot on an inactive lane keeps the lease retryable.
func (p *Pool) InstallSnapshot(s *ckf.Snapshot) (IngestOutcome, error) {
	lane := int(s.Lease.PhysicalLane)
	c, err := p.lockLane(lane)
	if err != nil {
		return IngestOutcome{}, err
	}
	defer c.transition.Unlock()
	c.mu.Lock()
	switch c.adm.state {
	case AdmissionAwaitingSnapshot, AdmissionActive:
	case AdmissionUnassigned:
		c.mu.Unlock()
		return IngestOutcome{}, &IngestionError{Kind: ErrLaneUnassigned, Lane: lane}
	default:
		c.mu.Unlock()
		return IngestOutcome{}, &IngestionError{Kind: ErrLaneRetired, Lane: lane}
	}
	if !c.leaseMatchesLocked(s.Lease) {
		c.mu.Unlock()
		return IngestOutcome{}, &IngestionError{Kind: ErrLaneRetired, Lane: lane}
	}
	epoch := c.adm.epoch
	c.mu.Unlock()

	reply, err := p.control(c, lane, epoch, opSnapshot, &controlRequest{snapshot: s, reply: make(chan controlReply, 1)})
	if err != nil {
		return IngestOutcome{}, err
	}
	out := reply.outcome
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.adm.epoch != epoch {
		if out.Kind == OutcomeLaneDeactivated {
			return out, nil
		}
		return IngestOutcome{}, &IngestionError{Kind: ErrLaneRetired, Lane: lane}
	}
	switch out.Kind {
	case OutcomeSnapshotInstalled:
		c.adm.state = AdmissionActive
	case OutcomeLaneDeactivated:
		// An inactive snapshot is validated before any bucket write; keep the
		// assignment so the same lease can retry without producer recovery.
		if reply.hasDisposition && reply.disposition.Action == ckf.ActionRetrySnapshot {
			c.adm.state = AdmissionAwaitingSnapshot
		} else {
			c.adm.state = AdmissionRetired
		}
	}
	return out, nil
}

// SubmitDelta admits d to its lane without waiting for application. The
// delta is copied, but the worker reads d.Images until it applies or
// discards the delta; the caller must not modify them meanwhile.
//
// The lane must be active under d.Lease (else ErrAwaitingSnapshot,
// ErrLaneUnassigned or ErrLaneRetired). A lane whose oldest outstanding delta
// is too old (ErrDirtyToAppliedAgeExceeded), whose outstanding images would
// exceed the bound (ErrOutstandingImageLimit) or whose worker queue is full
// (ErrSaturated) is retired and a fault is reported; only the submitting lane
// is affected. Other failures: ErrLaneNotConfigured, ErrWorkerFailed,
// ErrAdmissionEpochExhausted, ErrPoolClosed. Application faults arrive
// asynchronously on Faults and clear the lane's ready bit.
func (p *Pool) SubmitDelta(d *ckf.Delta) error {
	lane := int(d.Lease.PhysicalLane)
	c, err := p.route(lane)
	if err != nil {
		return err
	}
	if err := p.ensureWorker(c.worker); err != nil {
		return err
	}
	c.mu.Lock()
	switch c.adm.state {
	case AdmissionActive:
	case AdmissionAwaitingSnapshot:
		c.mu.Unlock()
		return &IngestionError{Kind: ErrAwaitingSnapshot, Lane: lane}
	case AdmissionUnassigned:
		c.mu.Unlock()
		return &IngestionError{Kind: ErrLaneUnassigned, Lane: lane}
	default:
		c.mu.Unlock()
		return &IngestionError{Kind: ErrLaneRetired, Lane: lane}
	}
	if !c.leaseMatchesLocked(d.Lease) {
		c.mu.Unlock()
		return &IngestionError{Kind: ErrLaneRetired, Lane: lane}
	}
	epoch := c.adm.epoch
	images := uint64(len(d.Images))
	now := p.now()
	if oldest, ok := c.adm.outstanding.front(); ok && p.lag(c, oldest, now) >= c.maxAge {
		lease := c.adm.lease
		_ = p.retireLocked(c)
		c.mu.Unlock()
		p.reportFault(Fault{Kind: FaultDirtyToAppliedAgeExceeded, Lane: lane, Lease: lease, HasLease: true})
		return &IngestionError{Kind: ErrDirtyToAppliedAgeExceeded, Lane: lane}
	}
	requested := c.adm.outstandingImages + images
	if requested < images { // saturate like the seed
		requested = ^uint64(0)
	}
	if requested > c.maxOutstanding {
		lease := c.adm.lease
		_ = p.retireLocked(c)
		c.mu.Unlock()
		p.reportFault(Fault{Kind: FaultOutstandingImageLimit, Lane: lane, Lease: lease, HasLease: true,
			Requested: requested, Limit: c.maxOutstanding})
		return &IngestionError{Kind: ErrOutstandingImageLimit, Lane: lane, Requested: requested, Limit: c.maxOutstanding}
	}
	if c.adm.nextDeltaID == ^uint64(0) {
		p.fenceLocked(c)
		c.mu.Unlock()
		return &IngestionError{Kind: ErrAdmissionEpochExhausted, Lane: lane}
	}
	id := c.adm.nextDeltaID + 1
	c.adm.nextDeltaID = id
	c.adm.outstandingImages = requested
	c.adm.outstanding.push(outstandingDelta{id: id, images: images, submittedAt: now, installMark: p.workers[c.worker].installTime(now)})
	// Enqueue under the admission lock so queue order matches delta ids and a
	// full queue retires exactly the generation that was admitted.
	select {
	case p.workers[c.worker].queue <- command{op: opDelta, lane: uint8(lane), epoch: epoch, deltaID: id, delta: *d}:
		c.mu.Unlock()
		return nil
	default:
	}
	// The queue is shared by every lane sticky to this worker; exact per-lane
	// slot fairness would need subqueues, so only the submitting lane retires.
	p.releaseLocked(c, id)
	lease := c.adm.lease
	err = p.retireLocked(c)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	p.reportFault(Fault{Kind: FaultSaturated, Lane: lane, Lease: lease, HasLease: true})
	return &IngestionError{Kind: ErrSaturated, Lane: lane}
}

// CompleteDrain waits until every delta admitted before it on the marker's
// lane is applied and returns OutcomeDrainAcknowledged or
// OutcomeLaneDeactivated. The lane must be active under marker.Lease (else
// ErrLaneRetired).
func (p *Pool) CompleteDrain(marker ckf.DrainMarker) (IngestOutcome, error) {
	lane := int(marker.Lease.PhysicalLane)
	c, err := p.lockLane(lane)
	if err != nil {
		return IngestOutcome{}, err
	}
	defer c.transition.Unlock()
	c.mu.Lock()
	if c.adm.state != AdmissionActive || !c.leaseMatchesLocked(marker.Lease) {
		c.mu.Unlock()
		return IngestOutcome{}, &IngestionError{Kind: ErrLaneRetired, Lane: lane}
	}
	epoch := c.adm.epoch
	c.mu.Unlock()

	reply, err := p.control(c, lane, epoch, opDrain, &controlRequest{marker: marker, reply: make(chan controlReply, 1)})
	if err != nil {
		return IngestOutcome{}, err
	}
	return reply.outcome, nil
}

// Close fails closed: it stops the watchdog, retires every lane (clearing
// its ready bit), asks the workers to stop without queueing behind a full
// queue, and waits for them; the workers release their ingestors. Every
// later call returns ErrPoolClosed. Close is idempotent and always returns
// nil; a concurrent Close returns only once the first has failed closed.
func (p *Pool) Close() error {
	p.configMu.Lock()
	first := p.closed.CompareAndSwap(false, true)
	p.configMu.Unlock()
	if !first {
		<-p.closeDone
		return nil
	}
	defer close(p.closeDone)
	p.stopWatchdog()
	// Retire before stopping workers: a command in application re-checks
	// the epoch before returning, and queued tails become no-ops.
	for _, c := range p.lanes {
		if !c.configured.Load() {
			continue
		}
		c.mu.Lock()
		_ = p.retireLocked(c)
		c.mu.Unlock()
	}
	close(p.quit)
	p.workersDone.Wait()
	return nil
}
