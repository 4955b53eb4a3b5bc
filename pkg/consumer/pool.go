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
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// PoolConfig configures a Pool. Use DefaultPoolConfig and override fields.
type PoolConfig struct {
	// WorkerCount is the number of ingestion workers (default 4).
	WorkerCount int
	// QueueCapacity bounds each worker's FIFO, shared by its lanes (default 256).
	QueueCapacity int
	// ControlTimeout bounds each send and each reply of Assign,
	// InstallSnapshot and CompleteDrain (default 10s).
	ControlTimeout time.Duration
	// MaxOutstandingImagesPerLane bounds the images admitted but not yet
	// applied on one lane. Zero means the default, one complete lane
	// (bucket_count), unless OutstandingImageBoundSet is true, in which case
	// zero is rejected (the seed's Some(0)).
	MaxOutstandingImagesPerLane uint64
	// OutstandingImageBoundSet marks MaxOutstandingImagesPerLane as explicit.
	OutstandingImageBoundSet bool
	// MaxDirtyToAppliedAge retires a lane whose oldest admitted delta has not
	// been applied within this age (default 10ms).
	MaxDirtyToAppliedAge time.Duration
}

// DefaultPoolConfig returns the seed's defaults.
func DefaultPoolConfig() PoolConfig {
	return PoolConfig{
		WorkerCount:          ckf.DefaultIngestionWorkers,
		QueueCapacity:        ckf.DefaultIngestionQueue,
		ControlTimeout:       ckf.DefaultControlTimeout,
		MaxDirtyToAppliedAge: ckf.DefaultMaxDirtyToAppliedAge,
	}
}

// Validate checks the config in the seed's order.
func (c PoolConfig) Validate() error {
	switch {
	case c.WorkerCount <= 0:
		return &PoolBuildError{Kind: ErrInvalidWorkerCount}
	case c.QueueCapacity <= 0:
		return &PoolBuildError{Kind: ErrInvalidQueueCapacity}
	case c.ControlTimeout <= 0:
		return &PoolBuildError{Kind: ErrInvalidControlTimeout}
	case c.OutstandingImageBoundSet && c.MaxOutstandingImagesPerLane == 0:
		return &PoolBuildError{Kind: ErrInvalidOutstandingImageBound}
	case c.MaxDirtyToAppliedAge <= 0:
		return &PoolBuildError{Kind: ErrInvalidDirtyToAppliedAge}
	}
	return nil
}

// PoolBuildErrorKind enumerates GlobalCkfIngestionPoolBuildError. Each kind is
// itself an error.
type PoolBuildErrorKind uint8

const (
	ErrInvalidWorkerCount PoolBuildErrorKind = iota + 1
	ErrInvalidQueueCapacity
	ErrInvalidControlTimeout
	ErrInvalidOutstandingImageBound
	ErrInvalidDirtyToAppliedAge
	// ErrClaimLane wraps the indexer's claim error (the seed's GlobalCkf variant).
	ErrClaimLane
)

func (k PoolBuildErrorKind) Error() string {
	switch k {
	case ErrInvalidWorkerCount:
		return "consumer: pool: worker count must be greater than zero"
	case ErrInvalidQueueCapacity:
		return "consumer: pool: queue capacity must be greater than zero"
	case ErrInvalidControlTimeout:
		return "consumer: pool: control timeout must be greater than zero"
	case ErrInvalidOutstandingImageBound:
		return "consumer: pool: outstanding-image bound must be greater than zero"
	case ErrInvalidDirtyToAppliedAge:
		return "consumer: pool: dirty-to-applied age bound must be greater than zero"
	case ErrClaimLane:
		return "consumer: pool: cannot claim lane ingestor"
	}
	return fmt.Sprintf("consumer: pool build error %d", uint8(k))
}

// PoolBuildError carries a PoolBuildErrorKind; for ErrClaimLane, Lane and the
// indexer's error in Err.
type PoolBuildError struct {
	Kind PoolBuildErrorKind
	Lane int
	Err  error
}

