package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/backoff"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/internal/ctxwait"
	"github.com/ckfrelay/ckfrelay/internal/promx"
	"github.com/ckfrelay/ckfrelay/internal/retry"
	"github.com/ckfrelay/ckfrelay/internal/streams"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// State is where the relay is in its life cycle.
type State string

const (
	StateStarting   State = "starting"
	StateStandby    State = "standby"
	StateRebuilding State = "rebuilding"
	StateActive     State = "active"
	StateStopped    State = "stopped"
)

var allStates = []State{StateStarting, StateStandby, StateRebuilding, StateActive, StateStopped}

// Status is a point-in-time view for health endpoints and tests.
type Status struct {
	State        State  `json:"state"`
	Domain       string `json:"domain"`
	DC           string `json:"dc"`
	Instance     string `json:"instance"`
	Lane         int    `json:"lane"`
	Epoch        uint64 `json:"epoch"`
	Sequence     uint64 `json:"sequence"`
	InputSeq     uint64 `json:"input_sequence"`
	Events       uint64 `json:"events"`
	UniqueBlocks int    `json:"unique_blocks"`
	// InputGap is how many input stream sequences the last rebuild needed
	// but the stream no longer held (see ckf_relay_input_gap_messages_total).
	InputGap uint64 `json:"input_gap"`
	// Faults lists the standing faults ("kind: detail"), empty when none:
	// epoch_exhausted, tracked_blocks, setup (see ckf_relay_fault).
	Faults []string `json:"faults"`
}

// Standing fault kinds (Status.Faults, ckf_relay_fault{kind}).
const (
	FaultEpochExhausted = "epoch_exhausted"
	FaultTrackedBlocks  = "tracked_blocks"
	FaultSetup          = "setup"
)

// errZombie means JetStream refused a publish because another writer moved
// the lane: this relay no longer owns it.
var errZombie = errors.New("relay: lane advanced by another publisher")

// ErrLeaseLost is returned by publishing once the producer lease is gone.
var ErrLeaseLost = errors.New("relay: producer lease lost")

// Relay publishes one DC pool. Run owns all mutable state on one goroutine
// (the actor); Status and the metrics are the only concurrent readers.
type Relay struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	log zerolog.Logger
	// baseLog is log without the lane, which setup adds once registered.
	baseLog zerolog.Logger
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	m       *relayMetrics

	pool ckf.PoolID
	subj wire.LaneSubjects

	mu     sync.Mutex
	status Status
	faults map[string]string // kind → detail; guarded by mu

	// testHooks
	beforePublish        func(kind wire.MessageKind) error
	beforeCheckpointLoad func() error
	rebuildTarget        func(target uint64)
}

// New validates cfg and prepares a relay; Run starts it.
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dom, err := ckf.DomainFromName(cfg.Domain)
	if err != nil {
		return nil, fmt.Errorf("%w: domain: %w", ErrConfig, err)
	}
	subj, err := wire.NewLaneSubjects(cfg.Domain, cfg.DC)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	m, err := newRelayMetrics(cfg.Metrics, cfg.DC)
	if err != nil {
		return nil, fmt.Errorf("%w: metrics: %w", ErrConfig, err)
	}
	r := &Relay{
		cfg:    cfg,
		nc:     nc,
		js:     js,
		log:    cfg.Logger.With().Str("domain", cfg.Domain).Str("dc", cfg.DC).Str("instance", cfg.Instance).Logger(),
		tracer: cfg.tracer(),
		prop:   propagation.TraceContext{},
		m:      m,
		pool:   ckf.PoolID{Domain: dom, Dc: ckf.DcIDFromName(cfg.DC)},
		subj:   subj,
		status: Status{State: StateStarting, Domain: cfg.Domain, DC: cfg.DC, Instance: cfg.Instance, Lane: -1},
	}
	r.baseLog = r.log
	r.setState(StateStarting)
	return r, nil
}

// Status returns the current status.
func (r *Relay) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.status
	st.Faults = make([]string, 0, len(r.faults))
	for k, d := range r.faults {
		st.Faults = append(st.Faults, k+": "+d)
	}
	slices.Sort(st.Faults)
	return st
}

// setFault records a standing fault; it logs only when the fault starts.
func (r *Relay) setFault(kind, detail string) {
	r.mu.Lock()
	_, had := r.faults[kind]
	if r.faults == nil {
		r.faults = make(map[string]string)
	}
	r.faults[kind] = detail
	r.mu.Unlock()
	r.m.fault.WithLabelValues(kind).Set(1)
	if !had {
		r.log.Error().Str("fault", kind).Str("detail", detail).Msg("relay fault")
	}
}

// clearFault ends a standing fault.
func (r *Relay) clearFault(kind string) {
	r.mu.Lock()
	_, had := r.faults[kind]
	delete(r.faults, kind)
	r.mu.Unlock()
	if had {
		r.m.fault.WithLabelValues(kind).Set(0)
		r.log.Info().Str("fault", kind).Msg("relay fault cleared")
	}
}

func (r *Relay) update(fn func(*Status)) {
	r.mu.Lock()
	fn(&r.status)
	r.mu.Unlock()
}

