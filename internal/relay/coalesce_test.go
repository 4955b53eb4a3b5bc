package relay_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/promtest"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/streams"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// perEventLane is the lane a relay would publish with one delta per
// event: each event's images applied to words, one state per event.
type perEventLane struct {
	state *producer.State
	pub   *producer.Publisher
	words []uint64
	sent  int // deltas published
}

func (l *perEventLane) Enqueue(d ckf.Delta) error {
	for _, im := range d.Images {
		l.words[im.Bucket] = im.Value
	}
	l.sent++
	return nil
}

func newPerEventLane(t *testing.T, cfg ckf.Config) *perEventLane {
	t.Helper()
	cfg.PublishEveryNEvents = 1 << 62
	s, err := producer.NewState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &perEventLane{state: s, words: make([]uint64, len(s.Words()))}
	l.pub = producer.NewPublisher(ckf.ProducerIdentity{}, 0, l)
	if _, err := l.pub.SnapshotAfterBarrier(s, ckf.LaneLease{AssignmentEpoch: 1}); err != nil {
		t.Fatal(err)
	}
	return l
}

// apply applies one event and publishes its delta (none when the event
// changed no bucket, as the relay does).
func (l *perEventLane) apply(t *testing.T, ev *routerevent.RouterEvent) {
	t.Helper()
	l.state.ApplyEvent(ev)
	if b := l.state.Flush(); !b.Empty() {
		if _, err := l.pub.Publish(b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestACoalescedLaneDiffersFromOneDeltaPerEventOnlyByItsCount holds the
// relay's deltas in flight while a burst of input is applied, so the
// burst travels merged, then reads the lane back from JetStream as a
// consumer does: every delta continues the sequence under the epoch's
// lease, and after every delta the table equals the one-delta-per-event
// lane after some prefix of the events (the same table, so the same
// answer to every query), ending at the same state with fewer messages.
func TestACoalescedLaneDiffersFromOneDeltaPerEventOnlyByItsCount(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := testConfig("a")
	cfg.HeartbeatInterval = time.Hour // a heartbeat's synchronous flush would wait on the held flight
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	steps := traceEvents(t, 200)
	events, msgs := 0, 0
	for _, st := range steps {
		if len(st.Events) > 0 {
			events += len(st.Events)
			msgs++
		}
	}
	// Flight i is held until the relay applied (i+1)/8 of the burst: a
	// slow lane, made deterministic, so deltas merge many input messages
	// and the lane still has several boundaries to check.
	var flights atomic.Int64
	r, _ := startRelayWith(t, nc, js, cfg, func(r *relay.Relay) {
		relay.SetBeforePublish(r, func(kind wire.MessageKind) error {
			if kind != wire.KindDelta {
				return nil
			}
			target := min(uint64(events), uint64(flights.Add(1))*uint64(events)/8)
			deadline := time.Now().Add(10 * time.Second)
			for promtest.Count(reg, "ckf_relay_events_total") < target && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			return nil
		})
	})
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	publishEvents(t, js, "a", steps)
	testenv.WaitFor(t, 0, "lane at the status sequence", func() bool {
		st := r.Status()
		return st.Events == uint64(events) && promtest.Count(reg, "ckf_relay_deltas_published_total") == st.Sequence
	})
	final := r.Status().Sequence

	ref := newPerEventLane(t, cfg.CKF)
	type pos struct{ step, ev int }
	next := pos{}
	// advance applies reference events until its table equals words.
	advance := func(words []uint64) bool {
		for {
			if slices.Equal(ref.words, words) {
				return true
			}
			for next.step < len(steps) && next.ev >= len(steps[next.step].Events) {
				next = pos{next.step + 1, 0}
			}
			if next.step >= len(steps) {
				return false
			}
			ref.apply(t, &steps[next.step].Events[next.ev])
			next.ev++
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subj, _ := wire.NewLaneSubjects(domain, "a")
	lanes, err := js.Stream(ctx, streams.LaneStream)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := lanes.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj.Filter}})
	if err != nil {
		t.Fatal(err)
	}
	var words []uint64
	var epoch, seq uint64
	deltas := 0
	for seq < final || words == nil {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("lane read at sequence %d of %d: %v", seq, final, err)
		}
		switch kind, _ := wire.PeekKind(msg.Data()); kind {
		case wire.KindSnapshotMarker:
			m, err := wire.DecodeSnapshotMarker(msg.Data())
			if err != nil {
				t.Fatal(err)
			}
			if words != nil {
				t.Fatalf("a second snapshot at sequence %d", m.Sequence)
			}
			obj, err := js.ObjectStore(ctx, wire.SnapshotBucket)
			if err != nil {
				t.Fatal(err)
			}
			body, err := obj.GetBytes(ctx, m.ObjectName)
			if err != nil {
				t.Fatal(err)
			}
			if words, err = wire.DecodeSnapshotBody(body, m.Identity.Format, nil); err != nil {
				t.Fatal(err)
			}
			epoch, seq = m.Lease.Epoch, m.Sequence
			if !advance(words) {
				t.Fatal("the epoch's snapshot is no state of the per-event lane")
			}
		case wire.KindDelta:
			d, err := wire.DecodeDelta(msg.Data())
			if err != nil {
				t.Fatal(err)
			}
			if words == nil || d.Lease.Epoch != epoch || d.BaseSequence != seq || d.Sequence != seq+1 {
				t.Fatalf("delta %d→%d epoch %d after sequence %d epoch %d", d.BaseSequence, d.Sequence, d.Lease.Epoch, seq, epoch)
			}
			for _, im := range d.Images {
				words[im.Bucket] = im.Value
			}
			seq = d.Sequence
			deltas++
			if !advance(words) {
				t.Fatalf("after delta %d the table is no state of the per-event lane", d.Sequence)
			}
		}
	}
	// The end: the per-event lane has no event left that changes the table.
	for next.step < len(steps) {
		if next.ev < len(steps[next.step].Events) {
			ref.apply(t, &steps[next.step].Events[next.ev])
			next.ev++
			continue
		}
		next = pos{next.step + 1, 0}
	}
	if !slices.Equal(ref.words, words) {
		t.Fatal("the coalesced lane ends at another table than the per-event lane")
	}
	if !slices.Equal(words, reference(t, cfg.CKF, steps).Words()) {
		t.Fatal("the lane ends at another table than the exact producer state")
	}
	t.Logf("%d events in %d input messages: %d coalesced deltas, %d deltas one per event", events, msgs, deltas, ref.sent)
	if deltas < 4 || deltas >= msgs/4 {
		t.Fatalf("%d deltas for %d input messages (%d one per event): expected a few merged deltas", deltas, msgs, ref.sent)
	}
	if n := promtest.Count(reg, "ckf_relay_delta_events"); n != uint64(deltas) {
		t.Fatalf("ckf_relay_delta_events counted %d cuts, the lane holds %d deltas", n, deltas)
	}
}
