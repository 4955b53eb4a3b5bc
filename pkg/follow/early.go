package follow

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"

	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Early deltas (docs/protocol.md, "Early deltas").
//
// A relay publishes each delta on its lane subject, where JetStream stores
// it; the NATS server also hands the same message at once to every core
// subscription on that subject. The lane stream stays the record: a lane
// bootstraps from it, resumes on it and judges every rule on its stored
// copies. The core copy only lets the runner admit the next delta of its
// installed epoch a JetStream hop earlier. Each one admitted early is
// remembered by its sequence and a keyed hash of its bytes until its stored
// copy arrives: the same bytes confirm it (and are not submitted again),
// other bytes, or a stored delta beyond it, mean what the table holds is
// not what the stream says, and the lane leaves the ready set and
// bootstraps again from the stream. A core copy that arrives out of turn,
// from another epoch or while the lane waits for a snapshot is ignored: its
// stored copy is handled as if there were no early path.

// maxEarlyPending bounds the deltas admitted early and not yet confirmed by
// their stored copies: a lane whose stream delivery falls that far behind
// the core copies stops admitting early ones until it catches up.
const maxEarlyPending = 1024

// earlyBuffer is how many core copies wait for the run goroutine; more
// are dropped (their stored copies still come).
const earlyBuffer = 256

// faultEarlyDiverged is the fault kind of a lane whose stored deltas
// disagree with what it admitted from their core copies.
const faultEarlyDiverged = "early_delta_diverged"

// Outcomes of MetricEarlyDeltas.
const (
	earlyAdmitted  = "admitted"
	earlyConfirmed = "confirmed"
	earlySkipped   = "skipped"
	earlyDropped   = "dropped"
	earlyDiverged  = "diverged"
)

// DefaultEarlyConfirmWithin is how long a delta admitted early may wait
// for its stored copy before the lane asks the stream whether it holds it:
// the relay's own publish deadline, after which the relay has given the
// delta up (and its epoch with it).
const DefaultEarlyConfirmWithin = 5 * time.Second

// earlyDelta is a delta admitted from its core copy, awaiting its stored
// copy.
type earlyDelta struct {
	seq uint64
	sum uint64
	at  time.Time // when it was admitted (Service.now)
}

// earlySub is a lane's core subscription to its delta subject while the
// lane consumes.
type earlySub struct {
	sub  *nats.Subscription
	msgs chan *nats.Msg
}

func (e *earlySub) stop() {
	if e != nil && e.sub != nil {
		_ = e.sub.Unsubscribe()
	}
}

// channel is nil (never ready) without a subscription.
func (e *earlySub) channel() <-chan *nats.Msg {
	if e == nil {
		return nil
	}
	return e.msgs
}

// openEarly subscribes to the lane's delta subject on the service's
// connection. The callback never blocks the connection's delivery: a full
// buffer drops the copy. It returns nil when early deltas are off or the
// subscription failed (logged; the lane then admits stored copies only).
// A subscription the server refuses for want of permission is reported
// asynchronously, by the connection's error handler.
func (r *laneRunner) openEarly() *earlySub {
	if r.svc.cfg.StoredDeltasOnly {
		return nil
	}
	e := &earlySub{msgs: make(chan *nats.Msg, earlyBuffer)}
	sub, err := r.svc.nc.Subscribe(r.subj.Delta, func(m *nats.Msg) {
		select {
		case e.msgs <- m:
		default:
			r.m.early(earlyDropped)
		}
	})
	if err != nil {
		r.log.Warn().Err(err).Str("subject", r.subj.Delta).Msg("core subscription for early deltas failed; admitting stored deltas only")
		return nil
	}
	e.sub = sub
	return e
}

// earlySum is the keyed hash a stored copy is compared with. The key is
// the service's own, so nobody who can publish on the lane can make other
// bytes hash alike.
func (r *laneRunner) earlySum(data []byte) uint64 {
	return maphash.Bytes(r.svc.earlySeed, data)
}

