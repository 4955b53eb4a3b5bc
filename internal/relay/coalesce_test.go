package relay_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// perEventLane is the lane a relay would publish with one delta per
// event: each event's images applied to words and, as a consumer does, to
// a lane of a consumer.Indexer.
type perEventLane struct {
	state *producer.State
	pub   *producer.Publisher
	words []uint64
	sent  int // deltas published
	into  *consumer.LaneIngestor
	err   error
}

func (l *perEventLane) Enqueue(d ckf.Delta) error {
	for _, im := range d.Images {
		l.words[im.Bucket] = im.Value
	}
	if out := l.into.ApplyDelta(&d); out.Kind != consumer.OutcomeDeltaApplied && l.err == nil {
		l.err = fmt.Errorf("per-event delta %d: %v", d.Sequence, out)
	}
	l.sent++
	return nil
}

// newPerEventLane publishes as id under lease into ing, which it
// assigns and gives the lane's first (empty) snapshot.
func newPerEventLane(t *testing.T, cfg ckf.Config, id ckf.ProducerIdentity, lease ckf.LaneLease, ing *consumer.LaneIngestor) *perEventLane {
	t.Helper()
	cfg.PublishEveryNEvents = 1 << 62
	s, err := producer.NewState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &perEventLane{state: s, words: make([]uint64, len(s.Words())), into: ing}
	l.pub = producer.NewPublisher(id, 0, l)
	snap, err := l.pub.SnapshotAfterBarrier(s, lease)
	if err != nil {
		t.Fatal(err)
	}
	if err := ing.Assign(id, lease); err != nil {
		t.Fatal(err)
	}
	if out := ing.InstallSnapshot(snap); out.Kind != consumer.OutcomeSnapshotInstalled {
		t.Fatalf("per-event lane snapshot: %v", out)
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
// consumer does: a consumer.Indexer ingests it on one lane (its sequence
// and lease rules accept every delta) and the one-delta-per-event lane on
// another. After every delta the table equals the per-event lane's after
// some prefix of the events, and both lanes give every replayed request
// the same depth; the lanes end at the same state, with fewer messages.
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

	// A real consumer: lane 0 ingests the coalesced lane as the indexer
	// does (its sequence and lease rules decide), lane 1 is given the
	// per-event lane's table at each boundary; both answer the same
	// queries.
	cx := newTwoLaneConsumer(t, cfg.CKF)
	ref := newPerEventLane(t, cfg.CKF, cx.id1, cx.lease1, cx.lane1)
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
			obj := snapshotObjects(t, js)
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
			cx.install(t, m.Identity, m.Sequence, words)
			cx.sameAnswers(t, steps, "at the snapshot")
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
			cx.apply(t, &d)
			cx.sameAnswers(t, steps, fmt.Sprintf("after delta %d", d.Sequence))
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
	if ref.err != nil {
		t.Fatal(ref.err)
	}
	if !slices.Equal(ref.words, words) {
		t.Fatal("the coalesced lane ends at another table than the per-event lane")
	}
	cx.sameAnswers(t, steps, "at the end")
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

// twoLaneConsumer is a consumer.Indexer whose lane 0 follows the relay's
// lane and lane 1 holds a reference table.
type twoLaneConsumer struct {
	ix      *consumer.Indexer
	lane0   *consumer.LaneIngestor
	lane1   *consumer.LaneIngestor
	lease0  ckf.LaneLease
	id1     ckf.ProducerIdentity
	lease1  ckf.LaneLease
	scratch consumer.QueryScratch
	out     consumer.QueryResult
}

func newTwoLaneConsumer(t *testing.T, cfg ckf.Config) *twoLaneConsumer {
	t.Helper()
	format, err := cfg.Format()
	if err != nil {
		t.Fatal(err)
	}
	dom, err := ckf.DomainFromName(domain)
	if err != nil {
		t.Fatal(err)
	}
	var pools [ckf.LaneCount]*ckf.PoolID
	pools[0] = &ckf.PoolID{Domain: dom, Dc: ckf.DcIDFromName("a")}
	pools[1] = &ckf.PoolID{Domain: dom, Dc: ckf.DcIDFromName("reference")}
	m, err := consumer.NewManifest(1, dom, format, pools)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := consumer.NewIndexer(m, ckf.DefaultPrefixSearchConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := &twoLaneConsumer{ix: ix}
	if c.lane0, err = ix.ClaimLane(0); err != nil {
		t.Fatal(err)
	}
	if c.lane1, err = ix.ClaimLane(1); err != nil {
		t.Fatal(err)
	}
	c.lease0 = ckf.LaneLease{ConsumerInstance: 1, PhysicalLane: 0, AssignmentEpoch: 1}
	c.lease1 = ckf.LaneLease{ConsumerInstance: 1, PhysicalLane: 1, AssignmentEpoch: 1}
	c.id1 = ckf.ProducerIdentity{Pool: *pools[1], ProducerIncarnation: 1, LayoutGeneration: 1, Format: format}
	return c
}

// install assigns lane 0 to the relay's identity and installs its
// snapshot.
func (c *twoLaneConsumer) install(t *testing.T, id ckf.ProducerIdentity, seq uint64, words []uint64) {
	t.Helper()
	if err := c.lane0.Assign(id, c.lease0); err != nil {
		t.Fatal(err)
	}
	if out := c.lane0.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: c.lease0, Sequence: seq, Buckets: slices.Clone(words)}); out.Kind != consumer.OutcomeSnapshotInstalled {
		t.Fatalf("snapshot: %v", out)
	}
}

// apply ingests one of the relay's deltas on lane 0.
func (c *twoLaneConsumer) apply(t *testing.T, d *wire.Delta) {
	t.Helper()
	cd := d.ToCkf(c.lease0)
	if out := c.lane0.ApplyDelta(&cd); out.Kind != consumer.OutcomeDeltaApplied {
		t.Fatalf("delta %d→%d: %v", d.BaseSequence, d.Sequence, out)
	}
}

// sameAnswers checks that every request of steps gets the same depth
// from both lanes.
func (c *twoLaneConsumer) sameAnswers(t *testing.T, steps []replay.Step, when string) {
	t.Helper()
	for _, st := range steps {
		if err := c.ix.FindPrefixMatches(st.Locals, &c.scratch, &c.out); err != nil {
			t.Fatal(err)
		}
		if a, b := c.out.Lanes[0], c.out.Lanes[1]; !a.Present || !b.Present || a.Depth != b.Depth {
			t.Fatalf("%s, request %d: coalesced lane %+v, per-event lane %+v", when, st.Index, a, b)
		}
	}
}
