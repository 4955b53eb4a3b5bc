package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

func TestTwoDCsAnswerTheExactDepthPerDC(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	ix := startIndexer(t, nc, js, indexerConfig(t, nil))
	ra := startRelay(t, nc, js, relayConfig(t, "dc-a", "relay-a", nil))
	rb := startRelay(t, nc, js, relayConfig(t, "dc-b", "relay-b", nil))
	w := newWorkload(t, []string{"dc-a", "dc-b"}, 1500, 1)
	w.publish(t, js, 1500)
	over := w.converge(t, ix)
	for i, r := range []*relayProc{ra, rb} {
		testenv.WaitFor(t, settle, "relay applied every event", func() bool { return r.Status().UniqueBlocks == w.rp.Blocks(i) })
	}
	// The indexer started before the relays' first markers: waiting for
	// them is not a fault.
	for _, l := range ix.Lanes() {
		if l.LastFault != "" || l.State != "active" {
			t.Fatalf("lane %+v", l)
		}
	}
	checked := len(w.steps) * 2
	if over*50 > checked {
		t.Fatalf("%d of %d lane answers exceed the exact depth", over, checked)
	}
	t.Logf("%d requests × 2 DCs: no false negative, %d overestimates; dc-a %d blocks, dc-b %d blocks", len(w.steps), over, w.rp.Blocks(0), w.rp.Blocks(1))
	// The best lane is a DC holding the longest prefix, with that depth.
	for _, st := range w.steps {
		resp, err := ix.Match(api.Query{Locals: st.Locals})
		if err != nil {
			t.Fatal(err)
		}
		seqs := ckf.SequenceHashes(nil, st.Locals)
		deepest := max(w.rp.Depth(0, seqs), w.rp.Depth(1, seqs))
		switch {
		case deepest == 0 && resp.Best != nil:
			t.Fatalf("step %d: best %+v but no DC holds the prefix", st.Index, resp.Best)
		case deepest > 0 && (resp.Best == nil || int(resp.Best.Depth) < deepest):
			t.Fatalf("step %d: best %+v, a DC holds %d blocks", st.Index, resp.Best, deepest)
		}
	}
}

func TestIndexerRestartCatchesUpFromTheStream(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	ix := startIndexer(t, nc, js, indexerConfig(t, nil))
	startRelay(t, nc, js, relayConfig(t, "dc-a", "relay-a", nil))
	startRelay(t, nc, js, relayConfig(t, "dc-b", "relay-b", nil))
	w := newWorkload(t, []string{"dc-a", "dc-b"}, 1200, 2)
	w.publish(t, js, 600)
	w.converge(t, ix)
	ix.stop(t)
	w.publish(t, js, 600) // while no indexer runs
	ix2 := startIndexer(t, nc, js, indexerConfig(t, nil))
	w.converge(t, ix2)
}

func TestRelayKillAndRestartTakesANewEpochAndConsumersConverge(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	ix := startIndexer(t, nc, js, indexerConfig(t, nil))
	ra := startRelay(t, nc, js, relayConfig(t, "dc-a", "relay-a", nil))
	startRelay(t, nc, js, relayConfig(t, "dc-b", "relay-b", nil))
	w := newWorkload(t, []string{"dc-a", "dc-b"}, 1200, 3)
	w.publish(t, js, 500)
	w.converge(t, ix)
	lane1, _ := laneOf(ix, "dc-a")
	epoch1 := ra.Status().Epoch
	ra.stop(t)
	w.publish(t, js, 700) // dc-a's events wait in JetStream
	ra2 := startRelay(t, nc, js, relayConfig(t, "dc-a", "relay-a-2", nil))
	testenv.WaitFor(t, settle, "relay restarted", func() bool { return ra2.Status().State == relay.StateActive })
	if ra2.Status().Epoch <= epoch1 {
		t.Fatalf("epoch %d after %d", ra2.Status().Epoch, epoch1)
	}
	w.converge(t, ix)
	lane2, _ := laneOf(ix, "dc-a")
	if lane2.Epoch <= lane1.Epoch || lane2.State != "active" {
		t.Fatalf("lane before %+v after %+v", lane1, lane2)
	}
}

func TestTwoRelaysForOnePoolOnePublishesAndTheStandbyTakesOver(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	ix := startIndexer(t, nc, js, indexerConfig(t, nil))
	r1 := startRelay(t, nc, js, relayConfig(t, "dc-a", "relay-a-1", nil))
	testenv.WaitFor(t, settle, "first relay active", func() bool { return r1.Status().State == relay.StateActive })
	r2 := startRelay(t, nc, js, relayConfig(t, "dc-a", "relay-a-2", nil))
	testenv.WaitFor(t, settle, "second relay standing by", func() bool { return r2.Status().State == relay.StateStandby })
	w := newWorkload(t, []string{"dc-a"}, 800, 4)
	w.publish(t, js, 400)
	w.converge(t, ix)
	if r2.Status().State != relay.StateStandby || r2.Status().Sequence != 0 {
		t.Fatalf("standby published: %+v", r2.Status())
	}
	// Every lane message so far carries the active relay's epoch.
	assertLaneEpochs(t, js, "dc-a", r1.Status().Epoch)
	r1.stop(t)
	testenv.WaitFor(t, settle, "standby took over", func() bool { return r2.Status().State == relay.StateActive })
	w.publish(t, js, 400)
	w.converge(t, ix)
}

