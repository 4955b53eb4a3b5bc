package follow

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/backoff"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/ctxwait"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// laneRunner follows one lane (docs/protocol.md, "Consumer (indexer) rules").
// Only its run goroutine touches the protocol fields; st is shared with
// Lanes() under mu.
type laneRunner struct {
	svc  *Service
	lane int
	dc   string
	pool ckf.PoolID
	subj wire.LaneSubjects
	log  zerolog.Logger
	m    *laneMetrics
	// faults receives the pool faults of this lane (dispatcher → runner).
	faults chan genFault
	// stop ends the run goroutine of a NATS lane (its lane retired) and
	// done closes when it returned; both set before the runner starts.
	stop context.CancelFunc
	done chan struct{}
	// kv is set for a dynamo.kvrelay.v1 lane (kvrelay.go): its follower's
	// goroutine is then the run goroutine. Set before the runner starts.
	kv *kvLane
	// owner is the installed (identity, epoch), for the load plane's fence
	// (load.go); nil until the first install.
	owner atomic.Pointer[laneOwner]

	// Run goroutine only.
	localEpoch uint64
	cur        current
	// granted is the highest value the pool's epoch counter was last seen
	// at (a cache): the ceiling of snapshot markers of a newer epoch.
	granted uint64
	// leased is the highest epoch the pool's lease record was seen to name
	// (a cache): the epoch a relay actually took the lease for. Other
	// traffic of a newer epoch is judged against it, not against the
	// counter, which a lost acquire race leaves one above every lease (the
	// loser's burnt epoch, lease.Acquire): nobody holds that epoch, so
	// traffic claiming it is not a takeover.
	leased uint64
	// awaiting is the newer epoch whose traffic (not a marker) the lane met
	// while its latest marker was the installed one (0: none): bootstrapping
	// again would install the same snapshot and meet the same traffic, so
	// the lane left the ready set, asked for a snapshot and waits for a
	// newer epoch's marker, skipping that traffic. Reset by each install.
	awaiting uint64
	// reached is the sequence the lane reached on its installed epoch: the
	// installed marker's, raised by each admitted delta and set by each
	// acknowledged drain. A heartbeat of the epoch must say the same.
	reached uint64
	// behind is set when a heartbeat of the installed epoch named a
	// sequence the lane never reached while its latest marker was the
	// installed one: deltas were lost from the stream, replaying it from
	// that marker would meet the same hole, so the lane left the ready set,
	// asked for a snapshot and waits for a marker of its epoch, skipping
	// the epoch's other traffic. Reset by each install.
	behind bool
	// askedAt is when the awaiting lane last asked for a snapshot.
	askedAt time.Time
	// supersededSince is when the lane began dropping superseded traffic
	// without seeing any of its installed epoch (zero: not dropping).
	supersededSince time.Time
	// distrusted is the epoch a superseded_traffic fault retired (0: none):
	// the lane does not bootstrap from a marker of it again, or the latest
	// marker would put it straight back, until another epoch is installed.
	distrusted uint64
	// resume is the stream sequence the lane's consumer starts at: just
	// after the installed marker, then just after each handled message.
	resume uint64
	// msgStored is when JetStream stored the message being handled (zero
	// when its metadata was unreadable); the gate records it as the lane's
	// last word from its relay.
	msgStored time.Time
	// gen is the pool generation of the last bootstrap attempt (nil when
	// it failed before reaching the pool); an installed lane is consumed
	// through it.
	gen *poolGen

	mu sync.Mutex // guards st
	st laneStatus
}

// current is the lane's installed assignment: the producer traffic
// (identity, wire epoch) translated into the local lease.
type current struct {
	identity  ckf.ProducerIdentity
	epoch     uint64
	lease     ckf.LaneLease
	streamSeq uint64 // stream sequence of the installed marker
}

type laneStatus struct {
	phase     string
	epoch     uint64
	installed uint64
	lag       uint64
	lastFault string
}

// genFault is a pool fault and the generation whose pool reported it, so a
// fault of a replaced pool never retires a lane installed in its successor.
type genFault struct {
	gen   *poolGen
	fault consumer.Fault
}