// handleEarly admits a delta's core copy when it is exactly the next delta
// of the installed epoch and identity; anything else is skipped.
func (r *laneRunner) handleEarly(ctx context.Context, m *nats.Msg) (outcome, bool) {
	if r.awaiting != 0 || r.behind || len(r.early) >= maxEarlyPending {
		r.m.early(earlySkipped)
		return outcome{}, false
	}
	data := m.Data
	if kind, err := wire.PeekKind(data); err != nil || kind != wire.KindDelta {
		r.m.early(earlySkipped)
		return outcome{}, false
	}
	d, err := wire.DecodeDelta(data)
	if err != nil {
		// Its stored copy is refused and counted as malformed.
		r.m.early(earlySkipped)
		return outcome{}, false
	}
	next := r.reached + uint64(len(r.early))
	if r.classify(&d.Identity, d.Lease.Epoch) != trafficCurrent || d.BaseSequence != next || d.Sequence != next+1 {
		r.m.early(earlySkipped)
		return outcome{}, false
	}
	cd := d.ToCkf(r.cur.lease)
	pctx := propagation.TraceContext{}.Extract(ctx, streams.HeaderCarrier(m.Header))
	span := r.startApplySpan(pctx, m.Subject, len(data), &d)
	err = r.gen.pool.SubmitDelta(&cd)
	admitted := time.Now()
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if err != nil {
		return r.poolRefused(err), true
	}
	r.early = append(r.early, earlyDelta{seq: d.Sequence, sum: r.earlySum(data), at: r.svc.now()})
	r.m.early(earlyAdmitted)
	r.m.deltas.Inc()
	r.m.images.Add(float64(len(d.Images)))
	r.setInstalled(r.cur.epoch, d.Sequence)
	if t, ok := eventTime(m.Header); ok {
		if lat := admitted.Sub(t); lat >= 0 {
			r.m.observeLatency(lat.Seconds(), span.SpanContext())
		}
	}
	return outcome{}, false
}

// confirmEarly matches a stored delta of the installed epoch against the
// deltas admitted early. handled is false when none is pending or the
// stored delta precedes them (a duplicate: handled as before). The oldest
// pending one with the same bytes is confirmed; a stored delta with other
// bytes, or beyond it (the stream never stored the early one), retires
// the lane's readiness and makes it bootstrap again.
func (r *laneRunner) confirmEarly(seq uint64, data []byte) (out outcome, done, handled bool) {
	if len(r.early) == 0 || seq < r.early[0].seq {
		return outcome{}, false, false
	}
	head := r.early[0]
	if seq == head.seq && r.earlySum(data) == head.sum {
		r.early = r.early[1:]
		if len(r.early) == 0 {
			r.early = r.early[:0:0]
		}
		r.reached = seq
		r.m.early(earlyConfirmed)
		return outcome{}, false, true
	}
	detail := fmt.Sprintf("stored delta %d differs from the one admitted early", seq)
	if seq != head.seq {
		detail = fmt.Sprintf("stored delta %d follows %d, admitted early but never stored", seq, head.seq)
	}
	return r.earlyDiverged(detail), true, true
}

// checkEarlyAge asks the stream about the oldest delta admitted early once
// it has waited Service.earlyConfirmWithin for its stored copy. A stream
// whose last delta on the lane is of the installed epoch and identity and
// at or past it holds it, and the lane's consumer is only behind; any
// other answer (no delta, an older one, another epoch's, an unreadable
// one) means the stream never stored it: the relay published it under a
// fence the stream refused, and went quiet. Without this check a lane
// would answer with that delta until its relay's next one.
func (r *laneRunner) checkEarlyAge(ctx context.Context) (outcome, bool) {
	if len(r.early) == 0 {
		return outcome{}, false
	}
	head := r.early[0]
	waited := r.svc.now().Sub(head.at)
	if waited < r.svc.earlyConfirmWithin {
		return outcome{}, false
	}
	gctx, cancel := context.WithTimeout(ctx, earlyLookupTimeout)
	defer cancel()
	raw, err := r.svc.res.Lanes.GetLastMsgForSubject(gctx, r.subj.Delta)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		// Unknown: ask again at the next poll.
		r.log.Debug().Err(err).Uint64("sequence", head.seq).Msg("reading the lane's last stored delta failed")
		return outcome{}, false
	default:
		if d, derr := wire.DecodeDelta(raw.Data); derr == nil && d.Lease.Epoch == r.cur.epoch &&
			d.Identity == r.cur.identity && d.Sequence >= head.seq {
			return outcome{}, false
		}
	}
	return r.earlyDiverged(fmt.Sprintf("delta %d, admitted early %s ago, is not in the stream", head.seq, waited.Round(time.Millisecond))), true
}

// earlyLookupTimeout bounds checkEarlyAge's read of the stream.
const earlyLookupTimeout = 2 * time.Second

// earlyDiverged fails the lane closed: its table holds deltas its stream
// does not, so it answers nothing until it bootstrapped again from the
// stream.
func (r *laneRunner) earlyDiverged(detail string) outcome {
	r.m.early(earlyDiverged)
	r.early = nil
	r.gen.pool.Indexer().RetireLaneReadiness(r.lane)
	return outcome{fault: faultEarlyDiverged, detail: detail}
}