func (e *PoolBuildError) Error() string {
	if e.Kind == ErrClaimLane && e.Err != nil {
		return fmt.Sprintf("consumer: pool: claim lane %d: %v", e.Lane, e.Err)
	}
	return e.Kind.Error()
}

// Unwrap exposes the kind and any wrapped indexer error.
func (e *PoolBuildError) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// IngestionErrorKind enumerates GlobalCkfIngestionError. Each kind is itself
// an error so callers can branch with errors.Is.
type IngestionErrorKind uint8

const (
	// ErrLaneNotConfigured is the seed's UnconfiguredLane; an IngestionError
	// of this kind also matches the indexer's ErrUnconfiguredLane.
	ErrLaneNotConfigured IngestionErrorKind = iota + 1
	ErrLaneUnassigned
	ErrLaneRetired
	ErrAwaitingSnapshot
	ErrSaturated
	ErrOutstandingImageLimit
	ErrDirtyToAppliedAgeExceeded
	ErrControlTimeout
	ErrWorkerFailed
	// ErrAssignment wraps the *AssignmentError in IngestionError.Err.
	ErrAssignment
	ErrAdmissionEpochExhausted
	// ErrPoolClosed is a Go addition: every call after Close returns it.
	ErrPoolClosed
)

func (k IngestionErrorKind) Error() string {
	switch k {
	case ErrLaneNotConfigured:
		return "consumer: pool: lane is not configured"
	case ErrLaneUnassigned:
		return "consumer: pool: lane has no current assignment"
	case ErrLaneRetired:
		return "consumer: pool: lane is retired and requires a new lease and snapshot"
	case ErrAwaitingSnapshot:
		return "consumer: pool: lane is awaiting a snapshot"
	case ErrSaturated:
		return "consumer: pool: ingestion queue saturated"
	case ErrOutstandingImageLimit:
		return "consumer: pool: outstanding-image bound exceeded"
	case ErrDirtyToAppliedAgeExceeded:
		return "consumer: pool: dirty-to-applied age exceeded"
	case ErrControlTimeout:
		return "consumer: pool: control operation timed out"
	case ErrWorkerFailed:
		return "consumer: pool: ingestion worker failed"
	case ErrAssignment:
		return "consumer: pool: assignment failed"
	case ErrAdmissionEpochExhausted:
		return "consumer: pool: lane admission epoch exhausted"
	case ErrPoolClosed:
		return "consumer: pool: closed"
	}
	return fmt.Sprintf("consumer: pool: ingestion error %d", uint8(k))
}

// Disposition is failure_disposition (spec §9.5): the recovery disposition of
// errors that retired consumer state. Admission and assignment rejections
// return false: they made no consumer write, and stale or superseded traffic
// must not fence the current assignment.
func (k IngestionErrorKind) Disposition() (ckf.FailureDisposition, bool) {
	switch k {
	case ErrSaturated, ErrOutstandingImageLimit:
		return ckf.PointConsumerGapOrMalformedBeforeWrite.Disposition(), true
	case ErrDirtyToAppliedAgeExceeded, ErrControlTimeout, ErrWorkerFailed:
		return ckf.PointConsumerWorkerFailureMidApply.Disposition(), true
	}
	return ckf.FailureDisposition{}, false
}

// IngestionError is GlobalCkfIngestionError: a kind plus its fields. Lane is
// set for lane errors, Requested/Limit for ErrOutstandingImageLimit, Worker
// for ErrWorkerFailed and Err (an *AssignmentError) for ErrAssignment.
type IngestionError struct {
	Kind      IngestionErrorKind
	Lane      int
	Requested uint64
	Limit     uint64
	Worker    int
	Err       error
}

