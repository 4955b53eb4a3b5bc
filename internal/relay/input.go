package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// applyMessage decodes one input message and applies its events; it
// returns the number of events applied. Bad input is counted and logged
// and never stops the relay.
func (e *epochRun) applyMessage(msg jetstream.Msg) int {
	r := e.r
	meta, metaOK := parseAckReply(msg.Reply())
	if metaOK {
		e.inputSeq = meta.streamSeq
		r.mu.Lock() // r.update without a closure per message
		r.status.InputSeq = meta.streamSeq
		r.mu.Unlock()
		r.m.inputPending.Set(float64(meta.pending))
	}
	worker, err := e.subjectWorker(msg.Subject())
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
	span := e.startApplySpan(msg, meta, metaOK, worker, len(evs))
	applied, refused := 0, 0
	rf := refusedSample{m: r.m}
	limit := r.cfg.maxTrackedBlocks()
	for i := range evs {
		ev := &evs[i]
		if ev.WorkerID != worker {
			r.m.badEvents.WithLabelValues("worker_mismatch").Inc()
			r.log.Warn().Uint64("subject_worker", worker).Uint64("event_worker", ev.WorkerID).Msg("event worker id differs from its subject; rejected")
			rf.add(ev, "worker_mismatch")
			continue
		}
		if ev.Event.Data.Kind == routerevent.EventStored && uint64(e.state.UniqueBlocks()) >= limit {
			// Bounded state: refuse growth, keep removals and clears.
			refused++
			rf.add(ev, FaultTrackedBlocks)
			continue
		}
		out := e.state.ApplyEvent(ev)
		applied++
		if out.UnknownRemovals > 0 {
			r.m.unknownRemovals.Add(float64(out.UnknownRemovals))
		}
		if out.ZeroParentRoot {
			r.m.zeroParentRoots.Inc()
		}
		if out.FirstError != nil {
			kind := "other"
			var ee ckf.EventError
			if errors.As(out.FirstError, &ee) {
				kind = ee.FailurePoint().String() + ":" + eventErrorName(ee)
				if ee.FailurePoint() == ckf.PointSourceProtocolFailure {
					// The source's event was refused whole: nothing of it
					// is in the index.
					rf.add(ev, eventErrorName(ee))
				}
			}
			r.m.eventErrors.WithLabelValues(kind).Inc()
			r.log.Debug().Err(out.FirstError).Uint64("worker_id", ev.WorkerID).Uint64("event_id", ev.Event.EventID).Msg("event error")
		}
	}
	e.noteRefusals(worker, len(evs)-rf.n, &rf)
	span.End()
	e.trackLimit(refused, limit)
	if applied > 0 {
		r.m.addEvents(applied)
		if e.oldestEvent.IsZero() && metaOK {
			e.oldestEvent = meta.timestamp
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

// refusedSample is one message's refused events: how many, and the first
// one's reason and identity for the warning.
type refusedSample struct {
	n      int
	reason string
	ev     routerevent.RouterEvent // shallow: only its scalars are logged
	m      *relayMetrics
}

func (rf *refusedSample) add(ev *routerevent.RouterEvent, reason string) {
	if rf.n == 0 {
		rf.reason, rf.ev = reason, *ev
	}
	rf.n++
	rf.m.refusals.WithLabelValues(reason).Inc()
}

// noteRefusals feeds one message's outcome to the refusal tracker: a
// warning (rate-limited per worker) names the reason and one sample, and
// the refused_events fault is raised as soon as most of the worker's
// recent events are refused.
func (e *epochRun) noteRefusals(worker uint64, accepted int, rf *refusedSample) {
	r := e.r
	now := r.now()
	r.refusals.Accept(worker, accepted, now)
	if rf.n == 0 {
		return
	}
	r.update(func(s *Status) { s.Refused += uint64(rf.n) })
	if w, ok := r.refusals.Refuse(worker, rf.n, rf.reason, now); ok {
		lg := r.log.Warn().Uint64("worker_id", worker).Str("reason", rf.reason).Int("refused", rf.n).
			Uint64("suppressed_since_last_warning", w.Suppressed).
			Uint64("sample_event_id", rf.ev.Event.EventID).Uint64("sample_event_worker", rf.ev.WorkerID).
			Str("sample_kind", kindName(rf.ev.Event.Data.Kind))
		if d := &rf.ev.Event.Data; d.Kind == routerevent.EventStored {
			if d.Stored.ParentHash != nil {
				lg = lg.Uint64("sample_parent_hash", *d.Stored.ParentHash)
			}
			if len(d.Stored.Blocks) > 0 {
				lg = lg.Uint64("sample_first_block_hash", d.Stored.Blocks[0].BlockHash).Int("sample_blocks", len(d.Stored.Blocks))
			}
		}
		lg.Msg("events refused: their blocks are missing from the index")
	}
	r.checkRefusals(now)
}

// checkRefusals raises the refused_events fault while some worker has
// most of its recent events refused, and clears it when none has (the
// publish loop also calls it on each heartbeat tick, so it clears when
// a worker goes quiet).
func (r *Relay) checkRefusals(now time.Time) {
	ws := r.refusals.Refusing(now)
	if len(ws) == 0 {
		r.clearFault(FaultRefusedEvents)
		return
	}
	var b strings.Builder
	for i, w := range ws {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more workers", len(ws)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "worker %d: %s", w.Key, w)
	}
	b.WriteString(": their blocks are missing from the index (see docs/operating.md)")
	r.setFault(FaultRefusedEvents, b.String())
}

// startApplySpan starts the apply span of one input message. Without a
// tracer provider (the noop one) it only carries the message's incoming
// trace context on to the lane, as the noop span would, without building
// the span's attributes and context per message.
func (e *epochRun) startApplySpan(msg jetstream.Msg, meta ackMeta, metaOK bool, worker uint64, events int) trace.Span {
	r := e.r
	var ctx context.Context = e.ctx
	if h := msg.Headers(); len(h) > 0 {
		ctx = r.prop.Extract(ctx, streams.HeaderCarrier(h))
	}
	if r.cfg.Tracer == nil {
		return trace.SpanFromContext(ctx)
	}
	_, span := r.tracer.Start(ctx, "ckf.relay.apply_events", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("apply"),
			semconv.MessagingDestinationName(msg.Subject()),
			semconv.MessagingMessageBodySize(len(msg.Data())),
			attribute.String("ckf.dc", r.cfg.DC), attribute.Int64("ckf.worker_id", int64(worker)),
			attribute.Int("ckf.events", events)))
	if metaOK {
		span.SetAttributes(attribute.Int64("ckf.input_sequence", int64(meta.streamSeq)))
	}
	return span
}

// subjectWorker parses an input subject's worker id, remembering the last
// subjects parsed: a pool's input comes from a few workers, their messages
// interleaved.
func (e *epochRun) subjectWorker(subject string) (uint64, error) {
	if w, ok := e.subjects.get(subject); ok {
		return w, nil
	}
	_, _, worker, err := wire.ParseWorkerEventsSubject(subject)
	if err != nil {
		return 0, err
	}
	e.subjects.put(subject, worker)
	return worker, nil
}

// subjectCacheSize is how many workers' subjects subjectCache keeps.
const subjectCacheSize = 8

// subjectCache maps the last subjectCacheSize distinct valid subjects to
// their worker ids, replacing round-robin; a lookup compares strings only.
type subjectCache struct {
	subjects [subjectCacheSize]string
	workers  [subjectCacheSize]uint64
	next     int
}

func (c *subjectCache) get(subject string) (uint64, bool) {
	if subject == "" {
		return 0, false
	}
	for i := range c.subjects {
		if c.subjects[i] == subject {
			return c.workers[i], true
		}
	}
	return 0, false
}

func (c *subjectCache) put(subject string, worker uint64) {
	c.subjects[c.next], c.workers[c.next] = subject, worker
	c.next = (c.next + 1) % subjectCacheSize
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

func kindName(k routerevent.EventKind) string {
	switch k {
	case routerevent.EventStored:
		return "stored"
	case routerevent.EventRemoved:
		return "removed"
	case routerevent.EventCleared:
		return "cleared"
	}
	return "unknown"
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
	own := prefix + strconv.FormatUint(epoch, 10)
	names := events.ConsumerNames(ctx)
	for n := range names.Name() {
		if n == own {
			// Each epoch number is granted once, so a consumer of this
			// name is left from an earlier grant of the same number: the
			// lease bucket's epoch counter started over (a hub that lost
			// its JetStream state). Reusing it would resume where that
			// epoch stopped and the rebuild would wait forever for input
			// it already consumed; it is replaced.
			r.log.Warn().Str("consumer", n).Uint64("epoch", epoch).
				Msg("an input consumer of this epoch number exists already: the epoch counter was reset (a hub that lost its state?); replacing it")
			if err := events.DeleteConsumer(ctx, n); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil, fmt.Errorf("relay: replace stale input consumer %s: %w", n, err)
			}
			continue
		}
		if len(n) > len(prefix) && n[:len(prefix)] == prefix {
			// Only tidying (an idle consumer expires after its inactive
			// threshold): a failure is logged, and one already gone is fine.
			if err := events.DeleteConsumer(ctx, n); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				r.log.Warn().Err(err).Str("consumer", n).Msg("input consumer of an earlier epoch not deleted; it expires when idle")
			}
		}
	}
	cc := jetstream.ConsumerConfig{
		Durable:           own,
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
