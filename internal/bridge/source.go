package bridge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/zeebo/xxh3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/internal/engine"
	"github.com/ckfrelay/ckfrelay/internal/refusal"
	"github.com/ckfrelay/ckfrelay/pkg/ctxwait"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
)

// errPublish ends a session after a failed JetStream publish; the source
// then rewinds to its last acknowledged batch and replays from there.
var errPublish = errors.New("bridge: publish failed")

// EngineStatus is one engine's view in /v1/status.
type EngineStatus struct {
	WorkerID  uint64 `json:"worker_id"`
	Endpoint  string `json:"endpoint"`
	Replay    string `json:"replay_endpoint,omitempty"`
	Connected bool   `json:"connected"`
	// Epoch counts engine incarnations the bridge has seen (restarts).
	Epoch     uint64    `json:"epoch"`
	LastSeq   *uint64   `json:"last_seq"`
	AckedSeq  *uint64   `json:"acked_seq"`
	Batches   uint64    `json:"batches"`
	Restarts  uint64    `json:"restarts"`
	Gaps      uint64    `json:"unrecoverable_gaps"`
	LastGap   *Gap      `json:"last_gap,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	Since     time.Time `json:"connected_since,omitzero"`
	// Refused counts the engine's events the bridge could not index
	// (malformed batches, bad or unknown events, another block_size, an
	// unknown medium); Refusing is set while most of its recent events
	// are refused ("N of M recent events refused (reason)").
	Refused  uint64 `json:"refused_events"`
	Refusing string `json:"refusing,omitempty"`
}

// Gap is an unrecoverable range of engine sequences [From, To).
type Gap struct {
	From uint64    `json:"from"`
	To   uint64    `json:"to"`
	At   time.Time `json:"at"`
}

type pendingAck struct {
	fut jetstream.PubAckFuture // nil: nothing was published for this batch
	pos position
}

// source bridges one engine. run and everything it calls execute on one
// goroutine; mu guards only what status and the checkpoint flusher read
// (st, acked, dirty).
type source struct {
	b       *Bridge
	spec    EngineSpec
	key     string
	subject string
	log     zerolog.Logger
	conv    *engine.Converter
	dec     engine.Decoder
	buf     []byte

	// Metric children resolved once.
	cc        convertCounters
	lastSeqG  prometheus.Gauge
	connected prometheus.Gauge

	// Sequence state of the batches handed to JetStream.
	epoch    uint64
	has      bool
	last     uint64
	digest   uint64
	rank     uint32
	hasLive  bool
	lastLive uint64
	// continuous is whether the engine is known to be the incarnation
	// whose batches were applied last: false from a (re)connect until a
	// replay matches the last batch applied or a batch follows it. A gap
	// met while it is false may be an engine that restarted while the
	// bridge was away and has already passed the old sequence: it is
	// handled as a restart (a new epoch, so no batch reuses an old
	// <endpoint>#<epoch>#<seq> id that JetStream's duplicate window would
	// drop), not as a gap of the old incarnation.
	continuous bool

	pending []pendingAck
	failed  error
	// lost counts unrecoverable gaps, so offer can tell whether a replay
	// it asked for recovered the gap.
	lost uint64

	// refusals watches this engine's refused events (key 0); safe for
	// the status reader.
	refusals *refusal.Tracker

	mu    sync.Mutex
	st    EngineStatus
	acked position
	dirty bool
}

func newSource(b *Bridge, spec EngineSpec, key string, start position) *source {
	s := &source{
		b:       b,
		spec:    spec,
		key:     key,
		subject: b.subjectFor(spec.WorkerID),
		log:     b.log.With().Uint64("worker_id", spec.WorkerID).Str("endpoint", spec.Pub).Logger(),
		conv: engine.NewConverter(engine.Options{WorkerID: spec.WorkerID, DPRank: spec.DPRank,
			BlockSize: b.cfg.BlockSize, IndexHostPinned: b.cfg.IndexHostPinned}),
		epoch: start.Epoch, has: start.Has, last: start.Seq, digest: start.Digest, rank: spec.DPRank,
		acked: start, refusals: refusal.New(refusal.Config{}),
	}
	s.acked.Endpoint, s.acked.WorkerID = spec.Pub, spec.WorkerID
	s.cc = b.m.convertCounters()
	labels := []string{strconv.FormatUint(spec.WorkerID, 10), spec.Pub}
	s.lastSeqG, s.connected = b.m.lastSeq.WithLabelValues(labels...), b.m.connected.WithLabelValues(labels...)
	s.st = EngineStatus{WorkerID: spec.WorkerID, Endpoint: spec.Pub, Replay: spec.Replay, Epoch: start.Epoch}
	if start.Has {
		s.st.LastSeq, s.st.AckedSeq = u64p(start.Seq), u64p(start.Seq)
	}
	return s
}

func u64p(v uint64) *uint64 { return &v }

func (s *source) status() EngineStatus {
	s.mu.Lock()
	st := s.st
	s.mu.Unlock()
	if r := s.refusals.Refusing(s.b.now()); len(r) > 0 {
		st.Refusing = r[0].String()
	}
	return st
}

func (s *source) updateStatus(fn func(*EngineStatus)) {
	s.mu.Lock()
	fn(&s.st)
	s.mu.Unlock()
}

// run connects, bridges and reconnects with exponential backoff until ctx
// ends. zmq4's own dial gives up, so the loop is ours.
func (s *source) run(ctx context.Context) {
	backoff := s.b.cfg.ReconnectMin
	for {
		applied := s.st.Batches
		err := s.session(ctx)
		s.settle()
		s.connected.Set(0)
		s.updateStatus(func(st *EngineStatus) {
			st.Connected = false
			if err != nil && ctx.Err() == nil {
				st.LastError = err.Error()
			}
		})
		if ctx.Err() != nil {
			return
		}
		if s.status().Batches > applied {
			backoff = s.b.cfg.ReconnectMin // the session made progress
		}
		s.b.m.reconnects.Inc()
		s.log.Warn().Err(err).Dur("backoff_ms", backoff).Msg("engine session ended; reconnecting")
		if !ctxwait.Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, s.b.cfg.ReconnectMax)
	}
}

type liveMsg struct {
	frames [][]byte
	err    error
}

// session runs one connection: SUB (and DEALER for replay) until an
// error, a failed publish or ctx's end.
func (s *source) session(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := zmq4.NewSub(sctx, zmq4.WithLogger(quietLogger()), zmq4.WithDialerMaxRetries(0))
	var err error
	if bindMode(s.spec.Pub) {
		err = sub.Listen(guardedEndpoint(s.spec.Pub))
	} else {
		err = sub.Dial(guardedEndpoint(s.spec.Pub))
	}
	if err != nil {
		_ = sub.Close()
		return fmt.Errorf("connect %s: %w", s.spec.Pub, err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, s.spec.Topic); err != nil {
		_ = sub.Close()
		return fmt.Errorf("subscribe: %w", err)
	}
	live := make(chan liveMsg, 1024)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			msg, err := sub.Recv()
			select {
			case live <- liveMsg{msg.Frames, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var rep *replayer
	if s.spec.Replay != "" {
		rep = &replayer{ep: s.spec.Replay, idle: s.b.cfg.ReplayIdleTimeout, overall: s.b.cfg.ReplayTimeout}
	}
	defer func() {
		if rep != nil {
			rep.close()
		}
		cancel()
		_ = sub.Close()
		<-readerDone
	}()
	s.connected.Set(1)
	s.updateStatus(func(st *EngineStatus) { st.Connected, st.Since = true, s.b.now() })
	s.log.Info().Str("replay", s.spec.Replay).Msg("engine connected")

	// Live sequences at or below this floor mean the engine went back.
	s.hasLive, s.lastLive = s.has, s.last
	s.continuous = !s.has
	if rep != nil {
		s.onConnect(sctx, rep)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	// A batch the engine sends before our subscription reaches it is lost
	// live; the next batch shows the gap, but an engine that then goes
	// idle would leave it missing. So replay once more after the
	// subscription has had time to propagate, unless live traffic came.
	var recheck <-chan time.Time
	if rep != nil {
		t := time.NewTimer(s.b.cfg.ResubscribeCheck)
		defer t.Stop()
		recheck = t.C
	}
	gotLive := false
	for {
		if s.failed != nil {
			return s.failed
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-live:
			if m.err != nil {
				return fmt.Errorf("receive: %w", m.err)
			}
			gotLive = true
			s.handleLive(sctx, rep, m.frames)
		case <-recheck:
			if !gotLive {
				s.catchUp(sctx, rep, s.nextSeq())
			}
		case <-tick.C:
			s.pollAcks(false)
		}
	}
}

// handleLive checks a live message's framing and sequence: a sequence at
// or below the previous live one is an engine restart.
func (s *source) handleLive(ctx context.Context, rep *replayer, frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		s.b.m.malformed.Inc()
		s.log.Warn().Int("frames", len(frames)).Msg("live message with bad framing dropped")
		return
	}
	seq := binary.BigEndian.Uint64(frames[1])
	if s.hasLive && seq <= s.lastLive {
		s.restarted(ctx, rep, fmt.Sprintf("live sequence %d after %d", seq, s.lastLive))
		s.hasLive, s.lastLive = true, seq
		if seq > 0 && rep != nil {
			s.catchUp(ctx, rep, 0)
		}
		s.offer(ctx, rep, seq, frames[2], true)
		return
	}
	s.hasLive, s.lastLive = true, seq
	s.offer(ctx, rep, seq, frames[2], true)
}

// onConnect asks the replay socket from the last applied batch (or 0):
// the batch we already have must come back byte-identical, otherwise the
// engine restarted while we were away; newer batches are applied.
func (s *source) onConnect(ctx context.Context, rep *replayer) {
	if !s.has {
		s.catchUp(ctx, rep, 0)
		return
	}
	from, digest := s.last, s.digest
	first, restarted := true, false
	err := rep.request(ctx, from, func(seq uint64, payload []byte) {
		if restarted {
			return
		}
		if first {
			first = false
			if seq == from {
				restarted = xxh3.Hash(payload) != digest
				s.continuous = !restarted
				return
			}
		}
		s.offer(ctx, rep, seq, payload, false)
	})
	switch {
	case err != nil:
		s.b.m.replays.WithLabelValues("failed").Inc()
		s.log.Warn().Err(err).Uint64("from", from).Msg("replay on connect failed; gaps will show on live messages")
		return
	case first:
		// Nothing buffered at or after our last batch: the engine's newest
		// sequence is older than ours, so it restarted.
		restarted = true
	}
	s.b.m.replays.WithLabelValues("ok").Inc()
	if restarted {
		s.restarted(ctx, rep, fmt.Sprintf("replay from %d disagrees with the batch applied", from))
		s.catchUp(ctx, rep, 0)
	}
}

// restarted handles an engine restart: a new incarnation (epoch) whose
// sequence starts again, and a clear of everything the worker held.
func (s *source) restarted(ctx context.Context, _ *replayer, why string) {
	s.b.m.restarts.Inc()
	s.log.Warn().Str("why", why).Uint64("epoch", s.epoch+1).Msg("engine restart detected; clearing the worker")
	s.epoch++
	s.has = false
	// The new incarnation has sent nothing live yet: no floor.
	s.hasLive = false
	s.continuous = true
	s.updateStatus(func(st *EngineStatus) { st.Restarts++; st.Epoch = s.epoch; st.LastSeq = nil })
	s.clearWorker(ctx, "engine_restart")
}

// catchUp replays from `from` and offers every batch in order. Live
// messages wait in the session's channel meanwhile and are applied after
// (spec: a later live Removed must not overtake an older replayed Stored).
func (s *source) catchUp(ctx context.Context, rep *replayer, from uint64) {
	err := rep.request(ctx, from, func(seq uint64, payload []byte) {
		s.offer(ctx, rep, seq, payload, false)
	})
	if err != nil {
		s.b.m.replays.WithLabelValues("failed").Inc()
		s.log.Warn().Err(err).Uint64("from", from).Msg("replay failed")
		return
	}
	s.b.m.replays.WithLabelValues("ok").Inc()
}

// offer applies one batch in sequence order: a batch already applied is a
// duplicate (live/replay overlap); a batch past a hole first asks replay
// for the hole (when repair is allowed), and a hole replay cannot fill is
// an unrecoverable gap.
func (s *source) offer(ctx context.Context, rep *replayer, seq uint64, payload []byte, repair bool) {
	if s.has && seq <= s.last {
		s.b.m.duplicates.Inc()
		return
	}
	if s.has && seq > s.last+1 && !s.continuous {
		s.restarted(ctx, rep, fmt.Sprintf("batch %d after %d right after reconnecting: a gap or a restart, treated as a restart", seq, s.last))
		if repair && rep != nil {
			// The new incarnation's earlier batches, as far as replay
			// still holds them.
			s.catchUp(ctx, rep, 0)
			if s.has && seq <= s.last {
				s.b.m.duplicates.Inc()
				return
			}
		}
	}
	if s.has && seq > s.last+1 {
		from := s.last + 1
		lost := s.lost
		if repair && rep != nil {
			s.catchUp(ctx, rep, from)
		}
		if s.has && seq > s.last+1 {
			s.gapLost(ctx, s.last+1, seq)
		} else if s.lost == lost {
			s.b.m.gaps.WithLabelValues("recovered").Inc()
		}
		if s.has && seq <= s.last {
			s.b.m.duplicates.Inc()
			return
		}
	}
	s.continuous = true
	s.apply(seq, payload)
}

// gapLost reports an unrecoverable gap and clears the worker: the missing
// batches may have removed blocks, and keeping what they would have
// removed over-reports (see README, "gap handling").
func (s *source) gapLost(ctx context.Context, from, to uint64) {
	s.lost++
	s.b.m.gaps.WithLabelValues("unrecoverable").Inc()
	s.b.m.gapBatches.Add(float64(to - from))
	s.log.Error().Uint64("from", from).Uint64("to", to).Msg("engine batches lost beyond replay; clearing the worker")
	g := &Gap{From: from, To: to, At: s.b.now()}
	s.updateStatus(func(st *EngineStatus) { st.Gaps++; st.LastGap = g })
	s.clearWorker(ctx, "unrecoverable_gap")
}

func (s *source) nextSeq() uint64 {
	if s.has {
		return s.last + 1
	}
	return 0
}

func (s *source) position() position {
	return position{Endpoint: s.spec.Pub, WorkerID: s.spec.WorkerID, Epoch: s.epoch, Has: s.has, Seq: s.last, Digest: s.digest}
}

// clearWorker publishes an AllBlocksCleared for the worker. Its message
// id is deterministic so a bridge that re-sends it after a crash is
// deduplicated.
func (s *source) clearWorker(_ context.Context, reason string) {
	s.b.m.clears.WithLabelValues(reason).Inc()
	s.cc.cleared.Inc()
	data := s.conv.AppendCleared(nil, s.rank, s.nextSeq())
	id := s.spec.Pub + "#" + strconv.FormatUint(s.epoch, 10) + "#clear#" + strconv.FormatUint(s.nextSeq(), 10)
	s.publish(data, id, s.position(), 0)
}

// apply decodes, converts and publishes one batch. A malformed batch is
// counted and skipped; its sequence still counts as applied so replay
// does not ask for it forever.
func (s *source) apply(seq uint64, payload []byte) {
	var st engine.Stats
	n := 0
	b, err := s.dec.Decode(payload)
	refused, reason := 0, ""
	if err != nil {
		s.b.m.malformed.Inc()
		s.log.Warn().Err(err).Uint64("seq", seq).Msg("malformed engine batch skipped")
		refused, reason = 1, "malformed_batch"
	} else {
		if b.HasDPRank && b.DPRank >= 0 && b.DPRank <= 1<<32-1 {
			s.rank = uint32(b.DPRank)
		}
		s.buf, n = s.conv.Convert(s.buf[:0], b, seq, &st)
		s.b.m.unknownFields.Add(float64(b.UnknownFields))
		s.cc.unknownEvent.Add(float64(b.UnknownEvents))
		s.cc.badEvent.Add(float64(b.BadEvents))
		s.b.countStats(&s.cc, &st)
		refused, reason = refusedOf(b, &st)
	}
	s.noteRefusals(seq, payload, n, refused, reason)
	s.has, s.last, s.digest = true, seq, xxh3.Hash(payload)
	s.b.m.batches.Inc()
	s.lastSeqG.Set(float64(seq))
	s.updateStatus(func(es *EngineStatus) { es.Batches++; es.LastSeq = u64p(seq) })
	pos := s.position()
	if n == 0 {
		s.pending = append(s.pending, pendingAck{pos: pos})
		s.pollAcks(false)
		return
	}
	data := append([]byte(nil), s.buf...) // the async publish may still read it after we reuse buf
	id := s.spec.Pub + "#" + strconv.FormatUint(s.epoch, 10) + "#" + strconv.FormatUint(seq, 10)
	s.publish(data, id, pos, n)
}

// refusedOf counts a batch's events the bridge could not index for a
// fault of the engine or of the configuration (events left out by design,
// such as another tier, are not refusals) and names the commonest reason.
func refusedOf(b *engine.Batch, st *engine.Stats) (int, string) {
	reasons := [...]struct {
		n    uint64
		name string
	}{
		{st.BlockSizeMismatch, "block_size_mismatch"},
		{uint64(b.BadEvents), "bad_event"},
		{uint64(b.UnknownEvents), "unknown_event"},
		{st.UnknownMedium, "unknown_medium"},
	}
	total, top, reason := uint64(0), uint64(0), ""
	for _, r := range reasons {
		total += r.n
		if r.n > top {
			top, reason = r.n, r.name
		}
	}
	return int(min(total, 1<<31)), reason
}

// noteRefusals feeds one batch's outcome to the engine's refusal window
// and logs a warning (at most one per refusal.DefaultWarnEvery) with the
// reason and the batch as a sample.
func (s *source) noteRefusals(seq uint64, payload []byte, accepted, refused int, reason string) {
	now := s.b.now()
	s.refusals.Accept(0, accepted, now)
	if refused == 0 {
		return
	}
	s.updateStatus(func(es *EngineStatus) { es.Refused += uint64(refused) })
	if w, ok := s.refusals.Refuse(0, refused, reason, now); ok {
		s.log.Warn().Str("reason", reason).Int("refused", refused).Uint64("suppressed_since_last_warning", w.Suppressed).
			Uint64("sample_seq", seq).Hex("sample_payload_head", payload[:min(len(payload), 64)]).
			Int("block_size", s.b.cfg.BlockSize).
			Msg("engine events refused: their blocks are missing from the index")
	}
}

func (s *source) publish(data []byte, id string, pos position, events int) {
	if s.failed != nil {
		return
	}
	for len(s.pending) >= s.b.cfg.MaxInFlight {
		s.pollAcks(true)
		if s.failed != nil {
			return
		}
	}
	msg := &nats.Msg{Subject: s.subject, Data: data}
	if s.b.tracing {
		msg.Header = nats.Header{}
		_, span := s.b.tracer.Start(context.Background(), "ckf.bridge.publish", trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.Int64("ckf.worker_id", int64(s.spec.WorkerID)), attribute.Int("ckf.events", events)))
		s.b.prop.Inject(trace.ContextWithSpan(context.Background(), span), streams.HeaderCarrier(msg.Header))
		span.End()
	}
	fut, err := s.b.js.PublishMsgAsync(msg, jetstream.WithMsgID(id))
	if err != nil {
		s.fail(fmt.Errorf("%w: %w", errPublish, err))
		return
	}
	s.pending = append(s.pending, pendingAck{fut: fut, pos: pos})
}

func (s *source) fail(err error) {
	if s.failed == nil {
		s.failed = err
		s.b.m.publishErrors.Inc()
		s.log.Warn().Err(err).Msg("KVEVENTS publish failed; rewinding to the last acknowledged batch")
	}
}

// pollAcks retires resolved publishes in order; block waits for the
// oldest one (bounded by AckTimeout).
func (s *source) pollAcks(block bool) {
	retired := 0
	for retired < len(s.pending) {
		p := s.pending[retired]
		if p.fut != nil {
			var timeout <-chan time.Time
			if block && retired == 0 {
				t := time.NewTimer(s.b.cfg.AckTimeout)
				defer t.Stop()
				timeout = t.C
			}
			if !block || retired > 0 {
				select {
				case a := <-p.fut.Ok():
					s.countAck(a)
				case err := <-p.fut.Err():
					s.fail(fmt.Errorf("%w: %w", errPublish, err))
				default:
					s.compact(retired)
					return
				}
			} else {
				select {
				case a := <-p.fut.Ok():
					s.countAck(a)
				case err := <-p.fut.Err():
					s.fail(fmt.Errorf("%w: %w", errPublish, err))
				case <-timeout:
					s.fail(fmt.Errorf("%w: no acknowledgement within %v", errPublish, s.b.cfg.AckTimeout))
				}
			}
			if s.failed != nil {
				s.compact(retired)
				return
			}
		}
		s.ack(p.pos)
		retired++
	}
	s.compact(retired)
}

func (s *source) countAck(a *jetstream.PubAck) {
	s.b.m.published.Inc()
	if a != nil && a.Duplicate {
		s.b.m.resent.Inc()
	}
}

func (s *source) compact(n int) {
	if n == 0 {
		return
	}
	rest := copy(s.pending, s.pending[n:])
	clear(s.pending[rest:])
	s.pending = s.pending[:rest]
}

func (s *source) ack(p position) {
	s.mu.Lock()
	s.acked, s.dirty = p, true
	if p.Has {
		s.st.AckedSeq = u64p(p.Seq)
	} else {
		s.st.AckedSeq = nil
	}
	s.mu.Unlock()
}

// settle waits for every outstanding publish after a session, then
// rewinds the sequence state to the last acknowledged batch: after a
// failed publish the next session replays from there (the stream's
// Nats-Msg-Id deduplication drops what was stored after all).
func (s *source) settle() {
	// One bound for the whole wait, cut short when the connection is
	// gone (its futures would never resolve).
	deadline := time.Now().Add(s.b.cfg.AckTimeout)
	for _, p := range s.pending {
		if p.fut == nil {
			if s.failed == nil {
				s.ack(p.pos)
			}
			continue
		}
		resolved := false
		for !resolved && time.Now().Before(deadline) && !s.b.js.Conn().IsClosed() {
			select {
			case a := <-p.fut.Ok():
				resolved = true
				if s.failed == nil {
					s.countAck(a)
					s.ack(p.pos)
				}
			case err := <-p.fut.Err():
				resolved = true
				s.fail(fmt.Errorf("%w: %w", errPublish, err))
			case <-time.After(50 * time.Millisecond):
			}
		}
		if !resolved {
			s.fail(fmt.Errorf("%w: unacknowledged at session end", errPublish))
		}
	}
	clear(s.pending)
	s.pending = s.pending[:0]
	s.failed = nil
	s.mu.Lock()
	a := s.acked
	s.mu.Unlock()
	s.epoch, s.has, s.last, s.digest = a.Epoch, a.Has, a.Seq, a.Digest
	s.updateStatus(func(st *EngineStatus) {
		st.Epoch = a.Epoch
		if a.Has {
			st.LastSeq = u64p(a.Seq)
		} else {
			st.LastSeq = nil
		}
	})
}

// takeCheckpoint returns the acknowledged position if it changed since the
// last call.
func (s *source) takeCheckpoint() (position, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dirty {
		return position{}, false
	}
	s.dirty = false
	return s.acked, true
}

func (s *source) markDirty() { s.mu.Lock(); s.dirty = true; s.mu.Unlock() }
