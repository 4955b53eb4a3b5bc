package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

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
	lastLane  uint64 // stream sequence of the lane's newest message (owned by the flight while one is out)
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
	// subjects caches the worker ids of the last input subjects parsed.
	subjects subjectCache
	// overLimit: the last message had stored events refused by
	// MaxTrackedBlocks (the tracked_blocks fault is set).
	overLimit bool

	// dynamo.kvrelay.v1 (kvrelay.go): the generation's key, its fanout
	// (nil while not live or when the service is off) and a reusable
	// image buffer.
	// The load plane (load.go): the window sequence of this epoch, the
	// encode buffer and the subject.
	loadSeq     uint64
	loadBuf     []byte
	loadSubject string

	kvKey kvrelay.ProducerKey
	fan   *server.Fanout

	// The lane writer (publish.go): the deltas cut but not yet sent, the
	// flight out (nil: none), reusable outbox and encode buffers, and the
	// events applied into the current publication window.
	outbox       []laneMsg
	spareOutbox  []laneMsg
	bufs         [][]byte
	flight       *laneFlight
	windowEvents int
}

// serve publishes under one lease epoch until the lease is lost, the
// stream becomes uncertain, or ctx ends: start the epoch, rebuild its
// exact state, go live with a barrier snapshot, then publish.
func (r *Relay) serve(parent context.Context, coord *lease.Coordinator, res *streams.Resources, lane int, l *lease.Lease) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	log := r.log.With().Uint64("epoch", l.Epoch()).Logger()
	snapReqs, err := coord.WatchSnapshotRequests(ctx, r.cfg.Domain, r.cfg.DC)
	if err != nil {
		return fmt.Errorf("relay: watch snapshot requests: %w", err)
	}

	e, from, err := r.startEpoch(ctx, res, lane, l)
	if err != nil {
		return err
	}
	in, err := r.openInput(ctx, res.Events, l.Epoch(), from.startSeq())
	if err != nil {
		return err
	}
	defer in.stop()
	if err := e.rebuild(res.Events, in, from, log); err != nil {
		return err
	}
	if err := e.goLive(res.Lanes, log); err != nil {
		return err
	}
	defer e.kvEnd()
	defer r.lastLoad.Store(nil) // no window of an ended epoch is served
	if err := e.kvBegin(); err != nil {
		return err
	}
	return e.publishLoop(parent, in, snapReqs)
}

// rebuildFrom says what an epoch's state covers before its replay: the
// restored checkpoint's input sequence, or nothing.
type rebuildFrom struct {
	restored bool
	seq      uint64 // input sequence the restored state covers (0: none)
}

// startSeq is the input sequence the replay starts from (0: the start of
// the stream).
func (b rebuildFrom) startSeq() uint64 {
	if b.restored {
		return b.seq + 1
	}
	return 0
}

// startEpoch enters the rebuilding state and sets up the epoch's run: the
// pool's checkpoint restored if there is a usable one (a fresh state
// otherwise), its identity and publisher. It reports input the replay
// needs but the stream no longer holds.
func (r *Relay) startEpoch(ctx context.Context, res *streams.Resources, lane int, l *lease.Lease) (*epochRun, rebuildFrom, error) {
	cfg := r.cfg.CKF
	cfg.PublishEveryNEvents = 1 << 62 // the relay cuts batches itself

	// Rebuild: restore the checkpoint if there is a usable one, then apply
	// every stored event of this pool after it (all of them without one)
	// before publishing.
	r.setState(StateRebuilding)
	stream, err := r.inputStreamInfo(ctx, res.Events)
	if err != nil {
		return nil, rebuildFrom{}, err
	}
	r.warnRetention(stream)
	var state *producer.State
	var from rebuildFrom
	unread := false
	if r.cfg.CheckpointInterval > 0 {
		state, from.seq, from.restored, unread = r.loadCheckpoint(ctx, res.Snapshots, cfg, stream)
	}
	if !from.restored {
		if state, err = producer.NewState(cfg); err != nil {
			return nil, rebuildFrom{}, err
		}
	}
	format := state.Format()
	e := &epochRun{
		r: r, ctx: ctx, lease: l, lane: lane, epoch: l.Epoch(), state: state, snaps: res.Snapshots, lanes: res.Lanes,
		identity:    ckf.ProducerIdentity{Pool: r.pool, ProducerIncarnation: l.Epoch(), LayoutGeneration: 1, Format: format},
		wlease:      wire.WireLease{Epoch: l.Epoch(), Instance: r.cfg.Instance},
		inputSeq:    from.seq,
		inputStream: stream, checkpointSeq: from.seq, keepCheckpoint: unread,
	}
	e.pub = producer.NewPublisher(e.identity, 0, e)
	r.update(func(s *Status) { s.InputSeq = from.seq })
	r.checkInputRetention(stream, max(from.startSeq(), 1))
	return e, from, nil
}

