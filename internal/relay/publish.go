package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/promx"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Enqueue is producer.Sink: it encodes one delta into the outbox, which
// the lane writer sends (send) in order, one flight at a time. The
// publisher's sequence advances before JetStream stored the delta; any
// failure of the flight ends the epoch (its successor starts over with a
// barrier snapshot), and every other lane message, drain marker and
// snapshot waits for the flight first (settle), so nothing on the lane
// ever claims a sequence that is not stored.
func (e *epochRun) Enqueue(d ckf.Delta) error {
	wd := wire.NewDelta(d, e.wlease)
	var buf []byte
	if n := len(e.bufs); n > 0 {
		buf, e.bufs = e.bufs[n-1], e.bufs[:n-1]
	}
	buf, err := wire.AppendDelta(buf[:0], &wd)
	if err != nil {
		return err
	}
	msgID := wire.MsgID(wire.KindDelta, &e.identity, e.epoch, d.Sequence)
	ctx, span := e.startPublishSpan(len(buf), msgID,
		attribute.Int64("ckf.epoch", int64(e.epoch)), attribute.Int64("ckf.sequence", int64(d.Sequence)),
		attribute.Int("ckf.images", len(d.Images)))
	msg := nats.NewMsg(e.r.subj.Delta)
	msg.Data = buf
	e.r.prop.Inject(ctx, streams.HeaderCarrier(msg.Header))
	if !e.oldestEvent.IsZero() {
		msg.Header.Set(HeaderEventTime, strconv.FormatInt(e.oldestEvent.UnixNano(), 10))
	}
	lm := laneMsg{ctx: ctx, span: span, msg: msg, msgID: msgID, images: len(d.Images), buf: buf}
	if e.fan != nil && e.fan.Len() > 0 {
		// kvrelay subscribers get the delta once JetStream stored it; the
		// images belong to the state's buffer, so they are copied.
		lm.kv = &kvDelta{base: d.BaseSequence, seq: d.Sequence, images: make([]cbi1.Image, len(d.Images))}
		for i, im := range d.Images {
			lm.kv.images[i] = cbi1.Image{Bucket: uint32(im.Bucket), Word: im.Value}
		}
	}
	e.outbox = append(e.outbox, lm)
	return nil
}

// laneMsg is one delta encoded on the actor and sent by the lane writer.
type laneMsg struct {
	ctx    context.Context
	span   trace.Span
	msg    *nats.Msg
	msgID  string
	images int
	buf    []byte   // the encode buffer, reused once the flight landed
	kv     *kvDelta // the delta for kvrelay subscribers (nil: none)
}

// kvDelta is a delta's images kept for the kvrelay fanout.
type kvDelta struct {
	base, seq uint64
	images    []cbi1.Image
}

// laneFlight is the outbox of one cut on its way to JetStream. At most
// one flight is out at a time: the lane's expected-last-sequence fence
// needs the previous message's stream sequence, and the next cut takes
// everything applied meanwhile (coalescing under load).
type laneFlight struct {
	msgs   []laneMsg
	events uint64 // applied events the flight covers (Status.Events once landed)
	start  time.Time
	done   chan error
}

// send starts the outbox's flight: a goroutine publishes its messages in
// order while the actor goes on applying input. The caller has settled
// the previous flight.
func (e *epochRun) send() {
	if len(e.outbox) == 0 {
		e.publishedStats(e.r.m.eventsApplied.Load())
		return
	}
	f := &laneFlight{msgs: e.outbox, events: e.r.m.eventsApplied.Load(), start: time.Now(), done: make(chan error, 1)}
	e.outbox = e.spareOutbox[:0]
	e.spareOutbox = nil
	e.flight = f
	go func() { f.done <- e.sendAll(f.msgs) }()
}

