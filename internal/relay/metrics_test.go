package relay_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/testenv"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

func TestMetricsCarryTheDCAndPublishExemplars(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(t.Context())
	cfg := testConfig("a")
	cfg.Tracer = tp
	_, js, reg := activeRelay(t, cfg)
	publishEvents(t, js, "a", traceEvents(t, 20))
	testenv.WaitFor(t, 0, "a delta", func() bool { return promtest.Count(reg, "ckf_relay_deltas_published_total") > 0 })
	// A heartbeat samples the lane's occupied slots (State.OccupiedSlots).
	testenv.WaitFor(t, 0, "occupied slots sampled", func() bool {
		v, ok, err := promtest.Value(reg, "ckf_relay_occupied_slots")
		return err == nil && ok && v > 0
	})

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	exemplars := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			dc := ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "dc" {
					dc = lp.GetValue()
				}
			}
			if dc != "a" {
				t.Errorf("%s series without dc=a: %v", mf.GetName(), m.GetLabel())
			}
			if mf.GetName() == "ckf_relay_publish_duration_seconds" {
				for _, b := range m.GetHistogram().GetBucket() {
					for _, l := range b.GetExemplar().GetLabel() {
						exemplars[l.GetValue()] = l.GetName() == "trace_id"
					}
				}
			}
		}
	}
	for _, want := range []string{"ckf_relay_input_pending_messages", "ckf_relay_publish_duration_seconds", "ckf_relay_checkpoint_duration_seconds", "ckf_relay_state"} {
		if !names[want] {
			t.Errorf("no %s", want)
		}
	}
	published := 0
	for _, s := range rec.Ended() {
		if s.Name() == "ckf.relay.publish_delta" && exemplars[s.SpanContext().TraceID().String()] {
			published++
		}
	}
	if published == 0 {
		t.Fatalf("no publish exemplar names a publish span's trace (exemplars %v)", exemplars)
	}

	// A second relay on the same registerer is a configuration error.
	cfg2 := testConfig("a")
	cfg2.Metrics = reg
	_, err = relay.New(nil, nil, cfg2)
	if !errors.Is(err, relay.ErrConfig) || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("duplicate registration: %v", err)
	}
}