func (r *Relay) setState(s State) {
	r.update(func(st *Status) { st.State = s })
	for _, x := range allStates {
		v := 0.0
		if x == s {
			v = 1
		}
		r.m.state.WithLabelValues(string(x)).Set(v)
	}
}

// Run registers the pool's lane, then loops: acquire the producer lease
// (standby while another relay holds it), rebuild the exact state (restore
// the pool's checkpoint if usable, then replay the input stream after it),
// publish a barrier snapshot under the new epoch and serve
// until the lease is lost or ctx ends. It returns nil when ctx ends.
//
// After an epoch ends in failure, the next attempt first sets everything
// up again (streams, object store, lease bucket, lane registration), so a
// deleted resource is recreated, and it waits a backoff that doubles while
// failures repeat (RestartBackoffMin..Max): a resource that stays broken
// costs one epoch per backoff period, never a hot loop.
func (r *Relay) Run(ctx context.Context) error {
	defer r.setState(StateStopped)
	var (
		res   *streams.Resources
		coord *lease.Coordinator
		lane  int
	)
	lo, hi := r.cfg.restartBackoff()
	bo := backoff.New(lo, hi)
	first := true
	for ctx.Err() == nil {
		if res == nil {
			var err error
			res, coord, lane, err = r.setup(ctx)
			if err != nil {
				if first && ctx.Err() == nil && isPermanentSetup(err) {
					return err
				}
				if ctx.Err() != nil || !ctxwait.Sleep(ctx, bo.Next()) {
					break
				}
				continue
			}
		}
		first = false
		r.setState(StateStandby)
		l, err := coord.Acquire(ctx, r.cfg.Domain, r.cfg.DC, r.cfg.Instance, r.cfg.LeaseTTL)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			wait := r.cfg.LeaseTTL / 3
			var le *lease.Error
			switch {
			case errors.As(err, &le) && errors.Is(err, lease.ErrLeaseHeld):
				r.clearFault(FaultEpochExhausted)
				r.log.Info().Str("holder_instance", le.Holder).Uint64("holder_epoch", le.Epoch).Msg("standby: lease held by another relay")
			case errors.Is(err, lease.ErrEpochExhausted):
				// Never wrap: stand by and say so until an operator repairs
				// the epoch key.
				r.setFault(FaultEpochExhausted, err.Error())
				wait = bo.Next()
			default:
				r.log.Warn().Err(err).Msg("lease acquire failed")
				res = nil // the lease bucket may be gone: set up again
				wait = bo.Next()
			}
			if !ctxwait.Sleep(ctx, wait) {
				break
			}
			continue
		}
		r.clearFault(FaultEpochExhausted)
		began := time.Now()
		err = r.serve(ctx, coord, res, lane, l)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = l.Release(rctx)
		cancel()
		r.m.epoch.Set(0)
		if ctx.Err() != nil {
			break
		}
		// No longer publishing: say so while set-up and the lease are
		// retried (e.g. for the whole of a WAN cut), not "active".
		r.setState(StateStandby)
		if time.Since(began) > 2*hi {
			bo.Reset() // it served a good while: this failure starts a new series
		}
		wait := bo.Next()
		r.log.Warn().Err(err).Uint64("epoch", l.Epoch()).Dur("retry_in_ms", wait).Msg("stopped publishing under this epoch")
		res = nil
		if !ctxwait.Sleep(ctx, wait) {
			break
		}
	}
	return nil
}

// setup ensures the JetStream resources (the input stream on InputJS when
// set) and the lease bucket, creating what is missing, and registers the
// pool's lane. It retries with backoff while NATS or the JetStream holding
// them is unreachable (a hub started after its DCs answers "no
// responders" until it is up); every failed step is counted and reported
// as the setup fault. A lane map that cannot take this pool is permanent.
func (r *Relay) setup(ctx context.Context) (res *streams.Resources, coord *lease.Coordinator, lane int, err error) {
	pol := r.cfg.Setup
	user := pol.OnRetry
	pol.OnRetry = func(attempt int, err error, wait time.Duration) {
		r.m.setupRetries.Inc()
		r.log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in_ms", wait).Msg("start-up step failed; retrying")
		if user != nil {
			user(attempt, err, wait)
		}
	}
	fail := func(step string, err error) error {
		if ctx.Err() == nil {
			r.m.setupFailures.WithLabelValues(step).Inc()
			r.setFault(FaultSetup, step+": "+err.Error())
		}
		if isPermanentSetup(err) {
			return retry.Permanent(err)
		}
		return err
	}
	err = pol.Do(ctx, func(ctx context.Context) error {
		var err error
		if r.cfg.InputJS == nil {
			res, err = streams.Ensure(ctx, r.js, r.cfg.Streams)
		} else {
			res, err = streams.EnsureLanes(ctx, r.js, r.cfg.Streams)
			if err == nil {
				res.Events, err = streams.EnsureEvents(ctx, r.cfg.InputJS, r.cfg.Streams)
			}
		}
		if err != nil {
			return fail("streams", err)
		}
		if coord, err = lease.New(ctx, r.js, lease.WithReplicas(max(r.cfg.Streams.Replicas, 1))); err != nil {
			return fail("lease_bucket", fmt.Errorf("relay: lease coordinator: %w", err))
		}
		if lane, err = coord.Register(ctx, r.cfg.Domain, r.cfg.DC, r.pool); err != nil {
			return fail("register", fmt.Errorf("relay: register lane: %w", err))
		}
		return nil
	})
	if err != nil {
		return nil, nil, -1, err
	}
	r.clearFault(FaultSetup)
	if st := r.Status(); st.Lane != lane {
		r.update(func(s *Status) { s.Lane = lane })
		r.log = r.baseLog.With().Int("lane", lane).Logger()
		r.log.Info().Msg("lane registered")
	}
	return res, coord, lane, nil
}

