package cli

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// untracedPaths are scraped or probed every few seconds: server spans for
// them would only be noise.
var untracedPaths = map[string]bool{"/metrics": true, "/healthz": true, "/readyz": true}

// TraceHTTP wraps h with OpenTelemetry server spans (W3C trace context
// taken from the request headers). A span is named by the ServeMux pattern
// that served the request ("POST /v1/match"), so unknown paths do not
// create new span names; it carries the method, route and response status.
//
// It is deliberately leaner than otelhttp, which cost the match endpoint
// about as much as the match itself: with tracing off (a no-op provider)
// h is returned unwrapped, and an unsampled request pays only for the
// context extraction and a non-recording span.
func TraceHTTP(h http.Handler, tp trace.TracerProvider, service string) http.Handler {
	if tp == nil {
		return h
	}
	if _, off := tp.(noop.TracerProvider); off {
		return h
	}
	tracer := tp.Tracer("github.com/ckfrelay/ckfrelay/internal/cli", trace.WithInstrumentationAttributes(attribute.String("service.name", service)))
	prop := propagation.TraceContext{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if untracedPaths[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		rr := r.WithContext(ctx)
		if !span.IsRecording() {
			h.ServeHTTP(w, rr)
			return
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, rr)
		// ServeMux records the pattern it routed by on the request it
		// was given.
		name := r.Method + " unmatched"
		if rr.Pattern != "" {
			name = rr.Pattern
			span.SetAttributes(attribute.String("http.route", rr.Pattern))
		}
		span.SetName(name)
		span.SetAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("url.path", r.URL.Path),
			attribute.Int("http.response.status_code", sw.status))
		if sw.status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}

// statusWriter records the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
