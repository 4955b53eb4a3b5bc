package follow

import (
	"strconv"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/testenv"

	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// Every per-lane series carries lane and dc; the latency histogram carries
// the lane apply's trace as exemplar; the lane's series are gone once the
// service (and so the lane) is gone, while the registry lives on.
func TestLaneSeriesAreLabelledCarryExemplarsAndGoAwayWithTheLane(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(testCtx(t)) })
	cfg := testConfig(t)
	cfg.Tracer = tp
	s := startService(t, e.nc, e.js, cfg)
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())

	ctx, parent := tp.Tracer("relay").Start(testCtx(t), "relay.publish")
	r.traceCtx, r.eventTime = ctx, time.Now()
	r.apply(storeChain(1, chain(5, 3), 0, 3))
	parent.End()
	lane := strconv.Itoa(r.lane)
	testenv.WaitFor(t, waitTotal, "condition not met", func() bool { return metricCount(s.reg, MetricEventToQueryable, lane) > 0 })

	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	perLane := 0
	var exemplar *dto.Exemplar
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if _, ok := labels["lane"]; !ok {
				continue
			}
			perLane++
			if labels["lane"] != lane || labels["dc"] != "dc-a" {
				t.Errorf("%s %v: want lane %s and dc dc-a", mf.GetName(), labels, lane)
			}
			if mf.GetName() == MetricEventToQueryable {
				for _, b := range m.GetHistogram().GetBucket() {
					if b.GetExemplar() != nil {
						exemplar = b.GetExemplar()
					}
				}
			}
		}
	}
	if perLane < 5 {
		t.Fatalf("%d per-lane series", perLane)
	}
	if exemplar == nil || len(exemplar.GetLabel()) != 1 || exemplar.GetLabel()[0].GetName() != "trace_id" ||
		exemplar.GetLabel()[0].GetValue() != parent.SpanContext().TraceID().String() {
		t.Fatalf("latency exemplar %v, want trace_id %s", exemplar, parent.SpanContext().TraceID())
	}

	s.stop(t)
	if v, ok, _ := promtest.Value(s.reg, `{lane="`+lane+`"}`); ok {
		t.Fatalf("lane series left after the lane went away (sum %v):\n%s", v, promtest.Text(s.reg))
	}
	if _, ok, _ := promtest.Value(s.reg, MetricWorkerFailures); !ok {
		t.Fatal("service-wide series removed too")
	}
}