// isPermanentSetup reports a setup error that retrying cannot cure (the
// lane map has no room or names this DC for another pool): Run returns it
// on the first attempt, as before.
func isPermanentSetup(err error) bool {
	return errors.Is(err, lease.ErrNoFreeLane) || errors.Is(err, lease.ErrLaneConflict) ||
		errors.Is(err, lease.ErrInvalidName) || errors.Is(err, lease.ErrInvalidOption)
}

// epochRun is the state of publishing under one producer lease epoch.
type epochRun struct {
	r         *Relay
	ctx       context.Context
	lease     *lease.Lease
	lane      int
	epoch     uint64
	identity  ckf.ProducerIdentity
	wlease    wire.WireLease
	pub       *producer.Publisher
	state     *producer.State
	snaps     jetstream.ObjectStore
	lanes     jetstream.Stream
	lastLane  uint64 // stream sequence of the lane's newest message
	buf       []byte
	objects   []string
	lastDrain uint64
	lastSnap  uint64

	// batch tracing: the oldest pending event time and the span contexts
	// of the applies whose effects the next delta publishes (at most
	// maxSpanLinks; linksDropped counts the rest).
	oldestEvent  time.Time
	applySpans   []trace.SpanContext
	linksDropped int
	inputSeq     uint64 // stream sequence of the last input message seen

	inputStream   inputStream // the input stream incarnation inputSeq refers to
	checkpointSeq uint64      // input sequence of the newest stored (or restored) checkpoint
	// keepCheckpoint: the stored checkpoint exists but could not be read at
	// the start of this epoch, so this epoch never overwrites it.
	keepCheckpoint bool
	// overBudget: the last checkpoint attempt found the state over the
	// restore budget (logged at error level once per spell).
	overBudget bool

	// events is applyMessage's decode buffer, reused message after message:
	// no event (or slice inside one) is kept past the message it came in;
	// producer.State.ApplyEvent copies what it needs.
	events []routerevent.RouterEvent
	// overLimit: the last message had stored events refused by
	// MaxTrackedBlocks (the tracked_blocks fault is set).
	overLimit bool
}

// Enqueue is producer.Sink: it publishes one delta synchronously so the
// publisher's sequence only advances once JetStream stored it.
func (e *epochRun) Enqueue(d ckf.Delta) error {
	wd := wire.NewDelta(d, e.wlease)
	buf, err := wire.AppendDelta(e.buf[:0], &wd)
	if err != nil {
		return err
	}
	e.buf = buf
	msgID := wire.MsgID(wire.KindDelta, &e.identity, e.epoch, d.Sequence)
	ctx, span := e.startPublishSpan(len(buf), msgID,
		attribute.Int64("ckf.epoch", int64(e.epoch)), attribute.Int64("ckf.sequence", int64(d.Sequence)),
		attribute.Int("ckf.images", len(d.Images)))
	defer span.End()
	msg := nats.NewMsg(e.r.subj.Delta)
	msg.Data = buf
	e.r.prop.Inject(ctx, streams.HeaderCarrier(msg.Header))
	if !e.oldestEvent.IsZero() {
		msg.Header.Set(HeaderEventTime, strconv.FormatInt(e.oldestEvent.UnixNano(), 10))
	}
	start := time.Now()
	err = e.publish(ctx, wire.KindDelta, msg, msgID)
	promx.Observe(e.r.m.publishSeconds, time.Since(start).Seconds(), span.SpanContext())
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return err
	}
	e.r.m.deltas.Inc()
	e.r.m.images.Add(float64(len(d.Images)))
	return nil
}

// maxSpanLinks bounds the links of one publish span (the SDK's default
// link limit): a delta coalescing more input messages links the first ones
// and counts the rest in ckf.links_dropped.
const maxSpanLinks = 128

