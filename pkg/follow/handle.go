package follow

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// epochGranted reports whether the lease coordinator has granted the pool
// epoch: anyone who can publish on the lane subjects can claim any epoch,
// but only a relay that took the lease moved the pool's epoch counter. A
// cached grant answers most calls. An epoch above it re-reads the counter
// before it is refused, because a genuine new epoch's first marker can
// arrive before this runner has looked at the counter since it moved.
// A failed read refuses for now (the message is dropped; a lane that
// needs the epoch bootstraps again from the latest marker later).
func (r *laneRunner) epochGranted(ctx context.Context, epoch uint64) bool {
	if epoch <= r.granted {
		return true
	}
	cur, err := r.svc.coord.CurrentEpoch(ctx, r.svc.cfg.Domain, r.dc)
	if err != nil {
		r.log.Warn().Err(err).Uint64("epoch", epoch).Msg("reading the pool's granted epoch failed; refusing the epoch for now")
		return false
	}
	r.granted = cur
	return epoch <= cur
}

// leaseGranted reports whether a relay took the pool's lease for epoch:
// whether the pool's lease record names epoch or a later one. Lease epochs
// only go up, so a cached record epoch at or above epoch answers without a
// read; a newer epoch re-reads the record, because a takeover's first
// message can arrive before this runner has looked at the record since it
// moved. A relay writes its lease before it publishes under it, so the
// re-read always sees a genuine epoch. With no record (released: Release
// deletes it, the counter stays) the counter decides, as for markers;
// newerWithoutMarker keeps a burnt epoch from looping the lane then. A
// failed read refuses for now, as epochGranted does.
func (r *laneRunner) leaseGranted(ctx context.Context, epoch uint64) bool {
	if epoch <= r.leased {
		return true
	}
	li, err := r.svc.coord.CurrentLease(ctx, r.svc.cfg.Domain, r.dc)
	switch {
	case errors.Is(err, lease.ErrNoLease):
		return r.epochGranted(ctx, epoch)
	case err != nil:
		r.log.Warn().Err(err).Uint64("epoch", epoch).Msg("reading the pool's lease record failed; refusing the epoch for now")
		return false
	}
	r.leased = max(r.leased, li.Epoch)
	return epoch <= li.Epoch
}

// newerWithoutMarker handles a delta, drain marker or heartbeat of a newer
// epoch than the installed one. A snapshot marker of a newer epoch
// precedes its other traffic on the lane, so the lane missed it.
//
// An epoch no relay took the lease for is skipped and counted
// (ungranted). A granted one means the installed epoch is superseded: when
// the lane holds a marker newer than the installed one, it bootstraps from
// the latest (missedMarker). When the latest marker is the installed one,
// bootstrapping would install the same snapshot, resume after it and meet
// this traffic again, forever: instead the lane leaves the ready set, asks
// the relay for a snapshot and goes on consuming, skipping (and counting)
// that traffic until a marker arrives (handleMarker).
func (r *laneRunner) newerWithoutMarker(ctx context.Context, kind wire.MessageKind, epoch uint64) (outcome, bool) {
	if !r.leaseGranted(ctx, epoch) {
		return r.ungrantedOutcome(kind, epoch)
	}
	if r.awaiting != 0 {
		// Out of the ready set and asked already: wait for the marker,
		// asking again as often as failing bootstraps would at most (a
		// relay coalesces requests; one restarting may miss one).
		r.awaiting = max(r.awaiting, epoch)
		r.m.withoutMarker(kind.String())
		r.askAgain(ctx)
		return outcome{}, false
	}
	at, err := r.latestMarker(ctx)
	if err != nil || at.streamSeq != r.cur.streamSeq {
		// A newer marker to bootstrap from, or none that can be read now
		// (bootstrap retries with backoff and asks for a snapshot).
		return missedMarker(kind, epoch)
	}
	r.awaiting = epoch
	r.m.withoutMarker(kind.String())
	r.m.fault(faultNewerEpoch)
	r.gen.pool.Indexer().RetireLaneReadiness(r.lane)
	detail := fmt.Sprintf("%s of epoch %d without its marker; the latest marker is the installed one (epoch %d, stream sequence %d); asked for a snapshot",
		kind, epoch, r.cur.epoch, r.cur.streamSeq)
	r.log.Warn().Str("kind", kind.String()).Uint64("epoch", epoch).Uint64("current_epoch", r.cur.epoch).
		Msg("newer epoch without its marker; out of the ready set until a marker arrives")
	r.setStatus(PhaseAwaitingSnapshot, faultNewerEpoch+": "+detail)
	r.askedAt = r.svc.now()
	r.requestSnapshot(ctx)
	return outcome{}, false
}