func assertLaneEpochs(t *testing.T, js jetstream.JetStream, dc string, epoch uint64) {
	t.Helper()
	ctx := context.Background()
	subj, _ := wire.NewLaneSubjects(domain, dc)
	s, err := js.Stream(ctx, streams.LaneStream)
	if err != nil {
		t.Fatal(err)
	}
	last, err := streams.LastLaneSequence(ctx, s, subj.Filter)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj.Filter}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var got uint64
		switch kind, _ := wire.PeekKind(msg.Data()); kind {
		case wire.KindDelta:
			d, _ := wire.DecodeDelta(msg.Data())
			got = d.Lease.Epoch
		case wire.KindSnapshotMarker:
			m, _ := wire.DecodeSnapshotMarker(msg.Data())
			got = m.Lease.Epoch
		case wire.KindDrainMarker:
			m, _ := wire.DecodeDrainMarker(msg.Data())
			got = m.Lease.Epoch
		case wire.KindHeartbeat:
			h, _ := wire.DecodeHeartbeat(msg.Data())
			got = h.Lease.Epoch
		}
		if got != epoch {
			t.Fatalf("lane message %s carries epoch %d, want %d", msg.Subject(), got, epoch)
		}
		if meta, _ := msg.Metadata(); meta.Sequence.Stream >= last {
			return
		}
	}
}

func TestANewDCJoinsLiveAndMalformedLaneTrafficIsCounted(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := indexerConfig(t, nil)
	ix := startIndexer(t, nc, js, cfg)
	startRelay(t, nc, js, relayConfig(t, "dc-a", "relay-a", nil))
	w := newWorkload(t, []string{"dc-a", "dc-c"}, 1000, 5)
	w.publish(t, js, 500) // dc-c's events wait for a relay that does not exist yet
	w.converge(t, ix, "dc-a")
	if _, ok := laneOf(ix, "dc-c"); ok {
		t.Fatal("dc-c has a lane before its relay registered")
	}
	startRelay(t, nc, js, relayConfig(t, "dc-c", "relay-c", nil))
	w.publish(t, js, 500)
	w.converge(t, ix)

	// Junk on a lane subject: the indexer counts it and keeps the lane; the
	// relay sees a foreign writer on its lane, confirms it still holds its
	// lease and retries after it. Nothing is lost.
	subj, _ := wire.NewLaneSubjects(domain, "dc-a")
	if _, err := js.Publish(context.Background(), subj.Delta, []byte{0x93, 0x01, 0x02}); err != nil {
		t.Fatal(err)
	}
	w.publish(t, js, 0)
	testenv.WaitFor(t, settle, "malformed counted", func() bool {
		_, ok := promtest.Has(ix.Metrics(), `ckf_indexer_malformed_total{lane="0"}`)
		return ok
	})
	w.converge(t, ix)
}

func TestOneTraceCrossesTheNATSHop(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	ix := startIndexer(t, nc, js, indexerConfig(t, tp))
	r := startRelay(t, nc, js, relayConfig(t, "dc-a", "relay-a", tp))
	testenv.WaitFor(t, settle, "relay active", func() bool { return r.Status().State == relay.StateActive })
	testenv.WaitFor(t, settle, "lane active", func() bool { l, ok := laneOf(ix, "dc-a"); return ok && l.State == "active" })

	// A worker publishes one event inside its own span.
	ctx, root := tp.Tracer("worker").Start(context.Background(), "worker.emit")
	msg := nats.NewMsg("kvevents." + domain + ".dc-a.7")
	msg.Data = []byte(`{"worker_id":7,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":11,"tokens_hash":11}]}},"dp_rank":0}}`)
	propagation.TraceContext{}.Inject(ctx, streams.HeaderCarrier(msg.Header))
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	root.End()
	want := root.SpanContext().TraceID()
	var apply, publish, laneApply sdktrace.ReadOnlySpan
	testenv.WaitFor(t, settle, "lane_apply span in the worker's trace", func() bool {
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() != want {
				continue
			}
			switch s.Name() {
			case "ckf.relay.apply_events":
				apply = s
			case "ckf.relay.publish_delta":
				publish = s
			case follow.SpanLaneApply:
				laneApply = s
			}
		}
		return apply != nil && publish != nil && laneApply != nil
	})
	if apply.Parent().SpanID() != root.SpanContext().SpanID() ||
		publish.Parent().SpanID() != apply.SpanContext().SpanID() ||
		laneApply.Parent().SpanID() != publish.SpanContext().SpanID() || !laneApply.Parent().IsRemote() {
		t.Fatalf("span chain broken: apply←%s publish←%s lane_apply←%s", apply.Parent().SpanID(), publish.Parent().SpanID(), laneApply.Parent().SpanID())
	}
}