// startPublishSpan starts the producer span of one delta. Its parent is
// the first sampled apply span of the batch (the first one when none is
// sampled), so a traced input message's trace continues to the indexer;
// every coalesced input message's apply span is linked.
func (e *epochRun) startPublishSpan(bodySize int, msgID string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx := e.ctx
	var parent trace.SpanContext
	links := make([]trace.Link, 0, len(e.applySpans))
	for _, sc := range e.applySpans {
		if !parent.IsValid() || (!parent.IsSampled() && sc.IsSampled()) {
			parent = sc
		}
		links = append(links, trace.Link{SpanContext: sc})
	}
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	attrs = append(attrs,
		semconv.MessagingSystemKey.String("nats"),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("publish"),
		semconv.MessagingDestinationName(e.r.subj.Delta),
		semconv.MessagingMessageID(msgID),
		semconv.MessagingMessageBodySize(bodySize),
		attribute.String("ckf.dc", e.r.cfg.DC), attribute.Int("ckf.lane", e.lane),
		attribute.Int("ckf.coalesced_messages", len(e.applySpans)+e.linksDropped))
	if e.linksDropped > 0 {
		attrs = append(attrs, attribute.Int("ckf.links_dropped", e.linksDropped))
	}
	return e.r.tracer.Start(ctx, "ckf.relay.publish_delta", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
}

// publish stores msg on the lane, expecting the lane's last sequence so a
// relay that lost the lane cannot interleave.
func (e *epochRun) publish(ctx context.Context, kind wire.MessageKind, msg *nats.Msg, msgID string) error {
	// A lapsed or lost lease stops every lane message at once, before the
	// keepalive notices; the lane fence below catches a successor's writes.
	if !e.lease.Held() {
		return ErrLeaseLost
	}
	if hook := e.r.beforePublish; hook != nil {
		if err := hook(kind); err != nil {
			return err
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequenceForSubject(e.lastLane, e.r.subj.Filter)}
		if msgID != "" {
			opts = append(opts, jetstream.WithMsgID(msgID))
		}
		ack, err := e.r.js.PublishMsg(pctx, msg, opts...)
		if err == nil {
			if !ack.Duplicate && ack.Sequence > e.lastLane {
				e.lastLane = ack.Sequence
			}
			return nil
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
			return fmt.Errorf("relay: publish %s: %w", kind, err)
		}
		// Someone else wrote on the lane. A successor must have taken the
		// lease first, so the stored lease tells them apart: moved, this
		// relay is a zombie and stops; still ours, it was a stray writer
		// (junk on the lane subjects, which anyone allowed to publish there
		// can send) and the publish is retried after it, with the same
		// Msg-Id. The refused publish stored nothing.
		if verr := e.lease.Verify(pctx); verr != nil {
			return fmt.Errorf("%w: %w", errZombie, errors.Join(err, verr))
		}
		last, lerr := streams.LastLaneSequence(pctx, e.lanes, e.r.subj.Filter)
		if lerr != nil {
			return fmt.Errorf("relay: publish %s: %w", kind, lerr)
		}
		e.r.m.laneForeignWrites.Inc()
		e.r.log.Warn().Str("kind", kind.String()).Uint64("expected", e.lastLane).Uint64("found", last).
			Msg("another writer moved the lane while this relay holds the lease; retrying the publish")
		e.lastLane = last
	}
}

// serve publishes under one lease epoch until the lease is lost, the
// stream becomes uncertain, or ctx ends.
func (r *Relay) serve(parent context.Context, coord *lease.Coordinator, res *streams.Resources, lane int, l *lease.Lease) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	log := r.log.With().Uint64("epoch", l.Epoch()).Logger()
	go func() {
		if err := l.Keepalive(ctx, r.cfg.LeaseTTL/3); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("lease keepalive ended")
		}
	}()
	snapReqs, err := coord.WatchSnapshotRequests(ctx, r.cfg.Domain, r.cfg.DC)
	if err != nil {
		return fmt.Errorf("relay: watch snapshot requests: %w", err)
	}

	cfg := r.cfg.CKF
	cfg.PublishEveryNEvents = 1 << 62 // the relay cuts batches itself

	// Rebuild: restore the checkpoint if there is a usable one, then apply
	// every stored event of this pool after it (all of them without one)
	// before publishing.
	r.setState(StateRebuilding)
	stream, err := r.inputStreamInfo(ctx, res.Events)
	if err != nil {
		return err
	}
	r.warnRetention(stream)
	var state *producer.State
	var restoredSeq uint64
	restored, unread := false, false
	if r.cfg.CheckpointInterval > 0 {
		state, restoredSeq, restored, unread = r.loadCheckpoint(ctx, res.Snapshots, cfg, stream)
	}
	if !restored {
		if state, err = producer.NewState(cfg); err != nil {
			return err
		}
	}
	format := state.Format()
	e := &epochRun{
		r: r, ctx: ctx, lease: l, lane: lane, epoch: l.Epoch(), state: state, snaps: res.Snapshots, lanes: res.Lanes,
		identity:    ckf.ProducerIdentity{Pool: r.pool, ProducerIncarnation: l.Epoch(), LayoutGeneration: 1, Format: format},
		wlease:      wire.WireLease{Epoch: l.Epoch(), Instance: r.cfg.Instance},
		inputSeq:    restoredSeq,
		inputStream: stream, checkpointSeq: restoredSeq, keepCheckpoint: unread,
	}
	e.pub = producer.NewPublisher(e.identity, 0, e)
	r.update(func(s *Status) { s.InputSeq = restoredSeq })

	startSeq := uint64(0)
	if restored {
		startSeq = restoredSeq + 1
	}
	r.checkInputRetention(stream, max(startSeq, 1))
	in, err := r.openInput(ctx, res.Events, l.Epoch(), startSeq)
	if err != nil {
		return err
	}
	defer in.stop()
	target, err := streams.LastLaneSequence(ctx, res.Events, in.filter)
	if err != nil {
		return err
	}
	if hook := r.rebuildTarget; hook != nil {
		hook(target)
	}
	rebuildStart := time.Now()
	replayed := 0
	// The message at target may leave the stream before it is delivered
	// (retention drops the oldest messages, a purge drops anything): the
	// target is re-read now and then so the rebuild ends at what the stream
	// still holds instead of waiting, under the lease, for a message that
	// will never come.
	tailCheck := time.NewTicker(rebuildTailCheck)
	defer tailCheck.Stop()
	for e.inputSeq < target {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.Done():
			return ErrLeaseLost
		case err := <-in.errs:
			return err
		case msg := <-in.msgs:
			e.applyMessage(msg)
			replayed++
		case <-tailCheck.C:
			target = e.recheckRebuildTarget(ctx, res.Events, in.filter, target)
		}
	}
	e.state.Flush() // nothing was published yet: the snapshot covers it
	log.Info().Uint64("input_sequence", e.inputSeq).Bool("from_checkpoint", restored).Uint64("checkpoint_sequence", restoredSeq).
		Int("messages_replayed", replayed).Dur("took_ms", time.Since(rebuildStart)).
		Int("unique_blocks", e.state.UniqueBlocks()).Msg("exact state rebuilt from the input stream")

	if e.lastLane, err = streams.LastLaneSequence(ctx, res.Lanes, r.subj.Filter); err != nil {
		return err
	}
	if err := e.snapshot("epoch"); err != nil {
		return err
	}
	r.setState(StateActive)
	r.m.epoch.Set(float64(e.epoch))
	r.update(func(s *Status) { s.Epoch = e.epoch })
	log.Info().Uint64("sequence", e.pub.LastSequence()).Msg("publishing")

	flush := time.NewTicker(r.cfg.PublishInterval)
	defer flush.Stop()
	snapTick := time.NewTicker(r.cfg.SnapshotInterval)
	defer snapTick.Stop()
	hb := time.NewTicker(r.cfg.HeartbeatInterval)
	defer hb.Stop()
	var cpTick <-chan time.Time
	if r.cfg.CheckpointInterval > 0 {
		t := time.NewTicker(r.cfg.CheckpointInterval)
		defer t.Stop()
		cpTick = t.C
		defer func() {
			// Graceful stop (whichever case noticed it first: the lease
			// and the input end with the context too): a last checkpoint,
			// best effort, so the next start replays little.
			if parent.Err() != nil {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 30*time.Second)
				e.checkpoint(sctx, "stop")
				cancel()
			}
		}()
	}
	pending := 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.Done():
			r.m.fences.WithLabelValues("lease_lost").Inc()
			return ErrLeaseLost
		case err := <-in.errs:
			return err
		case msg := <-in.msgs:
			pending += e.applyMessage(msg)
			// Smart batching: cut as soon as the input is momentarily
			// drained (lowest latency when idle; under load messages queue
			// up while a publish is in flight, so batches grow by
			// themselves), and at the latest after FlushEvents events.
			if pending >= r.cfg.FlushEvents || (r.cfg.FlushWhenIdle && len(in.msgs) == 0) {
				pending = 0
				if err := e.flush(); err != nil {
					return err
				}
			}
		case <-flush.C:
			pending = 0
			if err := e.flush(); err != nil {
				return err
			}
		case <-snapTick.C:
			if e.pub.LastSequence() != e.lastSnap {
				if err := e.snapshot("periodic"); err != nil {
					return err
				}
			}
		case <-cpTick:
			e.checkpoint(ctx, "periodic")
		case <-snapReqs:
			if err := e.snapshot("request"); err != nil {
				return err
			}
		case <-hb.C:
			if err := e.heartbeat(); err != nil {
				return err
			}
		}
	}
}