// markerAt is a decoded snapshot marker, its stream sequence and when
// JetStream stored it.
type markerAt struct {
	marker    wire.SnapshotMarker
	streamSeq uint64
	stored    time.Time
}

func newLaneRunner(s *Service, lane int, dc string, pool ckf.PoolID, subj wire.LaneSubjects, log zerolog.Logger, m *laneMetrics) *laneRunner {
	r := &laneRunner{svc: s, lane: lane, dc: dc, pool: pool, subj: subj, log: log, m: m,
		faults: make(chan genFault, 8), done: make(chan struct{})}
	r.setStatus(PhasePending, "")
	return r
}

// Status returns the lane's row for GET /v1/lanes: the runner phase, the
// producer's wire epoch, and the last installed snapshot sequence or
// admitted delta sequence (raised to the applied sequence by each drain).
func (r *laneRunner) Status() api.LaneStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	age, stale := r.svc.laneAge(r.lane, r.svc.now())
	st := api.LaneStatus{
		AgeMs:             age,
		Stale:             stale,
		Lane:              r.lane,
		DC:                r.dc,
		Pool:              r.pool.String(),
		State:             r.st.phase,
		Epoch:             r.st.epoch,
		InstalledSequence: r.st.installed,
		StreamLag:         r.st.lag,
		LastFault:         r.st.lastFault,
	}
	r.sourceStatus(&st)
	return st
}

// setStatus sets the phase and, when fault is non-empty, the last fault.
func (r *laneRunner) setStatus(phase, fault string) {
	r.mu.Lock()
	r.st.phase = phase
	if fault != "" {
		r.st.lastFault = fault
	}
	r.mu.Unlock()
	r.m.setPhase(phase)
	r.m.ready.Set(b2f(phase == PhaseActive))
}

// heardAt records t as the last time the lane's relay was heard from.
func (r *laneRunner) heardAt(t time.Time) {
	if !t.IsZero() {
		r.svc.heard[r.lane].Store(t.UnixNano())
	}
}

// updateAge publishes the lane's age in /metrics.
func (r *laneRunner) updateAge() {
	age, _ := r.svc.laneAge(r.lane, r.svc.now())
	r.m.age.Set(float64(age) / 1e3)
}

func (r *laneRunner) setInstalled(epoch, seq uint64) {
	r.mu.Lock()
	r.st.epoch, r.st.installed = epoch, seq
	r.mu.Unlock()
	r.m.install.Set(float64(seq))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// deliverFault never blocks the dispatcher; a dropped fault is caught by
// the runner's admission-state poll.
func (r *laneRunner) deliverFault(g *poolGen, f consumer.Fault) {
	select {
	case r.faults <- genFault{gen: g, fault: f}:
	default:
	}
}

// outcome says why consume returned.
type outcome struct {
	// next, when set, is the marker to bootstrap from at once.
	next *markerAt
	// fault names a lane fault (metric kind); the lane backs off, asks for
	// a snapshot when requestSnapshot, and bootstraps from the latest marker.
	fault           string
	detail          string
	requestSnapshot bool
	// healthy: a drain was acknowledged, so the lane made progress.
	healthy bool
}

// run bootstraps and consumes until ctx ends.
func (r *laneRunner) run(ctx context.Context) {
	bo := backoff.New(r.svc.cfg.BootstrapBackoffMin, r.svc.cfg.BootstrapBackoffMax)
	var next *markerAt
	var lastInstalled uint64
	for ctx.Err() == nil {
		if !r.awaitRebuild(ctx) {
			return
		}
		r.setStatus(PhaseBootstrapping, "")
		err := r.bootstrap(ctx, next)
		next = nil
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.bootstrapFailed(ctx, err)
			if !r.pause(ctx, bo.Next()) {
				return
			}
			continue
		}
		if r.cur.streamSeq != lastInstalled {
			// A different marker: earlier failures are not evidence against it.
			bo.Reset()
			lastInstalled = r.cur.streamSeq
		}
		r.setStatus(PhaseActive, "")
		out := r.consume(ctx)
		if ctx.Err() != nil {
			return
		}
		if out.healthy {
			bo.Reset()
		}
		if out.next != nil {
			next = out.next
			continue
		}
		if out.fault == faultSuperseded && r.gen != nil {
			// Fail closed: the installed epoch is not what the producer
			// publishes, so its content may be anything (a forged empty
			// body blanks the lane); answer nothing for the lane until a
			// live epoch is installed.
			r.gen.pool.Indexer().RetireLaneReadiness(r.lane)
		}
		r.m.fault(out.fault)
		r.log.Warn().Str("fault", out.fault).Str("detail", out.detail).Uint64("epoch", r.cur.epoch).
			Msg("lane retired; bootstrapping again")
		r.setStatus(PhaseBackoff, out.fault+": "+out.detail)
		if out.requestSnapshot {
			r.requestSnapshot(ctx)
		}
		if !r.pause(ctx, bo.Next()) {
			return
		}
	}
}

