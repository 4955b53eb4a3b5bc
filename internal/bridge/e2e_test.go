package bridge_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/zeebo/xxh3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/internal/engine"
	"github.com/ckfrelay/ckfrelay/internal/engine/enginetest"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// TestTokensQueriesFindExactDepth runs two fake engines, one per
// encoding, through the bridge, relay and indexer: tokens queries answer
// the exact stored prefix depth, and removals shorten it.
func TestTokensQueriesFindExactDepth(t *testing.T) {
	st := newStack(t)
	rng := rand.New(rand.NewPCG(1, 2))
	arr := startEngine(t, enginetest.Config{Format: enginetest.Format{StoredLen: 7}})
	maps := startEngine(t, enginetest.Config{Format: enginetest.Format{Map: true}, Layout: enginetest.LayoutB})
	rb := st.startBridge(t, []bridge.EngineSpec{specFor(1, arr), specFor(2, maps)}, nil)
	rb.waitConnected(t, arr, maps)

	for _, e := range []*enginetest.Engine{arr, maps} {
		a := newRequest(rng, 6)
		b := a.extend(rng, 3, 2)
		publish(t, e, a.store(0, 2))
		publish(t, e, a.store(2, 6), b.store(3, 5))
		st.waitDepth(t, a.tokens, "", 6)
		st.mustDepth(t, b.tokens, "", 5)
		st.mustDepth(t, a.extend(rng, 4, 3).tokens, "", 4)
		st.mustDepth(t, newRequest(rng, 3).tokens, "", 0)
		// Evict a's last two blocks: a's depth drops to 4.
		publish(t, e, engine.Event{Kind: engine.KindRemoved, BlockHashes: a.hashes[4:6], Medium: []byte("GPU")})
		st.waitDepth(t, a.tokens, "", 4)
		st.mustDepth(t, b.tokens, "", 5)
		// AllBlocksCleared from the engine drops everything of the worker.
		publish(t, e, engine.Event{Kind: engine.KindCleared})
		st.waitDepth(t, b.tokens, "", 0)
	}
	if got := metric(rb.reg, `ckf_bridge_gaps_total{outcome="unrecoverable"}`); got != 0 {
		t.Fatalf("%v unrecoverable gaps on a clean run", got)
	}
}

// TestLoraStoreFoundOnlyWithSameLoraName checks the LoRA seed: a store
// carrying lora_name is found by a tokens query with that lora_name only.
func TestLoraStoreFoundOnlyWithSameLoraName(t *testing.T) {
	st := newStack(t)
	rng := rand.New(rand.NewPCG(3, 4))
	e := startEngine(t, enginetest.Config{Format: enginetest.Format{Map: true}})
	rb := st.startBridge(t, []bridge.EngineSpec{specFor(5, e)}, nil)
	rb.waitConnected(t, e)
	a := newRequest(rng, 3)
	ev := a.store(0, 3)
	ev.LoraName = []byte("adapter-a")
	plain := newRequest(rng, 2)
	publish(t, e, ev, plain.store(0, 2))
	st.waitDepth(t, plain.tokens, "", 2)
	st.mustDepth(t, a.tokens, "adapter-a", 3)
	st.mustDepth(t, a.tokens, "", 0)
	st.mustDepth(t, a.tokens, "adapter-b", 0)
	st.mustDepth(t, plain.tokens, "adapter-a", 0)
}

