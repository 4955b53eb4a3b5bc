package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ckfrelay/ckfrelay/pkg/streams"
)

func TestTraceHTTPStartsServerSpansUnderTheCallersTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/match", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	mux.HandleFunc("GET /metrics", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(TraceHTTP(mux, tp, "global-indexer"))
	defer srv.Close()

	ctx, caller := tp.Tracer("client").Start(context.Background(), "client")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/match", strings.NewReader("{}"))
	hdr := map[string][]string(req.Header)
	propagation.TraceContext{}.Inject(ctx, streams.HeaderCarrier(hdr))
	caller.End()
	for _, r := range []*http.Request{req, mustGet(t, srv.URL+"/metrics"), mustGet(t, srv.URL+"/nowhere")} {
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	var names []string
	var match sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() != trace.SpanKindServer {
			continue
		}
		names = append(names, s.Name())
		if s.Name() == "POST /v1/match" {
			match = s
		}
	}
	if len(names) != 2 || match == nil {
		t.Fatalf("server spans %v: want POST /v1/match and GET unmatched, /metrics untraced", names)
	}
	if match.Parent().SpanID() != caller.SpanContext().SpanID() || match.SpanContext().TraceID() != caller.SpanContext().TraceID() {
		t.Fatal("server span not under the caller's traceparent")
	}
	var status bool
	for _, kv := range match.Attributes() {
		status = status || (kv.Key == "http.response.status_code" && kv.Value.AsInt64() == http.StatusTeapot)
	}
	if !status {
		t.Fatalf("no http.response.status_code: %v", match.Attributes())
	}
}

func mustGet(t *testing.T, url string) *http.Request {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// With tracing off the handler is served as is: no middleware cost.
func TestTraceHTTPWithTracingOffIsTheHandlerItself(t *testing.T) {
	mux := http.NewServeMux()
	if got := TraceHTTP(mux, noop.NewTracerProvider(), "x"); got != http.Handler(mux) {
		t.Fatalf("TraceHTTP wrapped the handler with a no-op provider: %T", got)
	}
}

// An unsampled request gets a non-recording span whose context still
// reaches the handler, so the caller's trace id flows on.
func TestTraceHTTPUnsampledRequestsKeepTheCallersContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.NeverSample()))
	var seen trace.SpanContext
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/match", func(w http.ResponseWriter, r *http.Request) { seen = trace.SpanContextFromContext(r.Context()) })
	srv := httptest.NewServer(TraceHTTP(mux, tp, "global-indexer"))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/match", strings.NewReader("{}"))
	req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if seen.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("handler saw trace %s", seen.TraceID())
	}
	if len(rec.Ended()) != 0 {
		t.Fatalf("an unsampled request recorded %d spans", len(rec.Ended()))
	}
}