// rebuildTailCheck is how often a rebuild re-reads the last input sequence
// it waits for (see recheckRebuildTarget).
const rebuildTailCheck = time.Second

// recheckRebuildTarget re-reads the newest input message of the pool and
// returns the sequence the rebuild must still reach: target while that
// message is still stored (or newer ones came, which end the rebuild when
// delivered), else the newest one left (0: none). A dropped tail is
// counted and logged; the events in it are missing from the exact state,
// like any input retention dropped. A failed read keeps target: the next
// check retries.
func (e *epochRun) recheckRebuildTarget(ctx context.Context, events jetstream.Stream, filter string, target uint64) uint64 {
	r := e.r
	cctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	last, err := streams.LastLaneSequence(cctx, events, filter)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn().Err(err).Uint64("target_sequence", target).Msg("rebuild: could not re-read the last input sequence; still waiting for it")
		}
		return target
	}
	if last >= target {
		return target
	}
	r.m.rebuildTailDropped.Inc()
	r.log.Error().Uint64("target_sequence", target).Uint64("newest_stored_sequence", last).Uint64("input_sequence", e.inputSeq).
		Msg("rebuild: the input it was waiting for is no longer stored (retention or a purge dropped it): the rebuild ends at what the stream holds; events of this DC in the dropped messages are missing from the exact state")
	return last
}

// checkInputRetention reports input a rebuild from `from` needs but the
// stream no longer holds. The relay goes on: the missing events cannot be
// recovered here, and a partial exact state (blocks stored by the dropped
// events are unknown until a worker re-sends or clears them) serves the
// router better than none. The operator sees it in the log, the status and
// ckf_relay_input_gap_messages_total; the cure is an input retention well
// above the checkpoint interval.
func (r *Relay) checkInputRetention(stream inputStream, from uint64) {
	gap := stream.dropped(from)
	r.update(func(s *Status) { s.InputGap = gap })
	if gap == 0 {
		return
	}
	r.m.inputGap.Add(float64(gap))
	r.log.Error().Uint64("from_sequence", from).Uint64("first_stored_sequence", stream.firstSeq).Uint64("missing", gap).
		Dur("input_max_age_ms", stream.maxAge).Dur("checkpoint_interval_ms", r.cfg.CheckpointInterval).
		Msg("the input stream no longer holds sequences this rebuild needs: events of this DC among them are missing from the exact state")
}

