package jsx

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

func TestTraceContextRidesInNATSHeaders(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "publish")
	defer span.End()
	msg := nats.NewMsg("x")
	prop := propagation.TraceContext{}
	prop.Inject(ctx, HeaderCarrier(msg.Header))
	got := prop.Extract(context.Background(), HeaderCarrier(msg.Header))
	if sc := spanContextFrom(got); sc.TraceID() != span.SpanContext().TraceID() {
		t.Fatalf("trace id %s want %s", sc.TraceID(), span.SpanContext().TraceID())
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
	for _, n := range []int{-1, 6} {
		if _, err := EnsureLanes(ctx, other, Options{Replicas: n}); !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("replicas %d: %v", n, err)
		}
	}
}