// awaitRebuild waits while the current pool generation cannot serve the
// lane (poolGen.laneDown): bootstrapping into it would only fail. It
// reports whether ctx is still live.
func (r *laneRunner) awaitRebuild(ctx context.Context) bool {
	for {
		g := r.svc.gen.Load()
		if g == nil || !g.laneDown(r.lane) {
			return true
		}
		// The fault notification is best-effort: make sure the rebuild runs.
		r.svc.poolFailed(g)
		r.setStatus(PhaseBackoff, "")
		select {
		case <-ctx.Done():
			return false
		case <-g.replaced:
		}
	}
}

// pause waits d, or less when the generation of the last bootstrap attempt
// is replaced meanwhile: a rebuilt pool is worth bootstrapping into at
// once. It wakes early at most once per replacement (the next bootstrap
// moves r.gen on), so a rebuild cannot make a lane spin. It reports
// whether ctx is still live.
func (r *laneRunner) pause(ctx context.Context, d time.Duration) bool {
	g := r.gen
	if g == nil {
		return ctxwait.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-g.replaced:
		r.gen = nil
	}
	return true
}

// bootstrapFailed counts, logs and records a failed bootstrap and asks the
// producer for a fresh snapshot when one could help.
func (r *laneRunner) bootstrapFailed(ctx context.Context, err error) {
	kind := "bootstrap"
	var ie *Error
	if errors.As(err, &ie) {
		kind = ie.Kind.String()
	}
	if errors.Is(err, ErrNoSnapshot) {
		// A lane registered before its relay's first marker: waiting, not
		// a fault (no fault count, no last fault), so a fresh start stays
		// out of fault alerts.
		r.m.bootstrap("waiting")
		r.log.Info().Err(err).Msg("lane waiting for its first snapshot marker")
		r.setStatus(PhaseBackoff, "")
	} else {
		r.m.bootstrap("failed")
		r.m.fault(kind)
		r.log.Warn().Err(err).Str("fault", kind).Msg("lane bootstrap failed")
		r.setStatus(PhaseBackoff, err.Error())
	}
	switch {
	case errors.Is(err, consumer.ErrWorkerFailed):
		// The pool must be rebuilt; the snapshot on the lane is fine.
		if r.gen != nil {
			r.svc.poolFailed(r.gen)
		}
	case errors.Is(err, ErrWrongFormat), errors.Is(err, ErrConsumer), errors.Is(err, consumer.ErrPoolClosed):
		// A new snapshot of the same producer cannot help.
	default:
		r.requestSnapshot(ctx)
	}
}

func (r *laneRunner) requestSnapshot(ctx context.Context) {
	r.m.snapshotRequested()
	if err := r.svc.coord.RequestSnapshot(ctx, r.svc.cfg.Domain, r.dc, r.svc.requester); err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Msg("snapshot request failed")
	}
}