// warnRetention flags an input retention that can drop events before a
// checkpoint covers them.
func (r *Relay) warnRetention(stream inputStream) {
	if stream.maxAge == 0 {
		return
	}
	if r.cfg.CheckpointInterval == 0 || 2*r.cfg.CheckpointInterval > stream.maxAge {
		r.log.Warn().Dur("input_max_age_ms", stream.maxAge).Dur("checkpoint_interval_ms", r.cfg.CheckpointInterval).
			Msg("input retention is less than twice the checkpoint interval: a restart may find events already dropped")
	}
}

// applyMessage decodes one input message and applies its events; it
// returns the number of events applied. Bad input is counted and logged
// and never stops the relay.
func (e *epochRun) applyMessage(msg jetstream.Msg) int {
	r := e.r
	meta, err := msg.Metadata()
	if err == nil {
		e.inputSeq = meta.Sequence.Stream
		r.update(func(s *Status) { s.InputSeq = meta.Sequence.Stream })
		r.m.inputPending.Set(float64(meta.NumPending))
	}
	_, _, worker, err := wire.ParseWorkerEventsSubject(msg.Subject())
	if err != nil {
		r.m.badEvents.WithLabelValues("subject").Inc()
		r.log.Warn().Err(err).Str("subject", msg.Subject()).Msg("bad event subject")
		return 0
	}
	evs, err := routerevent.DecodeRouterEventsInto(e.events, msg.Data())
	e.events = evs
	if err != nil {
		r.m.badEvents.WithLabelValues("malformed").Inc()
		r.log.Warn().Err(err).Str("subject", msg.Subject()).Msg("malformed router event")
		return 0
	}
	ctx := r.prop.Extract(e.ctx, streams.HeaderCarrier(msg.Headers()))
	_, span := r.tracer.Start(ctx, "ckf.relay.apply_events", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("apply"),
			semconv.MessagingDestinationName(msg.Subject()),
			semconv.MessagingMessageBodySize(len(msg.Data())),
			attribute.String("ckf.dc", r.cfg.DC), attribute.Int64("ckf.worker_id", int64(worker)),
			attribute.Int("ckf.events", len(evs))))
	if meta != nil {
		span.SetAttributes(attribute.Int64("ckf.input_sequence", int64(meta.Sequence.Stream)))
	}
	applied, refused := 0, 0
	limit := r.cfg.maxTrackedBlocks()
	for i := range evs {
		ev := &evs[i]
		if ev.WorkerID != worker {
			r.m.badEvents.WithLabelValues("worker_mismatch").Inc()
			r.log.Warn().Uint64("subject_worker", worker).Uint64("event_worker", ev.WorkerID).Msg("event worker id differs from its subject; rejected")
			continue
		}
		if ev.Event.Data.Kind == routerevent.EventStored && uint64(e.state.UniqueBlocks()) >= limit {
			// Bounded state: refuse growth, keep removals and clears.
			refused++
			continue
		}
		out := e.state.ApplyEvent(ev)
		applied++
		if out.UnknownRemovals > 0 {
			r.m.unknownRemovals.Add(float64(out.UnknownRemovals))
		}
		if out.FirstError != nil {
			kind := "other"
			var ee ckf.EventError
			if errors.As(out.FirstError, &ee) {
				kind = ee.FailurePoint().String() + ":" + eventErrorName(ee)
			}
			r.m.eventErrors.WithLabelValues(kind).Inc()
			r.log.Debug().Err(out.FirstError).Uint64("worker_id", ev.WorkerID).Uint64("event_id", ev.Event.EventID).Msg("event error")
		}
	}
	span.End()
	e.trackLimit(refused, limit)
	if applied > 0 {
		r.m.addEvents(applied)
		if e.oldestEvent.IsZero() && meta != nil {
			e.oldestEvent = meta.Timestamp
		}
		if sc := span.SpanContext(); sc.IsValid() {
			if len(e.applySpans) < maxSpanLinks {
				e.applySpans = append(e.applySpans, sc)
			} else {
				e.linksDropped++
			}
		}
	}
	return applied
}

// trackLimit reports the tracked_blocks fault while stored events are being
// refused, and clears it once the pool is below the bound again.
func (e *epochRun) trackLimit(refused int, limit uint64) {
	r := e.r
	switch {
	case refused > 0:
		r.m.refusedEvents.Add(float64(refused))
		if !e.overLimit {
			e.overLimit = true
			r.setFault(FaultTrackedBlocks, fmt.Sprintf("the pool tracks %d blocks, --max-tracked-blocks is %d: stored events are refused (their blocks are missing from the index) until removals make room; raise --expected-blocks",
				e.state.UniqueBlocks(), limit))
		}
	case e.overLimit && uint64(e.state.UniqueBlocks()) < limit:
		e.overLimit = false
		r.clearFault(FaultTrackedBlocks)
	}
}

