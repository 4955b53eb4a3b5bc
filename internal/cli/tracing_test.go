package cli

import (
	"context"
	"flag"
	"io"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/testenv"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// emit starts and ends one root span and flushes the provider.
func emit(t *testing.T, tp trace.TracerProvider, shutdown func(context.Context) error) {
	t.Helper()
	_, span := tp.Tracer("test").Start(context.Background(), "probe")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestTracerExportsOverTLSWithTheResourceLayered(t *testing.T) {
	rcv := testenv.StartOTLPReceiver(t, true)
	t.Setenv("OTEL_SERVICE_NAME", "relay-a")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test,ckf.dc=from-env")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var tr Tracing
	tr.register(fs)
	if err := Parse(fs, []string{"--otlp-endpoint", rcv.URL, "--otlp-ca-file", rcv.CAFile, "--trace-sample-ratio", "1"}, envOf(nil)); err != nil {
		t.Fatal(err)
	}
	tp, shutdown, err := tr.Tracer(context.Background(), Service{Name: "relay-producer", Instance: "r1", Domain: "d", DC: "dc-a"}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	emit(t, tp, shutdown)
	spans := rcv.Spans()
	if len(spans) != 1 || spans[0].Span.GetName() != "probe" {
		t.Fatalf("received %d spans (%d rejected)", len(spans), rcv.Rejected())
	}
	want := map[string]string{
		"service.name":                "relay-a", // OTEL_SERVICE_NAME over the binary's default
		"service.instance.id":         "r1",
		"service.version":             Version(),
		"ckf.domain":                  "d",
		"ckf.dc":                      "dc-a", // the flag over OTEL_RESOURCE_ATTRIBUTES
		"deployment.environment.name": "test",
	}
	for k, v := range want {
		if got := spans[0].Resource[k]; got != v {
			t.Errorf("resource %s = %q want %q", k, got, v)
		}
	}
}

func TestTracerFollowsOTELVariablesUnlessAFlagIsGiven(t *testing.T) {
	rcv := testenv.StartOTLPReceiver(t, false)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	env := envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL, "OTEL_TRACES_SAMPLER": "always_on"})
	tp, shutdown, err := (&Tracing{SampleRatio: 0}).Tracer(context.Background(), Service{Name: "x"}, env)
	if err != nil {
		t.Fatal(err)
	}
	emit(t, tp, shutdown)
	if n := len(rcv.Spans()); n != 1 {
		t.Fatalf("env-configured export: %d spans", n)
	}

	// The flag wins over a dead OTEL_EXPORTER_OTLP_ENDPOINT; a set ratio
	// of 0 wins over OTEL_TRACES_SAMPLER=always_on.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	live := testenv.StartOTLPReceiver(t, false)
	tr := Tracing{OTLPEndpoint: strings.TrimPrefix(live.URL, "http://"), SampleRatio: 1, ratioSet: true}
	tp, shutdown, err = tr.Tracer(context.Background(), Service{Name: "x"}, env)
	if err != nil {
		t.Fatal(err)
	}
	emit(t, tp, shutdown)
	tr.SampleRatio = 0
	tp, shutdown, err = tr.Tracer(context.Background(), Service{Name: "x"}, env)
	if err != nil {
		t.Fatal(err)
	}
	emit(t, tp, shutdown)
	if n := len(live.Spans()); n != 1 {
		t.Fatalf("flag-configured export: %d spans, want the ratio-1 one only", n)
	}
}

func TestTracerWithoutExporterIsNoop(t *testing.T) {
	tp, shutdown, err := (&Tracing{}).Tracer(context.Background(), Service{Name: "x"}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(*sdktrace.TracerProvider); ok {
		t.Fatal("an SDK provider with nowhere to export")
	}
	_ = shutdown(context.Background())
}

func TestTracerRejectsBadSettings(t *testing.T) {
	for name, c := range map[string]struct {
		tr  Tracing
		env map[string]string
	}{
		"tls files on http":  {Tracing{OTLPEndpoint: "http://c:4318", OTLPCAFile: "ca.pem"}, nil},
		"bad scheme":         {Tracing{OTLPEndpoint: "grpc://c:4317"}, nil},
		"missing ca file":    {Tracing{OTLPEndpoint: "c:4318", OTLPCAFile: "/nonexistent.pem"}, nil},
		"cert without key":   {Tracing{OTLPEndpoint: "https://c:4318", OTLPCertFile: "c.pem"}, nil},
		"tls without target": {Tracing{OTLPCAFile: "ca.pem"}, nil},
		"unknown sampler":    {Tracing{OTLPEndpoint: "c:4318"}, map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}},
		"bad sampler arg":    {Tracing{OTLPEndpoint: "c:4318"}, map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}},
	} {
		if _, _, err := c.tr.Tracer(context.Background(), Service{Name: "x"}, envOf(c.env)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var tr Tracing
	tr.register(fs)
	if err := Parse(fs, nil, envOf(map[string]string{"CKFRELAY_TRACE_SAMPLE_RATIO": "1.5"})); err == nil || !strings.Contains(err.Error(), "CKFRELAY_TRACE_SAMPLE_RATIO") {
		t.Fatalf("ratio 1.5: %v", err)
	}
}

func TestSamplerIsParentBasedWithALowRootRatio(t *testing.T) {
	decide := func(s sdktrace.Sampler, parent trace.SpanContext, id trace.TraceID) bool {
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
		return s.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: id, Name: "n"}).Decision == sdktrace.RecordAndSample
	}
	low := trace.TraceID{15: 1}                                                     // ratio position ~0: inside any ratio > 0
	high := trace.TraceID{8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 15: 0xfe} // ~1: outside any ratio < 1
	sampledParent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: high, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true})
	unsampledParent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: low, SpanID: trace.SpanID{1}, Remote: true})

	var tr Tracing
	tr.register(flag.NewFlagSet("t", flag.ContinueOnError))
	s, err := tr.sampler(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !decide(s, trace.SpanContext{}, low) || decide(s, trace.SpanContext{}, high) {
		t.Fatal("default root ratio")
	}
	if !decide(s, sampledParent, high) || decide(s, unsampledParent, low) {
		t.Fatal("default sampler does not follow the parent")
	}
	s, err = tr.sampler(envOf(map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_always_off"}))
	if err != nil || decide(s, trace.SpanContext{}, low) || !decide(s, sampledParent, high) {
		t.Fatalf("OTEL_TRACES_SAMPLER=parentbased_always_off: %v", err)
	}
	s, err = tr.sampler(envOf(map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1"}))
	if err != nil || !decide(s, unsampledParent, high) {
		t.Fatalf("OTEL_TRACES_SAMPLER=traceidratio ignores parents and samples all at 1: %v", err)
	}
}