// TestNonDeviceMediumNotIndexedByDefault: CPU and DISK stores stay out of
// the index; --index-host-pinned adds CPU (host-pinned) but not DISK.
func TestNonDeviceMediumNotIndexedByDefault(t *testing.T) {
	st := newStack(t)
	rng := rand.New(rand.NewPCG(5, 6))
	e1 := startEngine(t, enginetest.Config{})
	e2 := startEngine(t, enginetest.Config{})
	rb := st.startBridge(t, []bridge.EngineSpec{specFor(1, e1)}, nil)
	pinned := st.startBridge(t, []bridge.EngineSpec{specFor(2, e2)}, func(c *bridge.Config) {
		c.IndexHostPinned = true
		c.Bucket = "ckf_bridge_pinned"
	})
	rb.waitConnected(t, e1)
	pinned.waitConnected(t, e2)
	for i, e := range []*enginetest.Engine{e1, e2} {
		cpu, disk, gpu := newRequest(rng, 2), newRequest(rng, 2), newRequest(rng, 2)
		cpuEv, diskEv := cpu.store(0, 2), disk.store(0, 2)
		cpuEv.Medium, diskEv.Medium = []byte("CPU"), []byte("DISK")
		publish(t, e, cpuEv, diskEv)
		publish(t, e, gpu.store(0, 2)) // later batch: once visible, the CPU/DISK batch was processed
		st.waitDepth(t, gpu.tokens, "", 2)
		st.mustDepth(t, disk.tokens, "", 0)
		if i == 0 {
			st.mustDepth(t, cpu.tokens, "", 0)
		} else {
			st.mustDepth(t, cpu.tokens, "", 2)
		}
	}
	if got := metric(rb.reg, `ckf_bridge_dropped_events_total{reason="tier"}`); got != 2 {
		t.Fatalf("default bridge dropped %v events by tier, want 2", got)
	}
}

// TestEngineRestartClearsWorkerThenRebuilds restarts the engine (sockets
// drop, sequence back to 0): the worker's old blocks disappear and the new
// incarnation's stores are indexed.
func TestEngineRestartClearsWorkerThenRebuilds(t *testing.T) {
	for _, tc := range []struct {
		name       string
		oldBatches int
	}{{"sequence went back", 3}, {"same sequence other bytes", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStack(t)
			rng := rand.New(rand.NewPCG(7, 8))
			e := startEngine(t, enginetest.Config{Format: enginetest.Format{Map: true}})
			rb := st.startBridge(t, []bridge.EngineSpec{specFor(9, e)}, nil)
			rb.waitConnected(t, e)
			old := make([]request, tc.oldBatches)
			for i := range old {
				old[i] = newRequest(rng, 3)
				publish(t, e, old[i].store(0, 3))
			}
			st.waitDepth(t, old[len(old)-1].tokens, "", 3)
			if err := e.Restart(); err != nil {
				t.Fatal(err)
			}
			fresh := newRequest(rng, 2)
			publish(t, e, fresh.store(0, 2))
			st.waitDepth(t, fresh.tokens, "", 2)
			for _, r := range old {
				st.mustDepth(t, r.tokens, "", 0)
			}
			es := rb.engine(0)
			if es.Restarts != 1 || es.Epoch != 1 {
				t.Fatalf("status after restart: %+v", es)
			}
			if got := metric(rb.reg, `ckf_bridge_worker_clears_total{reason="engine_restart"}`); got != 1 {
				t.Fatalf("%v restart clears", got)
			}
			// The new incarnation keeps going.
			more := fresh.extend(rng, 2, 2)
			publish(t, e, more.store(2, 4))
			st.waitDepth(t, more.tokens, "", 4)
		})
	}
}