func eventErrorName(e ckf.EventError) string {
	switch e {
	case ckf.ErrParentBlockNotFound:
		return "parent_block_not_found"
	case ckf.ErrBlockNotFound:
		return "block_not_found"
	case ckf.ErrInvalidBlockSequence:
		return "invalid_block_sequence"
	case ckf.ErrCapacityExhausted:
		return "capacity_exhausted"
	case ckf.ErrEventAllocationFailed:
		return "allocation_failed"
	case ckf.ErrOwnershipDegreeOverflow:
		return "ownership_degree_overflow"
	case ckf.ErrIndexerInvariantViolation:
		return "indexer_invariant_violation"
	case ckf.ErrUnsupportedResidencyDomain:
		return "unsupported_residency_domain"
	}
	return "unknown"
}

// flush cuts the publication window and publishes it as one or more
// consecutive deltas.
func (e *epochRun) flush() error {
	batch := e.state.Flush()
	defer func() { e.oldestEvent, e.applySpans, e.linksDropped = time.Time{}, e.applySpans[:0], 0 }()
	return e.publishBatch(batch)
}

func (e *epochRun) publishBatch(batch producer.Batch) error {
	imgs := batch.Images
	for len(imgs) > 0 {
		n := min(len(imgs), e.r.cfg.MaxDeltaImages)
		if _, err := e.pub.Publish(producer.Batch{Images: imgs[:n]}); err != nil {
			return e.fence(err)
		}
		imgs = imgs[n:]
	}
	e.publishedStats()
	return nil
}

// publishedStats runs after every publication, so it only reads O(1)
// counters; occupancy (a lane scan) is refreshed by the heartbeat.
func (e *epochRun) publishedStats() {
	seq := e.pub.LastSequence()
	unique := e.state.UniqueBlocks()
	e.r.m.sequence.Set(float64(seq))
	e.r.m.uniqueBlocks.Set(float64(unique))
	e.r.update(func(s *Status) {
		s.Sequence = seq
		s.UniqueBlocks = unique
		s.Events = e.r.m.eventsApplied.Load()
	})
}

// fence classifies a publish failure. Every failure ends this epoch: the
// stream is uncertain, so the relay takes a fresh epoch and republishes a
// barrier snapshot (adapter.rs's recovery), or stands by when another
// publisher owns the lane.
func (e *epochRun) fence(err error) error {
	reason := "delivery_uncertain"
	switch {
	case errors.Is(err, errZombie):
		reason = "lane_taken"
	case errors.Is(err, ErrLeaseLost):
		reason = "lease_lost"
	case errors.Is(err, producer.FenceSequenceExhausted):
		reason = "sequence_exhausted"
	}
	e.r.m.fences.WithLabelValues(reason).Inc()
	return fmt.Errorf("relay: fenced (%s): %w", reason, err)
}

// snapshot publishes a barrier snapshot under the current epoch: the tail
// first (as a delta), then the body object, then the marker.
func (e *epochRun) snapshot(trigger string) error {
	ll := ckf.LaneLease{PhysicalLane: uint8(e.lane), AssignmentEpoch: e.epoch}
	snap, err := e.pub.SnapshotAfterBarrier(e.state, ll)
	if err != nil {
		return e.fence(err)
	}
	body, err := wire.EncodeSnapshotBody(nil, snap.Identity.Format, snap.Buckets)
	if err != nil {
		return err
	}
	name, err := wire.SnapshotObjectName(e.r.cfg.Domain, e.r.cfg.DC, e.epoch, snap.Sequence)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	if !e.bodyStored(octx, name, len(body)) {
		if _, err := e.snaps.Put(octx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(body)); err != nil {
			return fmt.Errorf("relay: put snapshot object: %w", err)
		}
	}
	marker := wire.NewSnapshotMarker(snap, e.wlease, wire.SnapshotBucket, name, body)
	mb, err := wire.AppendSnapshotMarker(nil, &marker)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(e.r.subj.Snapshot)
	msg.Data = mb
	msgID := wire.MsgID(wire.KindSnapshotMarker, &e.identity, e.epoch, snap.Sequence)
	if trigger == "request" {
		// A consumer asked: the marker must become the lane's newest .snap
		// message even at an unchanged sequence (a forged marker may sit on
		// top of the previous one), so it must not be deduplicated away.
		// The lane position makes the id unique per repeat and stable
		// across retries of this one publish.
		msgID += "-at-" + strconv.FormatUint(e.lastLane, 10)
	}
	if err := e.publish(e.ctx, wire.KindSnapshotMarker, msg, msgID); err != nil {
		return e.fence(err)
	}
	e.lastSnap = snap.Sequence
	e.r.m.snapshots.WithLabelValues(trigger).Inc()
	e.publishedStats()
	e.r.log.Info().Str("trigger", trigger).Uint64("epoch", e.epoch).Uint64("sequence", snap.Sequence).
		Int("bytes", len(body)).Str("object", name).Msg("barrier snapshot published")
	// Keep the newest two bodies: a consumer may be fetching the previous one.
	if len(e.objects) == 0 {
		e.pruneEarlierEpochs(octx, name)
	}
	if slices.Contains(e.objects, name) {
		// A repeated snapshot at an unchanged sequence reused the same
		// object; it is still the newest and must be kept.
		return nil
	}
	e.objects = append(e.objects, name)
	for len(e.objects) > 2 {
		_ = e.snaps.Delete(octx, e.objects[0])
		e.objects = e.objects[1:]
	}
	return nil
}