func (e *IngestionError) Error() string {
	switch e.Kind {
	case ErrLaneNotConfigured:
		return fmt.Sprintf("consumer: pool: lane %d is not configured", e.Lane)
	case ErrLaneUnassigned:
		return fmt.Sprintf("consumer: pool: lane %d has no current assignment", e.Lane)
	case ErrLaneRetired:
		return fmt.Sprintf("consumer: pool: lane %d is retired and requires a new lease and snapshot", e.Lane)
	case ErrAwaitingSnapshot:
		return fmt.Sprintf("consumer: pool: lane %d is awaiting a snapshot", e.Lane)
	case ErrSaturated:
		return fmt.Sprintf("consumer: pool: lane %d ingestion queue saturated, lease retired", e.Lane)
	case ErrOutstandingImageLimit:
		return fmt.Sprintf("consumer: pool: lane %d exceeded its outstanding-image bound (%d requested, %d allowed), lease retired",
			e.Lane, e.Requested, e.Limit)
	case ErrDirtyToAppliedAgeExceeded:
		return fmt.Sprintf("consumer: pool: lane %d exceeded its dirty-to-applied age, lease retired", e.Lane)
	case ErrControlTimeout:
		return fmt.Sprintf("consumer: pool: lane %d control operation timed out, lease retired", e.Lane)
	case ErrWorkerFailed:
		return fmt.Sprintf("consumer: pool: ingestion worker %d failed", e.Worker)
	case ErrAssignment:
		if e.Err != nil {
			return "consumer: pool: assignment failed: " + e.Err.Error()
		}
	case ErrAdmissionEpochExhausted:
		return fmt.Sprintf("consumer: pool: lane %d admission epoch exhausted", e.Lane)
	}
	return e.Kind.Error()
}

// Unwrap exposes the kind and, for ErrAssignment, the *AssignmentError, so
// errors.As(err, &assignErr) reaches it. ErrLaneNotConfigured also unwraps to
// the indexer's ErrUnconfiguredLane.
func (e *IngestionError) Unwrap() []error {
	switch {
	case e.Err != nil:
		return []error{e.Kind, e.Err}
	case e.Kind == ErrLaneNotConfigured:
		return []error{e.Kind, ErrUnconfiguredLane}
	}
	return []error{e.Kind}
}

// Disposition returns the kind's disposition (see IngestionErrorKind.Disposition).
func (e *IngestionError) Disposition() (ckf.FailureDisposition, bool) {
	return e.Kind.Disposition()
}

// FaultKind enumerates GlobalCkfIngestionFault.
type FaultKind uint8

const (
	FaultSaturated FaultKind = iota + 1
	FaultOutstandingImageLimit
	FaultDirtyToAppliedAgeExceeded
	FaultLaneDeactivated
	FaultWorkerFailed
)

func (k FaultKind) String() string {
	switch k {
	case FaultSaturated:
		return "saturated"
	case FaultOutstandingImageLimit:
		return "outstanding_image_limit"
	case FaultDirtyToAppliedAgeExceeded:
		return "dirty_to_applied_age_exceeded"
	case FaultLaneDeactivated:
		return "lane_deactivated"
	case FaultWorkerFailed:
		return "worker_failed"
	}
	return fmt.Sprintf("FaultKind(%d)", uint8(k))
}

// Fault is an asynchronous ingestion fault notification. Lane and Lease (when
// HasLease) are set for lane faults; Requested/Limit for
// FaultOutstandingImageLimit; LaneFault and Disposition for
// FaultLaneDeactivated; Worker for FaultWorkerFailed.
type Fault struct {
	Kind        FaultKind
	Lane        int
	Lease       ckf.LaneLease
	HasLease    bool
	LaneFault   LaneFault
	Disposition ckf.FailureDisposition
	Requested   uint64
	Limit       uint64
	Worker      int
}

// FailureDisposition classifies recovery from the consumer state whose commit
// is known or uncertain (spec §9.5).
func (f Fault) FailureDisposition() ckf.FailureDisposition {
	switch f.Kind {
	case FaultLaneDeactivated:
		return f.Disposition
	case FaultWorkerFailed, FaultDirtyToAppliedAgeExceeded:
		return ckf.PointConsumerWorkerFailureMidApply.Disposition()
	}
	return ckf.PointConsumerGapOrMalformedBeforeWrite.Disposition()
}

