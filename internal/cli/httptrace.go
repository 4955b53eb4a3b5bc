package cli

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// untracedPaths are scraped or probed every few seconds: server spans for
// them would only be noise.
var untracedPaths = map[string]bool{"/metrics": true, "/healthz": true, "/readyz": true}

// TraceHTTP wraps h with OpenTelemetry server spans (W3C trace context
// taken from the request headers). A span is named by the ServeMux pattern
// that serves the request ("POST /v1/match"), so unknown paths do not
// create new span names.
func TraceHTTP(h http.Handler, tp trace.TracerProvider, service string) http.Handler {
	mux, _ := h.(*http.ServeMux)
	return otelhttp.NewHandler(h, service,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithFilter(func(r *http.Request) bool { return !untracedPaths[r.URL.Path] }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if mux != nil {
				if _, pattern := mux.Handler(r); pattern != "" {
					return pattern
				}
			}
			return r.Method + " unmatched"
		}))
}