// missedMarker is the outcome of a granted newer epoch's message (of kind)
// reaching a lane that never saw that epoch's snapshot marker while a
// newer marker than the installed one is on the lane: the installed epoch
// is superseded, so the lane bootstraps from the latest marker.
func missedMarker(kind wire.MessageKind, epoch uint64) (outcome, bool) {
	return outcome{fault: faultNewerEpoch, detail: kind.String() + " of epoch " + strconv.FormatUint(epoch, 10) + " without its marker"}, true
}

// ungrantedOutcome counts and skips a lane message whose epoch the lease
// coordinator never granted: the lane stays as it is.
func (r *laneRunner) ungrantedOutcome(kind wire.MessageKind, epoch uint64) (outcome, bool) {
	r.m.ungranted(kind.String())
	r.log.Warn().Str("kind", kind.String()).Uint64("epoch", epoch).Uint64("granted", r.granted).Uint64("leased", r.leased).
		Msg("lane message under an epoch the lease coordinator never granted; skipped")
	return outcome{}, false
}

// sawCurrent records traffic of the installed epoch.
func (r *laneRunner) sawCurrent() { r.supersededSince = time.Time{} }

// dropSuperseded counts a dropped message of an older epoch. Once the lane
// has dropped such traffic for Config.SupersededFaultAfter without seeing
// any of its own epoch, its installed epoch is not what its producer
// publishes under: it reports a fault and bootstraps again (from the
// latest marker, itself checked against the granted epoch).
func (r *laneRunner) dropSuperseded(kind wire.MessageKind, epoch uint64) (outcome, bool) {
	r.m.superseded(kind.String())
	now := r.svc.now()
	if r.supersededSince.IsZero() {
		r.supersededSince = now
		return outcome{}, false
	}
	if waited := now.Sub(r.supersededSince); waited >= r.svc.cfg.SupersededFaultAfter {
		r.distrusted = r.cur.epoch
		return outcome{fault: faultSuperseded, requestSnapshot: true,
			detail: fmt.Sprintf("dropped traffic of epoch %d (and older) for %s without any of the installed epoch %d",
				epoch, waited.Round(time.Millisecond), r.cur.epoch)}, true
	}
	return outcome{}, false
}

// countMalformed counts a refused message by its wire error kind.
func (r *laneRunner) countMalformed(err error) {
	var de *wire.DecodeError
	if errors.As(err, &de) {
		r.m.malformed(wireKindLabel(de.Kind))
		return
	}
	r.m.malformed("decode")
}

// handle processes one lane message; done reports that consume must return
// out.
func (r *laneRunner) handle(ctx context.Context, m jetstream.Msg) (out outcome, done bool) {
	r.msgStored = time.Time{}
	if meta, err := m.Metadata(); err == nil {
		if meta.Sequence.Stream < r.resume {
			// Already handled: a replaced consumer delivers again what the
			// lane had queued but not handled, never less.
			return outcome{}, false
		}
		r.resume = meta.Sequence.Stream + 1
		r.msgStored = meta.Timestamp
		r.m.lag.Set(float64(meta.NumPending))
		r.mu.Lock()
		r.st.lag = meta.NumPending
		r.mu.Unlock()
	}
	data := m.Data()
	kind, err := wire.PeekKind(data)
	if err != nil {
		return r.malformed(err, m.Subject())
	}
	if r.subj.For(kind) != m.Subject() {
		r.m.malformed(malformedSubject)
		r.log.Warn().Str("subject", m.Subject()).Str("kind", kind.String()).Msg("lane message on the wrong subject; skipped")
		return outcome{}, false
	}
	switch kind {
	case wire.KindDelta:
		d, err := wire.DecodeDelta(data)
		if err != nil {
			return r.malformed(err, m.Subject())
		}
		return r.handleDelta(ctx, m, &d)
	case wire.KindDrainMarker:
		dm, err := wire.DecodeDrainMarker(data)
		if err != nil {
			return r.malformed(err, m.Subject())
		}
		return r.handleDrain(ctx, &dm)
	case wire.KindSnapshotMarker:
		sm, err := wire.DecodeSnapshotMarker(data)
		if err != nil {
			return r.malformed(err, m.Subject())
		}
		return r.handleMarker(ctx, m, &sm)
	default: // heartbeat: validated; it carries nothing the lane applies
		hb, err := wire.DecodeHeartbeat(data)
		if err != nil {
			return r.malformed(err, m.Subject())
		}
		return r.handleHeartbeat(ctx, &hb)
	}
}

