package relay_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// Without a tracer provider the relay builds no spans, but a delta still
// carries the trace context of the input it publishes, as the noop
// tracer's spans would, so a traced engine's trace reaches the indexer.
func TestWithoutATracerTheDeltaCarriesTheInputsTraceContext(t *testing.T) {
	_, js, _ := activeRelay(t, testConfig("a"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	steps := traceEvents(t, 5)
	var sent bool
	for _, st := range steps {
		if len(st.Events) == 0 {
			continue
		}
		b, err := json.Marshal(st.Events)
		if err != nil {
			t.Fatal(err)
		}
		subj, _ := wire.WorkerEventsSubject(domain, "a", st.Worker)
		msg := nats.NewMsg(subj)
		msg.Data = b
		msg.Header.Set("traceparent", tp)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		sent = true
		break
	}
	if !sent {
		t.Fatal("no events to send")
	}
	subj, _ := wire.NewLaneSubjects(domain, "a")
	lanes, err := js.Stream(ctx, streams.LaneStream)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	testenv.WaitFor(t, 0, "a delta", func() bool {
		m, err := lanes.GetLastMsgForSubject(ctx, subj.Delta)
		if err != nil {
			return false
		}
		got = m.Header.Get("traceparent")
		return true
	})
	if got != tp {
		t.Fatalf("delta traceparent %q, want the input's %q", got, tp)
	}
}