// rebuild applies the pool's stored input after what the state covers, up
// to the newest message the stream holds for it, before anything is
// published.
func (e *epochRun) rebuild(events jetstream.Stream, in *input, from rebuildFrom, log zerolog.Logger) error {
	r, ctx, l := e.r, e.ctx, e.lease
	target, err := streams.LastLaneSequence(ctx, events, in.filter)
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
			target = e.recheckRebuildTarget(ctx, events, in.filter, target)
		}
	}
	e.state.Flush() // nothing was published yet: the snapshot covers it
	log.Info().Uint64("input_sequence", e.inputSeq).Bool("from_checkpoint", from.restored).Uint64("checkpoint_sequence", from.seq).
		Int("messages_replayed", replayed).Dur("took_ms", time.Since(rebuildStart)).
		Int("unique_blocks", e.state.UniqueBlocks()).Msg("exact state rebuilt from the input stream")
	return nil
}

// goLive publishes the epoch's first barrier snapshot after the lane's
// current end and enters the active state.
func (e *epochRun) goLive(lanes jetstream.Stream, log zerolog.Logger) error {
	r := e.r
	var err error
	if e.lastLane, err = streams.LastLaneSequence(e.ctx, lanes, r.subj.Filter); err != nil {
		return err
	}
	if err := e.snapshot("epoch"); err != nil {
		return err
	}
	// The epoch first: a Status read between the two updates must never
	// show an active relay with its previous (or no) epoch.
	r.update(func(s *Status) { s.Epoch = e.epoch })
	r.m.epoch.Set(float64(e.epoch))
	r.setState(StateActive)
	log.Info().Uint64("sequence", e.pub.LastSequence()).Msg("publishing")
	return nil
}