func (r *laneRunner) malformed(err error, subject string) (outcome, bool) {
	r.countMalformed(err)
	r.log.Warn().Err(err).Str("subject", subject).Msg("malformed lane message; skipped")
	return outcome{}, false
}

// traffic classifies a message's (identity, wire epoch) against the current
// assignment.
type traffic uint8

const (
	trafficCurrent traffic = iota + 1
	trafficSuperseded
	trafficNewer
	trafficForeign
	// trafficMismatch: the installed epoch under another identity. A relay
	// keeps one identity per epoch (its incarnation is the epoch), so this
	// is not a take-over: it is skipped rather than obeyed.
	trafficMismatch
)

func (r *laneRunner) classify(id *ckf.ProducerIdentity, epoch uint64) traffic {
	switch {
	case id.Pool != r.pool:
		return trafficForeign
	case epoch < r.cur.epoch:
		return trafficSuperseded
	case epoch > r.cur.epoch:
		return trafficNewer
	case *id != r.cur.identity:
		return trafficMismatch
	}
	return trafficCurrent
}

// gateAction is what a lane message's handler does once the epoch gate
// has judged the message.
type gateAction uint8

const (
	// gateDone: the gate dealt with the message (skipped, counted, logged,
	// or turned into the lane's outcome); the handler returns that outcome.
	gateDone gateAction = iota + 1
	// gateApply: traffic of the installed epoch and identity.
	gateApply
	// gateSwitch: a snapshot marker of a granted newer epoch; the lane
	// bootstraps from it.
	gateSwitch
)

// gate is the lane's one epoch gate: every lane message kind passes it with
// its producer identity, wire epoch and sequence before its handler acts
// on it, so every kind is classified, counted and logged alike. The trust
// rules: traffic of another pool, of the installed epoch under another
// identity, or of an epoch never granted is warned about, counted by kind
// and skipped; superseded traffic is counted and feeds the
// superseded-traffic fault. Only what a newer epoch means depends on the
// kind: a snapshot marker is that epoch's entry point (judged against the
// epoch counter: gateSwitch), any other message is a sign the lane missed
// it (judged against the lease record: newerWithoutMarker).
func (r *laneRunner) gate(ctx context.Context, kind wire.MessageKind, id *ckf.ProducerIdentity, epoch, seq uint64) (gateAction, outcome, bool) {
	t := r.classify(id, epoch)
	switch t {
	case trafficForeign, trafficMismatch:
		label, msg := malformedForeignPool, "lane message of another pool; skipped"
		if t == trafficMismatch {
			label, msg = malformedIdentity, "lane message of the installed epoch under another producer identity; skipped"
		}
		r.m.malformed(label)
		r.log.Warn().Str("kind", kind.String()).Str("pool", id.Pool.String()).Uint64("epoch", epoch).
			Uint64("incarnation", id.ProducerIncarnation).Uint64("layout_generation", id.LayoutGeneration).
			Uint64("sequence", seq).Msg(msg)
		return gateDone, outcome{}, false
	case trafficSuperseded:
		r.log.Debug().Str("kind", kind.String()).Uint64("epoch", epoch).Uint64("current_epoch", r.cur.epoch).
			Uint64("sequence", seq).Msg("superseded lane message dropped")
		out, done := r.dropSuperseded(kind, epoch)
		return gateDone, out, done
	case trafficNewer:
		if kind != wire.KindSnapshotMarker {
			out, done := r.newerWithoutMarker(ctx, kind, epoch)
			return gateDone, out, done
		}
		if !r.epochGranted(ctx, epoch) {
			out, done := r.ungrantedOutcome(kind, epoch)
			return gateDone, out, done
		}
		return gateSwitch, outcome{}, false
	}
	r.sawCurrent()
	r.heardAt(r.msgStored)
	return gateApply, outcome{}, false
}

