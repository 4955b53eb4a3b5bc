package queryapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/promx"
)

// RouteBackend answers routes; the indexer service implements it. A
// Backend that does not has no POST /v1/route.
type RouteBackend interface {
	// Route ranks the DCs for q under o; api.ErrUnavailable when no lane
	// is eligible, a *api.RequestError for an unusable option.
	Route(q api.Query, o api.RouteOptions) (api.RouteResponse, error)
}

// MetricRouteDuration is the route latency histogram.
const MetricRouteDuration = "ckf_api_route_duration_seconds"

// routeBody decodes a route request: a JSON body carries its options,
// a binary one (api.ContentTypeSeqHashes) takes them, and its model, from
// rawOptions (the URL's query over HTTP, api.HeaderRouteOptions over
// NATS), which a JSON body must not have.
func routeBody(ctx context.Context, b RouteBackend, m *Metrics, kind bodyKind, body []byte, rawOptions string) (api.RouteResponse, int, error) {
	var (
		q   api.Query
		o   api.RouteOptions
		err error
	)
	if kind == bodySeqHashes {
		if q, err = api.DecodeSeqHashes(body); err == nil {
			if rawOptions, err = modelFromQuery(kind, &q, rawOptions); err == nil {
				o, err = api.ParseRouteOptions(rawOptions)
			}
		}
	} else if rawOptions != "" {
		err = &api.RequestError{Reason: "a JSON route request carries its options in the body"}
	} else {
		q, o, err = api.DecodeRouteBody(body)
	}
	if err != nil {
		m.Requests.WithLabelValues("route", "bad_request").Inc()
		return api.RouteResponse{}, http.StatusBadRequest, err
	}
	start := time.Now()
	resp, err := b.Route(q, o)
	promx.Observe(m.RouteLatency, time.Since(start).Seconds(), trace.SpanContextFromContext(ctx))
	var re *api.RequestError
	switch {
	case err == nil:
		m.Requests.WithLabelValues("route", "ok").Inc()
		return resp, http.StatusOK, nil
	case errors.Is(err, api.ErrUnavailable):
		m.Requests.WithLabelValues("route", "unavailable").Inc()
		return api.RouteResponse{}, http.StatusServiceUnavailable, err
	case errors.Is(err, api.ErrUnknownDomain):
		m.Requests.WithLabelValues("route", "unknown_domain").Inc()
		return api.RouteResponse{}, http.StatusNotFound, err
	case errors.As(err, &re):
		m.Requests.WithLabelValues("route", "bad_request").Inc()
		return api.RouteResponse{}, http.StatusBadRequest, err
	}
	m.Requests.WithLabelValues("route", "error").Inc()
	return api.RouteResponse{}, http.StatusInternalServerError, err
}

// Route is Match for routes: the NATS endpoint's decoding (rawOptions is
// the api.HeaderRouteOptions header) and the status each error maps to.
func Route(ctx context.Context, b RouteBackend, m *Metrics, contentType, rawOptions string, body []byte) (api.RouteResponse, int, error) {
	kind, err := classifyBody(contentType)
	if err != nil {
		m.Requests.WithLabelValues("route", "unsupported_media_type").Inc()
		return api.RouteResponse{}, http.StatusUnsupportedMediaType, err
	}
	if limit := maxBodyFor(kind, api.MaxRequestBytes); int64(len(body)) > limit {
		m.Requests.WithLabelValues("route", "too_large").Inc()
		return api.RouteResponse{}, http.StatusRequestEntityTooLarge, tooLargeError(limit)
	}
	return routeBody(ctx, b, m, kind, body, rawOptions)
}