func (f Fault) String() string {
	switch f.Kind {
	case FaultLaneDeactivated:
		return fmt.Sprintf("lane %d: lane_deactivated(%s)", f.Lane, f.LaneFault)
	case FaultOutstandingImageLimit:
		return fmt.Sprintf("lane %d: outstanding_image_limit(requested=%d, limit=%d)", f.Lane, f.Requested, f.Limit)
	case FaultWorkerFailed:
		return fmt.Sprintf("worker %d failed", f.Worker)
	}
	return fmt.Sprintf("lane %d: %s", f.Lane, f.Kind)
}

// AdmissionState is a lane's admission state (spec §9.2).
type AdmissionState uint8

const (
	AdmissionUnassigned AdmissionState = iota
	AdmissionTransitioning
	AdmissionAwaitingSnapshot
	AdmissionActive
	AdmissionRetired
)

func (s AdmissionState) String() string {
	switch s {
	case AdmissionUnassigned:
		return "unassigned"
	case AdmissionTransitioning:
		return "transitioning"
	case AdmissionAwaitingSnapshot:
		return "awaiting_snapshot"
	case AdmissionActive:
		return "active"
	case AdmissionRetired:
		return "retired"
	}
	return fmt.Sprintf("AdmissionState(%d)", uint8(s))
}

// LaneStatus is a consistent copy of one lane's admission state, for metrics.
type LaneStatus struct {
	Worker            int
	State             AdmissionState
	Epoch             uint64
	Fenced            bool
	Lease             ckf.LaneLease
	HasLease          bool
	OutstandingImages uint64
	OutstandingDeltas int
}

// outstandingDelta is one admitted, not yet applied delta.
type outstandingDelta struct {
	id          uint64
	images      uint64
	submittedAt time.Time
}

// deltaRing is a FIFO of outstanding deltas that reuses its backing array.
type deltaRing struct {
	buf  []outstandingDelta
	head int
	n    int
}

func (r *deltaRing) push(d outstandingDelta) {
	if r.n == len(r.buf) {
		grown := make([]outstandingDelta, max(2*len(r.buf), 8))
		for i := range r.n {
			grown[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = grown, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = d
	r.n++
}

func (r *deltaRing) front() (outstandingDelta, bool) {
	if r.n == 0 {
		return outstandingDelta{}, false
	}
	return r.buf[r.head], true
}

func (r *deltaRing) at(i int) *outstandingDelta { return &r.buf[(r.head+i)%len(r.buf)] }

// remove drops the entry with id and returns its image count. FIFO
// completion pops the head and a failed enqueue pops the tail; other
// positions arise only on teardown, so that path may shift.
func (r *deltaRing) remove(id uint64) (uint64, bool) {
	switch {
	case r.n == 0:
		return 0, false
	case r.at(0).id == id:
		images := r.at(0).images
		r.head = (r.head + 1) % len(r.buf)
		r.n--
		return images, true
	case r.at(r.n-1).id == id:
		images := r.at(r.n - 1).images
		r.n--
		return images, true
	}
	for i := 1; i < r.n-1; i++ {
		if r.at(i).id != id {
			continue
		}
		images := r.at(i).images
		for j := i; j < r.n-1; j++ {
			*r.at(j) = *r.at(j + 1)
		}
		r.n--
		return images, true
	}
	return 0, false
}

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
	if oldest, ok := c.adm.outstanding.front(); ok && now.Sub(oldest.submittedAt) >= c.maxAge {
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
	c.adm.outstanding.push(outstandingDelta{id: id, images: images, submittedAt: now})
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
		out := p.installGuarded(c, ing, epoch, s)
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
// is at least MaxDirtyToAppliedAge old at now.
func (p *Pool) fenceExpiredLanes(now time.Time) {
	for _, c := range p.lanes {
		if !c.configured.Load() {
			continue
		}
		c.mu.Lock()
		oldest, ok := c.adm.outstanding.front()
		if c.adm.state != AdmissionActive || !ok || now.Sub(oldest.submittedAt) < c.maxAge {
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