func (r *laneRunner) handleDelta(ctx context.Context, m jetstream.Msg, d *wire.Delta) (outcome, bool) {
	if act, out, done := r.gate(ctx, wire.KindDelta, &d.Identity, d.Lease.Epoch, d.Sequence); act != gateApply {
		return out, done
	}
	if r.behind {
		// Past a hole: the lane is out of the ready set until a marker.
		return outcome{}, false
	}
	cd := d.ToCkf(r.cur.lease)
	pctx := propagation.TraceContext{}.Extract(ctx, streams.HeaderCarrier(m.Headers()))
	span := r.startApplySpan(pctx, m, d)
	err := r.gen.pool.SubmitDelta(&cd)
	admitted := time.Now()
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if err != nil {
		return r.poolRefused(err), true
	}
	r.m.deltas.Inc()
	r.m.images.Add(float64(len(d.Images)))
	// The pool ignores a stale or duplicate sequence; so does reached.
	r.reached = max(r.reached, d.Sequence)
	r.setInstalled(r.cur.epoch, d.Sequence)
	if t, ok := eventTime(m.Headers()); ok {
		if lat := admitted.Sub(t); lat >= 0 {
			r.m.observeLatency(lat.Seconds(), span.SpanContext())
		}
	}
	return outcome{}, false
}

// startApplySpan starts the lane_apply span of delta d, the child of the
// relay's publish span in ctx. Without a tracer provider it is the noop
// tracer's span, the relay's context itself, without the attributes
// built per delta.
func (r *laneRunner) startApplySpan(ctx context.Context, m jetstream.Msg, d *wire.Delta) trace.Span {
	if span := trace.SpanFromContext(ctx); r.svc.cfg.Tracer == nil && !span.IsRecording() {
		return span
	}
	_, span := r.svc.tracer.Start(ctx, SpanLaneApply,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("apply"),
			semconv.MessagingDestinationName(m.Subject()),
			semconv.MessagingMessageBodySize(len(m.Data())),
			attribute.Int("lane", r.lane),
			attribute.String("dc", r.dc),
			attribute.Int64("sequence", int64(d.Sequence)),
			attribute.Int("images", len(d.Images)),
		))
	return span
}

// submitFaultKind names a SubmitDelta refusal for the fault metric.
func submitFaultKind(err error) string {
	var ie *consumer.IngestionError
	if errors.As(err, &ie) {
		return "submit_" + ingestionKindLabel(ie.Kind)
	}
	return "submit"
}

func ingestionKindLabel(k consumer.IngestionErrorKind) string {
	switch k {
	case consumer.ErrLaneRetired:
		return "lane_retired"
	case consumer.ErrAwaitingSnapshot:
		return "awaiting_snapshot"
	case consumer.ErrLaneUnassigned:
		return "lane_unassigned"
	case consumer.ErrSaturated:
		return "saturated"
	case consumer.ErrOutstandingImageLimit:
		return "outstanding_image_limit"
	case consumer.ErrDirtyToAppliedAgeExceeded:
		return "dirty_to_applied_age_exceeded"
	case consumer.ErrControlTimeout:
		return "control_timeout"
	case consumer.ErrWorkerFailed:
		return "worker_failed"
	case consumer.ErrPoolClosed:
		return "pool_closed"
	}
	return "error"
}

