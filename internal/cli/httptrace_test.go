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

	"github.com/ckfrelay/ckfrelay/internal/streams"
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