// sendAll runs on the flight's goroutine; it owns e.lastLane until the
// actor receives its result.
func (e *epochRun) sendAll(msgs []laneMsg) error {
	for i := range msgs {
		m := &msgs[i]
		start := time.Now()
		err := e.publish(m.ctx, wire.KindDelta, m.msg, m.msgID)
		promx.Observe(e.r.m.publishSeconds, time.Since(start).Seconds(), m.span.SpanContext())
		if err != nil {
			for j := i; j < len(msgs); j++ {
				msgs[j].span.RecordError(err)
				msgs[j].span.SetStatus(codes.Error, err.Error())
				msgs[j].span.End()
			}
			return err
		}
		m.span.End()
	}
	return nil
}

// landing is the channel the current flight reports on (nil, never ready,
// without one).
func (e *epochRun) landing() <-chan error {
	if e.flight == nil {
		return nil
	}
	return e.flight.done
}

// landed takes the current flight's result on the actor: a failure ends
// the epoch; a success is counted and fanned out to kvrelay subscribers.
func (e *epochRun) landed(err error) error {
	f := e.flight
	e.flight = nil
	if err != nil {
		return e.fence(err)
	}
	for i := range f.msgs {
		m := &f.msgs[i]
		e.r.m.deltas.Inc()
		e.r.m.images.Add(float64(m.images))
		if m.kv != nil && e.fan != nil {
			e.fan.Publish(m.kv.base, m.kv.seq, m.kv.images)
		}
		if len(e.bufs) < maxSpareBufs {
			e.bufs = append(e.bufs, m.buf[:0])
		}
		*m = laneMsg{}
	}
	e.spareOutbox = f.msgs[:0]
	e.publishedStats(f.events)
	return nil
}

// maxSpareBufs bounds the encode buffers kept for reuse (a cut larger
// than MaxDeltaImages splits into several messages).
const maxSpareBufs = 4

// settle waits for the flight out, if any, and takes its result.
func (e *epochRun) settle() error {
	if e.flight == nil {
		return nil
	}
	return e.landed(<-e.flight.done)
}

// abandon waits for a flight the ended epoch left (its context is done,
// so the publish returns promptly): no goroutine outlives the epoch.
func (e *epochRun) abandon() {
	if e.flight != nil {
		<-e.flight.done
		e.flight = nil
	}
}

// maxSpanLinks bounds the links of one publish span (the SDK's default
// link limit): a delta coalescing more input messages links the first ones
// and counts the rest in ckf.links_dropped.
const maxSpanLinks = 128