// publishLoop applies live input and publishes it, with the periodic
// snapshots, checkpoints and heartbeats, until the epoch ends. parent is
// the relay's context: when it ends (a graceful stop) a last checkpoint
// is stored.
func (e *epochRun) publishLoop(parent context.Context, in *input, snapReqs <-chan struct{}) error {
	r, ctx, l := e.r, e.ctx, e.lease
	flush := time.NewTicker(r.cfg.PublishInterval)
	defer flush.Stop()
	snapTick := time.NewTicker(r.cfg.SnapshotInterval)
	defer snapTick.Stop()
	hb := time.NewTicker(r.cfg.HeartbeatInterval)
	defer hb.Stop()
	loadTick := time.NewTicker(r.cfg.loadInterval())
	defer loadTick.Stop()
	loadSubject, err := wire.PoolLoadSubject(r.cfg.Domain, r.cfg.DC)
	if err != nil {
		return err
	}
	e.loadSubject = loadSubject
	e.publishLoad() // the first window as the epoch goes live
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
	// The epoch's last flight is waited for before anything else ends
	// (the stop checkpoint included): no publish outlives the epoch.
	defer e.abandon()
	// Coalescing: a cut is published in the background (one flight at a
	// time, see laneFlight) while the actor goes on applying input. When
	// idle a cut goes out as soon as the input is momentarily drained;
	// under load the events applied while a flight is out merge into the
	// next cut, sent the moment the flight lands, so the lane carries
	// fewer, larger messages as the rate rises and an event waits at most
	// one lane round trip (or PublishInterval) before its cut. Absolute
	// bucket images make the merged message equivalent to the ones it
	// replaces. What waits is bounded by the table: the window holds each
	// dirty bucket once, whatever the rate.
	//
	// slow says the last flight outlasted PublishInterval: the lane is
	// across a WAN. There a delta costs a round trip whatever its size,
	// and cutting one each time the input is momentarily drained, or at
	// each tick, would spend round trips on a handful of events (on a
	// 150 ms link the relay applied 1,450 events/s of 10,000 offered). A
	// slow lane is cut once the interval has passed and the backlog that
	// queued during the flight is in, or at FlushEvents.
	slow, due := false, false
	// resting: the flush ticker is stopped while the window is empty, and
	// the first event applied into it starts it again, so an idle relay
	// does not wake every PublishInterval to cut nothing.
	resting := false
	cut := func() error {
		if e.flight != nil {
			due = true // at the landing
			return nil
		}
		due = false
		err := e.cut()
		// The interval starts when the cut went out: a tick that fell
		// during a long flight would otherwise cut the next delta after a
		// message or two.
		flush.Reset(r.cfg.PublishInterval)
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.Done():
			// A flight the successor's first write refused says so more
			// precisely (lane_taken) than the lapsed lease.
			if err := e.settle(); err != nil {
				return err
			}
			r.m.fences.WithLabelValues("lease_lost").Inc()
			return ErrLeaseLost
		case err := <-in.errs:
			return err
		case msg := <-in.msgs:
			e.windowEvents += e.applyMessage(msg)
			if resting && e.windowEvents > 0 {
				// The ticker rested on a tick at least an interval after the
				// last cut, so a slow lane's interval has passed: the window
				// is due as soon as the input is drained.
				flush.Reset(r.cfg.PublishInterval)
				resting, due = false, true
			}
			if e.flight != nil {
				continue // merged into the cut at the landing
			}
			// Cut as soon as the input is momentarily drained (lowest
			// latency when idle), and at the latest after FlushEvents events.
			drained := len(in.msgs) == 0
			if e.windowEvents >= r.cfg.FlushEvents || (drained && (due || (r.cfg.FlushWhenIdle && !slow))) {
				if err := cut(); err != nil {
					return err
				}
			}
		case err := <-e.landing():
			took := time.Since(e.flight.start)
			if err := e.landed(err); err != nil {
				return err
			}
			slow = took > r.cfg.PublishInterval
			if e.windowEvents > 0 && (due || e.windowEvents >= r.cfg.FlushEvents || (r.cfg.FlushWhenIdle && !slow)) {
				if err := cut(); err != nil {
					return err
				}
			}
		case <-flush.C:
			if e.flight == nil && e.windowEvents == 0 {
				flush.Stop()
				resting, due = true, false
				continue
			}
			if e.flight != nil {
				due = true
				continue
			}
			if slow && e.windowEvents < r.cfg.FlushEvents && len(in.msgs) > 0 {
				due = true // the input's backlog first
				continue
			}
			if err := cut(); err != nil {
				return err
			}
		case <-snapTick.C:
			if e.pub.LastSequence() != e.lastSnap {
				if err := e.snapshot("periodic"); err != nil {
					return err
				}
			}
		case <-cpTick:
			if err := e.settle(); err != nil {
				return err
			}
			e.checkpoint(ctx, "periodic")
		case <-snapReqs:
			if err := e.snapshot("request"); err != nil {
				return err
			}
		case <-hb.C:
			if err := e.heartbeat(); err != nil {
				return err
			}
			r.checkRefusals(r.now())
		case <-loadTick.C:
			e.publishLoad()
		case req := <-e.kvRequests():
			if err := e.kvSubscribe(req); err != nil {
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
