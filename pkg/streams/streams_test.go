package streams

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ckfrelay/ckfrelay/testenv"
)

func TestEnsureIsIdempotentAndLaneFilterFencesAZombie(t *testing.T) {
	srv := testenv.StartServer(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Ensure(ctx, js, Options{Memory: true}); err != nil {
		t.Fatal(err)
	}
	res, err := Ensure(ctx, js, Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	const filter = "ckf.d.a.>"
	last, err := LastLaneSequence(ctx, res.Lanes, filter)
	if err != nil || last != 0 {
		t.Fatalf("empty lane: %d %v", last, err)
	}
	// The live relay publishes on two subjects of its lane, each time
	// expecting the lane's last sequence.
	ack, err := js.Publish(ctx, "ckf.d.a.snap", []byte("s"), jetstream.WithExpectLastSequenceForSubject(last, filter))
	if err != nil {
		t.Fatal(err)
	}
	ack2, err := js.Publish(ctx, "ckf.d.a.delta", []byte("d"), jetstream.WithExpectLastSequenceForSubject(ack.Sequence, filter))
	if err != nil {
		t.Fatal(err)
	}
	// Another lane does not disturb this lane's expectation.
	if _, err := js.Publish(ctx, "ckf.d.b.delta", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got, _ := LastLaneSequence(ctx, res.Lanes, filter); got != ack2.Sequence {
		t.Fatalf("last = %d want %d", got, ack2.Sequence)
	}
	// A zombie still holding the older expectation is refused.
	_, err = js.Publish(ctx, "ckf.d.a.delta", []byte("z"), jetstream.WithExpectLastSequenceForSubject(ack.Sequence, filter))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("zombie publish: %v", err)
	}
}

// A plain publisher (no OpenTelemetry, raw header map) sets the W3C names
// in lower case, as every W3C implementation writes them; the carrier must
// read them after a real NATS hop, and what it writes must arrive under the
// exact W3C names.
func TestCarrierInteropWithAPlainPublisher(t *testing.T) {
	srv := testenv.StartServer(t)
	nc := srv.Connect(t)
	sub, err := nc.SubscribeSync("trace.>")
	if err != nil {
		t.Fatal(err)
	}
	const (
		traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		tracestate  = "vendor=opaque"
	)
	plain := &nats.Msg{Subject: "trace.plain", Header: nats.Header{"traceparent": {traceparent}, "tracestate": {tracestate}}}
	if err := nc.PublishMsg(plain); err != nil {
		t.Fatal(err)
	}
	got, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	prop := propagation.TraceContext{}
	ctx := prop.Extract(context.Background(), HeaderCarrier(got.Header))
	sc := spanContextFrom(ctx)
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() || !sc.IsRemote() {
		t.Fatalf("extracted %+v from %v", sc, got.Header)
	}
	if sc.TraceState().String() != tracestate {
		t.Fatalf("tracestate %q", sc.TraceState().String())
	}

	// Our own injection, read back by a consumer that indexes the raw map.
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(ctx, "publish")
	defer span.End()
	out := nats.NewMsg("trace.ours")
	prop.Inject(ctx, HeaderCarrier(out.Header))
	if err := nc.PublishMsg(out); err != nil {
		t.Fatal(err)
	}
	got, err = sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Header) != 2 || got.Header["tracestate"][0] != tracestate {
		t.Fatalf("headers on the wire: %v", got.Header)
	}
	want := "00-" + sc.TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if v := got.Header["traceparent"]; len(v) != 1 || v[0] != want {
		t.Fatalf("traceparent on the wire: %v want %s", got.Header, want)
	}
}

func TestCarrierIgnoresCaseAndKeepsOneCopy(t *testing.T) {
	h := nats.Header{"TraceParent": {"a"}, "Other": {"x"}}
	c := HeaderCarrier(h)
	if c.Get("traceparent") != "a" || c.Get("TRACEPARENT") != "a" || c.Get("tracestate") != "" {
		t.Fatalf("get: %v", h)
	}
	c.Set("Traceparent", "b")
	if len(h) != 2 || h["traceparent"][0] != "b" || h["Other"][0] != "x" {
		t.Fatalf("set: %v", h)
	}
	if len(c.Keys()) != 2 {
		t.Fatalf("keys %v", c.Keys())
	}
	if HeaderCarrier(nil).Get("traceparent") != "" {
		t.Fatal("nil headers")
	}
}

func TestEnsureSplitsTheInputSiteFromTheLaneSiteAndAppliesReplicas(t *testing.T) {
	hub, dc := testenv.StartServer(t).JetStream(t), testenv.StartServer(t).JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := EnsureLanes(ctx, hub, Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != nil || res.Lanes == nil || res.Snapshots == nil {
		t.Fatalf("lane side: %+v", res)
	}
	if _, err := hub.Stream(ctx, EventStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the lane site holds an input stream: %v", err)
	}
	ev, err := EnsureEvents(ctx, dc, Options{Memory: true, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := ev.Info(ctx); err != nil || info.Config.Replicas != 1 {
		t.Fatalf("input stream replicas: %+v %v", info, err)
	}
	if _, err := dc.Stream(ctx, LaneStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the input site holds a lane stream: %v", err)
	}
	// R3 reaches the server: a single non-clustered server refuses it.
	other := testenv.StartServer(t).JetStream(t)
	if _, err := EnsureEvents(ctx, other, Options{Memory: true, Replicas: 3}); err == nil {
		t.Fatal("R3 accepted by a single server: replicas were not requested")
	}
	// The input's own count wins over the hub's: a relay sizing its lanes
	// at R3 still creates its DC's input on a single leaf.
	ev, err = EnsureEvents(ctx, other, Options{Memory: true, Replicas: 3, EventReplicas: 1})
	if err != nil {
		t.Fatalf("R1 input with R3 lanes refused: %v", err)
	}
	if info, err := ev.Info(ctx); err != nil || info.Config.Replicas != 1 {
		t.Fatalf("input stream replicas: %+v %v", info, err)
	}
	for _, n := range []int{-1, 6} {
		if _, err := EnsureLanes(ctx, other, Options{Replicas: n}); !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("replicas %d: %v", n, err)
		}
		if _, err := EnsureEvents(ctx, other, Options{EventReplicas: n}); !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("input replicas %d: %v", n, err)
		}
	}
}