// TestGapBeyondReplayBufferIsReported drops more batches than the engine
// buffers: the bridge reports the unrecoverable part (status, metric) and
// clears the worker, then applies what replay still had.
func TestGapBeyondReplayBufferIsReported(t *testing.T) {
	st := newStack(t)
	rng := rand.New(rand.NewPCG(9, 10))
	e := startEngine(t, enginetest.Config{BufferSteps: 3})
	rb := st.startBridge(t, []bridge.EngineSpec{specFor(4, e)}, nil)
	rb.waitConnected(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	if err := e.WaitSubscribed(ctx); err != nil {
		t.Fatal(err)
	}
	before := newRequest(rng, 3)
	publish(t, e, before.store(0, 3)) // seq 0
	st.waitDepth(t, before.tokens, "", 3)
	e.Drop(6) // seqs 1..6 are not sent live; the buffer keeps the last 3
	dropped := make([]request, 6)
	for i := range dropped {
		dropped[i] = newRequest(rng, 2)
		publish(t, e, dropped[i].store(0, 2))
	}
	after := newRequest(rng, 2)
	publish(t, e, after.store(0, 2)) // seq 7, live: gap [1, 7)
	st.waitDepth(t, after.tokens, "", 2)
	// Seqs 1..4 are gone; 5 and 6 came back through replay.
	st.mustDepth(t, before.tokens, "", 0)
	for i, r := range dropped {
		want := 0
		if i >= 4 {
			want = 2
		}
		st.mustDepth(t, r.tokens, "", want)
	}
	es := rb.engine(0)
	if es.Gaps != 1 || es.LastGap == nil || es.LastGap.From != 1 || es.LastGap.To != 5 {
		t.Fatalf("status: gaps=%d last=%+v", es.Gaps, es.LastGap)
	}
	if got := metric(rb.reg, `ckf_bridge_gaps_total{outcome="unrecoverable"}`); got != 1 {
		t.Fatalf("unrecoverable gaps metric %v", got)
	}
	if got := metric(rb.reg, `ckf_bridge_gap_batches_lost_total`); got != 4 {
		t.Fatalf("lost batches metric %v", got)
	}

	// A gap replay can fill is recovered without a clear.
	e.Drop(2)
	fill := []request{newRequest(rng, 2), newRequest(rng, 2), newRequest(rng, 2)}
	for _, r := range fill {
		publish(t, e, r.store(0, 2))
	}
	st.waitDepth(t, fill[2].tokens, "", 2)
	st.mustDepth(t, fill[0].tokens, "", 2)
	st.mustDepth(t, after.tokens, "", 2)
	if got := metric(rb.reg, `ckf_bridge_gaps_total{outcome="recovered"}`); got != 1 {
		t.Fatalf("recovered gaps metric %v", got)
	}
}

// TestBridgeKillMidStreamReplaysWithoutLossOrDuplicates kills the bridge
// (connection dropped, nothing flushed) while the engine keeps
// publishing; a new bridge resumes from the stored position, replays, and
// the stream ends up with every batch exactly once.
func TestBridgeKillMidStreamReplaysWithoutLossOrDuplicates(t *testing.T) {
	st := newStack(t)
	rng := rand.New(rand.NewPCG(11, 12))
	e := startEngine(t, enginetest.Config{Format: enginetest.Format{Map: true}})
	spec := specFor(6, e)
	rb := st.startBridge(t, []bridge.EngineSpec{spec}, nil)
	rb.waitConnected(t, e)
	const total = 300
	reqs := make([]request, total)
	for i := range reqs {
		reqs[i] = newRequest(rng, 2)
	}
	for i := range 150 {
		publish(t, e, reqs[i].store(0, 2))
	}
	// Kill once part of the stream is acknowledged and checkpointed.
	testenv.Eventually(t, settle, time.Millisecond, func() error {
		if a := rb.engine(0).AckedSeq; a == nil || *a < 60 {
			return errNotYet
		}
		if metric(rb.reg, `ckf_bridge_checkpoints_total{outcome="written"}`) < 1 {
			return errNotYet
		}
		return nil
	})
	rb.kill(t)
	ackedBeforeKill := *rb.engine(0).AckedSeq
	for i := 150; i < total; i++ { // published while no bridge listens
		publish(t, e, reqs[i].store(0, 2))
	}
	// A resume point lagging the acknowledgements (as after a kill between
	// two checkpoint writes): batches 31.. are re-sent and must be
	// deduplicated by JetStream.
	const resumeAt = 30
	rewindCheckpoint(t, st.js, spec, e, resumeAt)
	rb2 := st.startBridge(t, []bridge.EngineSpec{spec}, nil)
	testenv.Eventually(t, settle, 5*time.Millisecond, func() error {
		if a := rb2.engine(0).AckedSeq; a == nil || *a != total-1 {
			return errNotYet
		}
		return nil
	})
	if got := metric(rb2.reg, `ckf_bridge_checkpoints_total{outcome="restored"}`); got != 1 {
		t.Fatalf("second bridge did not resume from a stored position (restored=%v)", got)
	}
	for i, r := range reqs {
		if i%10 == 0 || i == total-1 {
			st.waitDepth(t, r.tokens, "", 2)
		}
	}
	if got, want := metric(rb2.reg, "ckf_bridge_deduplicated_publishes_total"), float64(ackedBeforeKill-resumeAt); got < want {
		t.Fatalf("%v re-sent batches deduplicated, want at least %v", got, want)
	}
	// Exactly one KVEVENTS message per engine batch: re-sent batches were
	// deduplicated by their Nats-Msg-Id.
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	s, err := st.js.Stream(ctx, streams.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("kvevents.>"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != total {
		t.Fatalf("KVEVENTS holds %d messages for %d batches", info.State.Msgs, total)
	}
	seen := map[string]bool{}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for range total {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		id := m.Headers().Get("Nats-Msg-Id")
		if !strings.HasPrefix(id, spec.Pub+"#0#") || seen[id] {
			t.Fatalf("message id %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
	}
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}

// rewindCheckpoint stores the resume point of batch seq (its sequence and
// payload digest, as the bridge would have written it).
func rewindCheckpoint(t *testing.T, js jetstream.JetStream, spec bridge.EngineSpec, e *enginetest.Engine, seq uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	kv, err := js.KeyValue(ctx, bridge.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := bridge.CheckpointKey(domain, dc, spec)
	payload, ok := e.Buffered(seq)
	if !ok {
		t.Fatalf("batch %d not buffered", seq)
	}
	v, _ := json.Marshal(map[string]any{"endpoint": spec.Pub, "worker_id": spec.WorkerID, "epoch": 0,
		"has": true, "seq": seq, "digest": xxh3.Hash(payload)})
	if _, err := kv.Put(ctx, key, v); err != nil {
		t.Fatal(err)
	}
}

// TestBridgeStartedBeforeItsEngineConnectsLater: the first dials fail
// (nothing listens yet) and the reconnect loop keeps trying until the
// engine is up.
func TestBridgeStartedBeforeItsEngineConnectsLater(t *testing.T) {
	st := newStack(t)
	rng := rand.New(rand.NewPCG(13, 14))
	pub, rep := freePort(t), freePort(t)
	spec := bridge.EngineSpec{WorkerID: 3, Pub: "tcp://" + pub, Replay: "tcp://" + rep}
	rb := st.startBridge(t, []bridge.EngineSpec{spec}, nil)
	testenv.Eventually(t, settle, 5*time.Millisecond, func() error {
		if metric(rb.reg, "ckf_bridge_reconnects_total") < 2 {
			return errNotYet
		}
		return nil
	})
	e := startEngine(t, enginetest.Config{PubEndpoint: spec.Pub, ReplayEndpoint: spec.Replay})
	rb.waitConnected(t, e)
	r := newRequest(rng, 3)
	publish(t, e, r.store(0, 3))
	st.waitDepth(t, r.tokens, "", 3)
}

// freePort returns a local address nothing listens on (it was free a
// moment ago).
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestMalformedBatchIsCountedAndTheStreamGoesOn: garbage, an unknown
// event type and a batch over an unsupported encoding lose nothing that
// follows.
func TestMalformedBatchIsCountedAndTheStreamGoesOn(t *testing.T) {
	st := newStack(t)
	rng := rand.New(rand.NewPCG(15, 16))
	e := startEngine(t, enginetest.Config{})
	rb := st.startBridge(t, []bridge.EngineSpec{specFor(2, e)}, nil)
	rb.waitConnected(t, e)
	if _, err := e.PublishRaw([]byte{0x93, 0xc1, 0x90}); err != nil {
		t.Fatal(err)
	}
	mystery := []byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x92, 0xa7, 'M', 'y', 's', 't', 'e', 'r', 'y', 0x01, 0x00}
	if _, err := e.PublishRaw(mystery); err != nil {
		t.Fatal(err)
	}
	r := newRequest(rng, 2)
	publish(t, e, r.store(0, 2))
	st.waitDepth(t, r.tokens, "", 2)
	if got := metric(rb.reg, "ckf_bridge_malformed_batches_total"); got != 1 {
		t.Fatalf("malformed batches %v", got)
	}
	if got := metric(rb.reg, `ckf_bridge_dropped_events_total{reason="unknown_event"}`); got != 1 {
		t.Fatalf("unknown events %v", got)
	}
	if es := rb.engine(0); es.Gaps != 0 || es.Batches != 3 {
		t.Fatalf("status %+v", es)
	}
}

// TestPublishCarriesTraceContext: with a tracer, each KVEVENTS message
// carries the W3C context of its ckf.bridge.publish span, which the relay
// continues.
func TestPublishCarriesTraceContext(t *testing.T) {
	st := newStack(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	e := startEngine(t, enginetest.Config{})
	rb := st.startBridge(t, []bridge.EngineSpec{specFor(8, e)}, func(c *bridge.Config) { c.Tracer = tp })
	rb.waitConnected(t, e)
	publish(t, e, engine.Event{Kind: engine.KindCleared})
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	s, err := st.js.Stream(ctx, streams.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	var m *jetstream.RawStreamMsg
	testenv.Eventually(t, settle, 5*time.Millisecond, func() error {
		m, err = s.GetLastMsgForSubject(ctx, "kvevents.bt.dc1.8")
		return err
	})
	tp.ForceFlush(ctx)
	spans := rec.Ended()
	if len(spans) == 0 || spans[0].Name() != "ckf.bridge.publish" {
		t.Fatalf("spans %v", spans)
	}
	want := spans[0].SpanContext().TraceID().String()
	if tp := m.Header.Get("traceparent"); !strings.Contains(tp, want) { // the exact W3C name on the wire
		t.Fatalf("traceparent %q lacks trace %s", tp, want)
	}
}

// TestAnEngineRestartedWhileTheBridgeWasDownIsARestartNotAGap: without a
// replay socket, an engine that restarted while the bridge was down and
// has already passed the bridge's resume point shows up as a jump in the
// sequence. It cannot be told from a gap, so it is handled as a restart:
// a new epoch (new message ids: the old <endpoint>#<epoch>#<seq> ids may
// sit in JetStream's duplicate window and drop the new batches) and a
// cleared worker, then the new incarnation's batches.
func TestAnEngineRestartedWhileTheBridgeWasDownIsARestartNotAGap(t *testing.T) {
	st := newStack(t)
	rng := rand.New(rand.NewPCG(13, 14))
	e := startEngine(t, enginetest.Config{Format: enginetest.Format{Map: true}, ReplayEndpoint: "-"})
	spec := specFor(4, e)
	rb := st.startBridge(t, []bridge.EngineSpec{spec}, nil)
	rb.waitConnected(t, e)
	old := []request{newRequest(rng, 3), newRequest(rng, 3), newRequest(rng, 3)}
	for _, r := range old {
		publish(t, e, r.store(0, 3))
	}
	st.waitDepth(t, old[2].tokens, "", 3)
	testenv.Eventually(t, settle, time.Millisecond, func() error {
		if a := rb.engine(0).AckedSeq; a == nil || *a != 2 {
			return errNotYet
		}
		if metric(rb.reg, `ckf_bridge_checkpoints_total{outcome="written"}`) < 1 {
			return errNotYet
		}
		return nil
	})
	rb.stop(t)
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	for range 6 { // sequences 0..5 of the new incarnation, heard by nobody
		publish(t, e, newRequest(rng, 1).store(0, 1))
	}
	rb2 := st.startBridge(t, []bridge.EngineSpec{spec}, nil)
	rb2.waitConnected(t, e)
	fresh := newRequest(rng, 2)
	if seq := publish(t, e, fresh.store(0, 2)); seq != 6 {
		t.Fatalf("fresh batch at sequence %d, want 6 (past the resume point 2)", seq)
	}
	st.waitDepth(t, fresh.tokens, "", 2)
	for _, r := range old {
		st.mustDepth(t, r.tokens, "", 0)
	}
	es := rb2.engine(0)
	if es.Epoch != 1 || es.Restarts != 1 || es.Gaps != 0 {
		t.Fatalf("status %+v: want epoch 1, one restart, no gap", es)
	}
	if got := metric(rb2.reg, `ckf_bridge_worker_clears_total{reason="engine_restart"}`); got != 1 {
		t.Fatalf("%v restart clears", got)
	}
	// The new batch went out under the new epoch's message id.
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	s, err := st.js.Stream(ctx, streams.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	if id := last.Header.Get(nats.MsgIdHdr); id != spec.Pub+"#1#6" {
		t.Fatalf("last KVEVENTS message id %q, want %q", id, spec.Pub+"#1#6")
	}
}