// bodyStored reports whether this epoch already stored the body of name
// (a repeated snapshot at an unchanged sequence encodes the same bytes).
// Writing it again would replace the object's chunks under a consumer that
// is reading the current ones, stalling that read until its deadline.
func (e *epochRun) bodyStored(ctx context.Context, name string, size int) bool {
	if !slices.Contains(e.objects, name) {
		return false
	}
	info, err := e.snaps.GetInfo(ctx, name)
	return err == nil && !info.Deleted && info.Size == uint64(size)
}

// pruneEarlierEpochs deletes this pool's snapshot bodies left by earlier
// epochs once the first marker of the new epoch is out: their markers are
// superseded, and a consumer still fetching one simply bootstraps again.
func (e *epochRun) pruneEarlierEpochs(ctx context.Context, keep string) {
	prefix, err := wire.SnapshotObjectName(e.r.cfg.Domain, e.r.cfg.DC, 0, 0)
	if err != nil {
		return
	}
	prefix = prefix[:strings.LastIndexByte(prefix, '/')+1]
	infos, err := e.snaps.List(ctx)
	if err != nil {
		return // jetstream.ErrNoObjectsFound or a transient error: nothing to do
	}
	for _, info := range infos {
		if strings.HasPrefix(info.Name, prefix) && info.Name != keep {
			_ = e.snaps.Delete(ctx, info.Name)
		}
	}
}

// heartbeat publishes a drain marker when the sequence moved since the
// last one (consumers verify they reached it), else a heartbeat.
func (e *epochRun) heartbeat() error {
	if err := e.flush(); err != nil {
		return err
	}
	e.r.m.occupiedSlots.Set(float64(e.state.Stats().OccupiedSlots))
	seq := e.pub.LastSequence()
	if seq != e.lastDrain {
		dm, ok := e.pub.ExactDrainMarker()
		if !ok {
			return nil
		}
		wm := wire.NewDrainMarker(e.identity, e.wlease, dm)
		b, err := wire.AppendDrainMarker(nil, &wm)
		if err != nil {
			return err
		}
		msg := nats.NewMsg(e.r.subj.Drain)
		msg.Data = b
		if err := e.publish(e.ctx, wire.KindDrainMarker, msg, wire.MsgID(wire.KindDrainMarker, &e.identity, e.epoch, seq)); err != nil {
			return e.fence(err)
		}
		e.lastDrain = seq
		e.r.m.drains.Inc()
		return nil
	}
	h := wire.Heartbeat{Identity: e.identity, Lease: e.wlease, Sequence: seq, RelayInstance: e.r.cfg.Instance, Time: time.Now()}
	b, err := wire.AppendHeartbeat(nil, &h)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(e.r.subj.Heartbeat)
	msg.Data = b
	if err := e.publish(e.ctx, wire.KindHeartbeat, msg, ""); err != nil {
		return e.fence(err)
	}
	e.r.m.heartbeats.Inc()
	return nil
}

// input is the relay's durable consumer on its pool's input events.
type input struct {
	filter string
	msgs   chan jetstream.Msg
	errs   chan error
	it     jetstream.MessagesContext
	done   chan struct{}
}

// openInput creates this epoch's durable consumer from input stream
// sequence startSeq (just after a restored checkpoint), or from the start
// of the stream when startSeq is 0. The name carries the epoch so a relay
// that lost its lease can never pull (and so steal) messages from its
// successor's consumer; older epochs' consumers are deleted and expire
// when idle anyway.
func (r *Relay) openInput(ctx context.Context, events jetstream.Stream, epoch, startSeq uint64) (*input, error) {
	filter, err := wire.WorkerEventsFilter(r.cfg.Domain, r.cfg.DC)
	if err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("relay_%s_%s_", r.cfg.Domain, r.cfg.DC)
	names := events.ConsumerNames(ctx)
	for n := range names.Name() {
		if len(n) > len(prefix) && n[:len(prefix)] == prefix && n != prefix+strconv.FormatUint(epoch, 10) {
			_ = events.DeleteConsumer(ctx, n)
		}
	}
	cc := jetstream.ConsumerConfig{
		Durable:           prefix + strconv.FormatUint(epoch, 10),
		Description:       "ckfrelay relay input (rebuild + live)",
		FilterSubject:     filter,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
	}
	if startSeq > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, startSeq
	}
	cons, err := events.CreateOrUpdateConsumer(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("relay: input consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return nil, fmt.Errorf("relay: input messages: %w", err)
	}
	in := &input{filter: filter, msgs: make(chan jetstream.Msg, 1024), errs: make(chan error, 1), it: it, done: make(chan struct{})}
	go func() {
		defer close(in.done)
		for {
			msg, err := it.Next()
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					return
				}
				select {
				case in.errs <- fmt.Errorf("relay: input: %w", err):
				default:
				}
				return
			}
			select {
			case in.msgs <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	return in, nil
}

func (in *input) stop() {
	in.it.Stop()
	<-in.done
}