// consume follows the lane from just after the installed marker until the
// lane must bootstrap again or ctx ends.
func (r *laneRunner) consume(ctx context.Context) outcome {
	r.resume = r.cur.streamSeq + 1
	lc, err := r.openConsumer(ctx)
	if err != nil {
		return outcome{fault: ErrConsumer.String(), detail: err.Error()}
	}
	defer func() { lc.stop() }()

	g := r.gen
	streamGen := r.svc.laneStreamGen.Load()
	poll := time.NewTicker(r.svc.cfg.StatePollInterval)
	defer poll.Stop()
	var healthy bool
	// The consumer's silence watchdog (see restartSilent): when the lane's
	// consumer last delivered a message (or was opened), and how long it
	// may stay silent before it is replaced.
	delivered, silence := r.svc.now(), r.svc.cfg.LaneStaleAfter
	for {
		select {
		case <-ctx.Done():
			return outcome{}
		case m := <-lc.msgs:
			delivered, silence = r.svc.now(), r.svc.cfg.LaneStaleAfter
			out, done := r.handle(ctx, m)
			healthy = healthy || out.healthy
			if done {
				out.healthy = healthy
				return out
			}
		case gf := <-r.faults:
			if out, ok := r.faultOutcome(g, gf); ok {
				out.healthy = healthy
				return out
			}
		case <-g.replaced:
			// The dispatcher hands the failed worker's fault to its lanes
			// before it asks for the rebuild: when both are ready, the
			// fault says why, the rebuild only what followed.
			out := r.pendingFault(g)
			out.healthy = healthy
			return out
		case <-poll.C:
			r.updateAge()
			if r.svc.laneStreamGen.Load() != streamGen {
				return outcome{fault: faultStreamReplaced, detail: "the lane stream was deleted or recreated", requestSnapshot: true, healthy: healthy}
			}
			if g.laneDown(r.lane) {
				r.svc.poolFailed(g)
				return outcome{fault: consumer.FaultWorkerFailed.String(), detail: "the lane's ingestion worker failed", healthy: healthy}
			}
			if st, ok := g.pool.LaneState(r.lane); ok && st.State != consumer.AdmissionActive {
				if g.failed.Load() {
					// Retired by the rebuild's Close: nothing to ask the producer.
					return outcome{fault: faultPoolRebuilt, detail: "the ingestion pool is being rebuilt", healthy: healthy}
				}
				return outcome{fault: "retired", detail: "admission state " + st.State.String(), requestSnapshot: true, healthy: healthy}
			}
			if now := r.svc.now(); now.Sub(delivered) >= silence {
				var opened bool
				lc, opened = r.restartSilent(ctx, lc, now.Sub(delivered))
				delivered = r.svc.now()
				if opened {
					// Still silent next time: the relay itself is quiet.
					silence = min(2*silence, maxConsumerSilence)
				}
			}
		}
	}
}

// maxConsumerSilence caps the silence a lane consumer is allowed before it
// is replaced, as it doubles while a lane stays silent (a stopped relay).
const maxConsumerSilence = time.Minute

// consumerOpenTimeout bounds the creation of a lane consumer. A creation
// assigned to a server that died before the cluster noticed never gets an
// answer.
const consumerOpenTimeout = 5 * time.Second

// laneConsumer is one ordered consumer of the lane and the channel its
// messages reach the run goroutine on.
type laneConsumer struct {
	cc     jetstream.ConsumeContext
	cancel context.CancelFunc
	// msgs is nil for a consumer that could not be opened: the lane then
	// receives nothing until the watchdog opens another.
	msgs chan jetstream.Msg
}

func (c *laneConsumer) stop() {
	// Unblock the callback before stopping, so the subscription's delivery
	// goroutine never hangs on msgs.
	c.cancel()
	if c.cc != nil {
		c.cc.Stop()
	}
}

// openConsumer reads the lane from stream sequence r.resume on, with a new
// ordered consumer: one of its own name, placed afresh by the cluster.
func (r *laneRunner) openConsumer(ctx context.Context) (*laneConsumer, error) {
	octx, ocancel := context.WithTimeout(ctx, consumerOpenTimeout)
	defer ocancel()
	cons, err := r.svc.js.OrderedConsumer(octx, streams.LaneStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.subj.Filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    r.resume,
	})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	msgs := make(chan jetstream.Msg, 64)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-cctx.Done():
		}
	})
	if err != nil {
		cancel()
		return nil, err
	}
	return &laneConsumer{cc: cc, cancel: cancel, msgs: msgs}, nil
}