// startPublishSpan starts the producer span of one delta. Its parent is
// the first sampled apply span of the batch (the first one when none is
// sampled), so a traced input message's trace continues to the indexer;
// every other coalesced input message's apply span is linked. The parent
// is not linked again: Jaeger takes a link to the parent for the parent
// reference's type (FOLLOWS_FROM), and the span would no longer show as
// the apply span's child.
func (e *epochRun) startPublishSpan(bodySize int, msgID string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx := e.ctx
	var parent trace.SpanContext
	for _, sc := range e.applySpans {
		if !parent.IsValid() || (!parent.IsSampled() && sc.IsSampled()) {
			parent = sc
		}
	}
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	if span := trace.SpanFromContext(ctx); e.r.cfg.Tracer == nil && !span.IsRecording() {
		// What the noop tracer would return (the parent's context, carried
		// on to the lane), without building links and attributes per delta.
		return ctx, span
	}
	links := make([]trace.Link, 0, len(e.applySpans))
	for _, sc := range e.applySpans {
		if !sc.Equal(parent) {
			links = append(links, trace.Link{SpanContext: sc})
		}
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

// flush cuts the publication window and publishes it, waiting until
// JetStream stored it (the actor's synchronous cut: heartbeats, kvrelay
// subscriptions).
func (e *epochRun) flush() error {
	if err := e.settle(); err != nil {
		return err
	}
	if err := e.cut(); err != nil {
		return err
	}
	return e.settle()
}

// cut cuts the publication window into the outbox as one or more
// consecutive deltas and starts their flight. No flight may be out.
func (e *epochRun) cut() error {
	if hook := e.r.onCut; hook != nil {
		hook()
	}
	batch := e.state.Flush()
	if e.windowEvents > 0 {
		e.r.m.cutEvents.Observe(float64(e.windowEvents))
	}
	defer func() {
		e.oldestEvent, e.applySpans, e.linksDropped, e.windowEvents = time.Time{}, e.applySpans[:0], 0, 0
	}()
	if err := e.publishBatch(batch); err != nil {
		return err
	}
	e.send()
	return nil
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
	return nil
}

// publishedStats runs after every publication, so it only reads O(1)
// counters; occupancy (a lane scan) is refreshed by the heartbeat. events
// is the applied-event count the published sequence covers.
func (e *epochRun) publishedStats(events uint64) {
	seq := e.pub.LastSequence()
	unique := e.state.UniqueBlocks()
	e.r.m.sequence.Set(float64(seq))
	e.r.m.uniqueBlocks.Set(float64(unique))
	e.r.update(func(s *Status) {
		s.Sequence = seq
		s.UniqueBlocks = unique
		s.Events = events
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
	if err := e.settle(); err != nil {
		return err
	}
	ll := ckf.LaneLease{PhysicalLane: uint8(e.lane), AssignmentEpoch: e.epoch}
	snap, err := e.pub.SnapshotAfterBarrier(e.state, ll)
	if err != nil {
		return e.fence(err)
	}
	e.windowEvents = 0
	// The tail is stored before the body and the marker.
	if len(e.outbox) > 0 {
		e.send()
		if err := e.settle(); err != nil {
			return err
		}
	}
	body, err := wire.EncodeSnapshotBody(nil, snap.Identity.Format, snap.Buckets)
	if err != nil {
		return err
	}
	name, err := wire.SnapshotObjectName(e.r.cfg.Domain, e.r.cfg.DC, e.epoch, snap.Sequence)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(e.ctx, e.r.cfg.uploadTimeout(len(body)))
	defer cancel()
	if !e.bodyStored(octx, name, len(body)) {
		if err := e.awaitSnapshotStore(octx); err != nil {
			return fmt.Errorf("relay: snapshot store: %w", err)
		}
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
	e.publishedStats(e.r.m.eventsApplied.Load())
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
		e.deleteSnapshotBody(octx, e.objects[0], "superseded")
		e.objects = e.objects[1:]
	}
	return nil
}

// storeProbeTimeout bounds one probe of the snapshot store's stream.
const storeProbeTimeout = 2 * time.Second

// awaitSnapshotStore waits until the snapshot store's stream answers (it
// has a leader), probing again until ctx ends. An epoch that just replaced
// one fenced by a lost hub node usually starts while that stream still
// elects its leader; chunks published meanwhile are never acknowledged,
// and the object store then waits for them until the whole upload timeout
// has passed, holding the lease of a relay that publishes nothing.
func (e *epochRun) awaitSnapshotStore(ctx context.Context) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, storeProbeTimeout)
		_, err := e.snaps.Status(pctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
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
			e.deleteSnapshotBody(ctx, info.Name, "earlier epoch")
		}
	}
}

// deleteSnapshotBody removes a snapshot body no marker needs any more. A
// failure only leaves the object behind (a later epoch's first snapshot
// prunes it again), so it is logged, not returned; one already gone is
// what was wanted.
func (e *epochRun) deleteSnapshotBody(ctx context.Context, name, why string) {
	if err := e.snaps.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		e.r.log.Warn().Err(err).Str("object", name).Str("reason", why).Msg("snapshot body not deleted; a later epoch prunes it")
	}
}

// heartbeat publishes a drain marker when the sequence moved since the
// last one (consumers verify they reached it), else a heartbeat.
func (e *epochRun) heartbeat() error {
	if err := e.flush(); err != nil {
		return err
	}
	e.r.m.occupiedSlots.Set(float64(e.state.OccupiedSlots()))
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