// eventTime parses EventTimeHeader.
func eventTime(h nats.Header) (time.Time, bool) {
	v := h.Get(EventTimeHeader)
	if v == "" {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

func (r *laneRunner) handleDrain(ctx context.Context, dm *wire.DrainMarker) (outcome, bool) {
	if act, out, done := r.gate(ctx, wire.KindDrainMarker, &dm.Identity, dm.Lease.Epoch, dm.ExpectedSequence); act != gateApply {
		return out, done
	}
	if r.behind {
		return outcome{}, false
	}
	res, err := r.gen.pool.CompleteDrain(dm.ToCkf(r.cur.lease))
	if err != nil {
		return r.poolRefused(err), true
	}
	if res.Kind != consumer.OutcomeDrainAcknowledged {
		// A drain that exposes a dropped final delta: the pool retired the
		// lane (DeactivateAndSnapshot).
		return outcome{fault: res.Fault.Kind.String(), detail: res.String(), requestSnapshot: true}, true
	}
	r.reached = res.InstalledSequence
	r.setInstalled(r.cur.epoch, res.InstalledSequence)
	return outcome{healthy: true}, false
}

// handleHeartbeat tells the lane its installed epoch is still alive (the
// gate records it) or that it is not, and checks the sequence the relay
// says it published against the one the lane reached.
//
// The relay publishes a heartbeat only after every delta before it is
// stored, on the same lane filter the ordered consumer reads in stream
// order, so by the time a heartbeat is handled every delta it covers has
// been admitted (admission is in order; application may still be queued,
// which the pool orders behind them). Any difference is therefore a hole
// in the stream (retention or a purge dropped deltas after the lane's
// position) or a relay that went back: a gap, as a drain marker's
// mismatch is, but one an idle relay would otherwise leave unseen until
// its next delta.
func (r *laneRunner) handleHeartbeat(ctx context.Context, hb *wire.Heartbeat) (outcome, bool) {
	if act, out, done := r.gate(ctx, wire.KindHeartbeat, &hb.Identity, hb.Lease.Epoch, hb.Sequence); act != gateApply {
		return out, done
	}
	switch {
	case r.behind:
		r.askAgain(ctx)
		return outcome{}, false
	case r.awaiting != 0 || hb.Sequence == r.reached:
		// Awaiting a newer epoch's marker: already out of the ready set.
		return outcome{}, false
	}
	return r.heartbeatGap(ctx, hb.Sequence)
}

// heartbeatGap takes the lane out of the ready set after a heartbeat of
// its epoch at sequence seq, which it never reached. With a newer marker
// on the lane than the installed one (an active lane skips forward
// snapshots of its epoch), the lane bootstraps from it. Otherwise
// bootstrapping would install the same marker, replay the same hole and
// meet the same heartbeat: the lane asks for a snapshot and goes on
// consuming, out of the ready set, until a marker arrives (behind).
func (r *laneRunner) heartbeatGap(ctx context.Context, seq uint64) (outcome, bool) {
	r.gen.pool.Indexer().RetireLaneReadiness(r.lane)
	detail := fmt.Sprintf("heartbeat of epoch %d at sequence %d; the lane reached sequence %d", r.cur.epoch, seq, r.reached)
	at, err := r.latestMarker(ctx)
	if err != nil || at.streamSeq != r.cur.streamSeq {
		// A newer marker to bootstrap from, or none readable now
		// (bootstrap retries with backoff; the request helps then).
		return outcome{fault: faultHeartbeatGap, detail: detail, requestSnapshot: err != nil}, true
	}
	r.behind = true
	r.m.fault(faultHeartbeatGap)
	r.log.Warn().Uint64("epoch", r.cur.epoch).Uint64("heartbeat_sequence", seq).Uint64("reached", r.reached).
		Msg("heartbeat ahead of the lane: deltas missing from the stream; out of the ready set until a snapshot")
	r.setStatus(PhaseAwaitingSnapshot, faultHeartbeatGap+": "+detail+"; asked for a snapshot")
	r.askedAt = r.svc.now()
	r.requestSnapshot(ctx)
	return outcome{}, false
}

// askAgain repeats a waiting lane's snapshot request at most once per
// BootstrapBackoffMax, as often as failing bootstraps would ask at most
// (a relay coalesces requests; one restarting may miss one).
func (r *laneRunner) askAgain(ctx context.Context) {
	if now := r.svc.now(); now.Sub(r.askedAt) >= r.svc.cfg.BootstrapBackoffMax {
		r.askedAt = now
		r.requestSnapshot(ctx)
	}
}

func (r *laneRunner) handleMarker(ctx context.Context, m jetstream.Msg, sm *wire.SnapshotMarker) (outcome, bool) {
	switch act, out, done := r.gate(ctx, wire.KindSnapshotMarker, &sm.Identity, sm.Lease.Epoch, sm.Sequence); act {
	case gateDone:
		return out, done
	case gateApply:
		if !r.behind {
			return outcome{}, false // an active lane skips forward snapshots
		}
		// The marker the lane behind its relay waits for.
	}
	meta, err := m.Metadata()
	if err != nil {
		return outcome{fault: "metadata", detail: err.Error()}, true
	}
	r.log.Info().Uint64("epoch", sm.Lease.Epoch).Uint64("current_epoch", r.cur.epoch).
		Uint64("sequence", sm.Sequence).Msg("newer producer epoch; switching")
	return outcome{next: &markerAt{marker: *sm, streamSeq: meta.Sequence.Stream, stored: meta.Timestamp}}, true
}