// restartSilent replaces the lane's consumer after it delivered nothing for
// silent. A relay publishes on its lane at least every heartbeat interval,
// far below LaneStaleAfter, so such silence means the relay stopped or the
// consumer did. The library's ordered consumer recovers from a lost server
// by recreating itself under the same name, and when that name was placed
// on a server that died before the cluster noticed, every attempt goes to
// the dead server: the lane would stay ready, frozen at its last message,
// for as long as the server stays down. A new consumer has a new name and
// a new placement; it resumes after the last message the lane handled, so
// nothing is skipped (messages queued but not handled are read again).
// Opening it may fail (a cluster still electing its leaders); opened is
// false then, and the same bound later the lane tries again.
func (r *laneRunner) restartSilent(ctx context.Context, old *laneConsumer, silent time.Duration) (lc *laneConsumer, opened bool) {
	old.stop()
	r.m.consumerRestarted()
	lc, err := r.openConsumer(ctx)
	if err != nil {
		r.log.Warn().Err(err).Dur("silent_ms", silent).Uint64("resume_stream_seq", r.resume).
			Msg("lane consumer silent; opening a new one failed, trying again later")
		return &laneConsumer{cancel: func() {}}, false
	}
	r.log.Warn().Dur("silent_ms", silent).Uint64("resume_stream_seq", r.resume).
		Msg("lane consumer silent; replaced it with a new one from the message after the last handled")
	return lc, true
}

// faultOutcome turns a pool fault into the lane's outcome; ok is false
// for a fault of an earlier pool or assignment.
func (r *laneRunner) faultOutcome(g *poolGen, gf genFault) (outcome, bool) {
	f := gf.fault
	if gf.gen != g || f.HasLease && f.Lease != r.cur.lease {
		return outcome{}, false
	}
	if f.Kind == consumer.FaultWorkerFailed {
		// The stream still holds the marker and every delta after it: the
		// rebuilt pool needs no fresh snapshot.
		return outcome{fault: faultKind(f), detail: f.String()}, true
	}
	return outcome{fault: faultKind(f), detail: f.String(), requestSnapshot: true}, true
}

// pendingFault is the outcome of a lane whose pool g was replaced: the
// first fault of g still queued for the lane, or pool_rebuilt.
func (r *laneRunner) pendingFault(g *poolGen) outcome {
	for {
		select {
		case gf := <-r.faults:
			if out, ok := r.faultOutcome(g, gf); ok {
				return out
			}
		default:
			return outcome{fault: faultPoolRebuilt, detail: "the ingestion pool was rebuilt"}
		}
	}
}

// faultStreamReplaced is the fault kind of a lane whose stream was
// replaced under its consumer.
const faultStreamReplaced = "lane_stream_replaced"

// faultPoolRebuilt is the fault kind of a lane retired by a pool rebuild.
const faultPoolRebuilt = "pool_rebuilt"

// poolRefused turns a SubmitDelta or CompleteDrain error into the lane's
// outcome. A failed worker, a closed pool or a refusal while the pool is
// being rebuilt (its Close retires every lane) is the pool's fault, not the
// lane's: the stream can be replayed, so no snapshot is requested.
func (r *laneRunner) poolRefused(err error) outcome {
	out := outcome{fault: submitFaultKind(err), detail: err.Error(), requestSnapshot: true}
	switch {
	case errors.Is(err, consumer.ErrWorkerFailed):
		// One kind however the lane learnt of it (fault channel, state
		// poll or this refusal), so operators count worker failures per
		// lane in one series.
		out.fault = consumer.FaultWorkerFailed.String()
		r.svc.poolFailed(r.gen)
		out.requestSnapshot = false
	case errors.Is(err, consumer.ErrPoolClosed), r.gen.failed.Load():
		out.requestSnapshot = false
	}
	return out
}

// faultKind is the metric kind of a pool fault.
func faultKind(f consumer.Fault) string {
	if f.Kind == consumer.FaultLaneDeactivated {
		return f.LaneFault.Kind.String()
	}
	return f.Kind.String()
}
