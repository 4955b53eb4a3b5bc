// Package queryapi serves the indexer's query surface over HTTP: POST
// /v1/match and POST /v1/route (the contract is pkg/api; the NATS micro
// endpoints share Match and Route),
// GET /v1/lanes, /healthz, /readyz, /metrics and the status page at /.
package queryapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/promx"
)

// Backend answers queries; the indexer service implements it.
type Backend interface {
	// Match answers q; ErrUnavailable when no lane is ready.
	Match(q api.Query) (api.MatchResponse, error)
	Lanes() []api.LaneStatus
	Ready() bool
}

// DomainBackend is a Backend serving several domains (models): GET
// /readyz?domain=NAME answers for one of them.
type DomainBackend interface {
	Backend
	// DomainReady reports whether domain is served (known) and ready.
	DomainReady(domain string) (ready, known bool)
}

// domainReady answers /readyz?domain=d: 404 for a domain b does not
// serve (or when b serves one domain only and it is another).
func domainReady(w http.ResponseWriter, b Backend, d string) {
	db, ok := b.(DomainBackend)
	if !ok {
		httpserve.WriteJSON(w, http.StatusNotFound, map[string]string{"status": "this indexer does not serve several domains"})
		return
	}
	ready, known := db.DomainReady(d)
	switch {
	case !known:
		httpserve.WriteJSON(w, http.StatusNotFound, map[string]string{"status": "unknown domain"})
	case !ready:
		httpserve.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "no lane of the domain is active"})
	default:
		httpserve.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}

// Metrics counts API traffic.
type Metrics struct {
	Requests *prometheus.CounterVec
	Latency  prometheus.Histogram
	// RouteLatency is the route latency (search, load and policy).
	RouteLatency prometheus.Histogram
}

// MetricMatchDuration is the match latency histogram.
const MetricMatchDuration = "ckf_api_match_duration_seconds"

// NewMetrics registers the API metrics on reg (a private registry when
// nil).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ckf_api_requests_total", Help: "Query API requests by endpoint and outcome."},
			[]string{"endpoint", "outcome"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricMatchDuration,
			Help:    "Match latency inside the server; exemplars carry the request's trace id.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 20)}),
		RouteLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricRouteDuration,
			Help:    "Route latency inside the server (prefix search, lane load, policy); exemplars carry the request's trace id.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 20)}),
	}
	for _, c := range []prometheus.Collector{m.Requests, m.Latency, m.RouteLatency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// MatchLatency summarises the match latency histogram; the percentiles
// are the upper bounds of the buckets holding them.
func (m *Metrics) MatchLatency() LatencyStats {
	var pb dto.Metric
	if err := m.Latency.Write(&pb); err != nil || pb.GetHistogram().GetSampleCount() == 0 {
		return LatencyStats{}
	}
	h := pb.GetHistogram()
	n := h.GetSampleCount()
	q := func(q float64) time.Duration {
		rank := uint64(math.Ceil(q * float64(n)))
		for _, b := range h.GetBucket() {
			if b.GetCumulativeCount() >= rank {
				return time.Duration(b.GetUpperBound() * float64(time.Second))
			}
		}
		return time.Duration(math.MaxInt64)
	}
	return LatencyStats{Count: n, P50: q(0.5), P99: q(0.99)}
}

// DefaultMaxConcurrentMatches is the default bound on HTTP match requests
// in progress (see Limits).
const DefaultMaxConcurrentMatches = 64

// RetryAfterSeconds is the Retry-After of a match refused for overload.
const RetryAfterSeconds = 1

// Limits bound the resources of the HTTP match endpoint. The zero value
// uses the defaults.
type Limits struct {
	// MaxConcurrentMatches bounds requests being read, decoded or matched
	// at once; one more is answered 429 with Retry-After at once (0 means
	// DefaultMaxConcurrentMatches). Together with MaxBodyBytes it bounds
	// the memory match requests may hold.
	MaxConcurrentMatches int
	// MaxBodyBytes bounds a request body (0 means MaxRequestBytes); a
	// larger one is answered 413.
	MaxBodyBytes int64
	// MaxLargeBodyBytes bounds the bytes held at once by bodies larger
	// than PooledBodyBytes (0 means DefaultMaxLargeBodyBytes). Such a
	// request takes its declared length from this budget before its body
	// is read (a body of unknown length takes MaxBodyBytes once it
	// outgrows a pooled buffer); one that does not fit within
	// LargeBodyWait is answered 429 with Retry-After. Small bodies never
	// wait for it, so a burst of large ones cannot hold up routers.
	MaxLargeBodyBytes int64
	// LargeBodyWait bounds the wait for that budget (0 means
	// DefaultLargeBodyWait).
	LargeBodyWait time.Duration
}

// Defaults of Limits' large-body budget: eight bodies of the largest size
// at once, each decoded in about its own size (pkg/api hashes tokens from
// the body), keep a burst of the largest requests within tens of MiB.
const (
	DefaultMaxLargeBodyBytes = 8 * api.MaxRequestBytes
	DefaultLargeBodyWait     = 5 * time.Second
)

// PooledBodyBytes is the largest read buffer the handler keeps for reuse:
// every ordinary query fits (128 hashes are about 2.5 KB of JSON), and a
// 4 MiB body does not pin 4 MiB in the pool after it is answered.
const PooledBodyBytes = 64 << 10

func (l Limits) withDefaults() Limits {
	if l.MaxConcurrentMatches <= 0 {
		l.MaxConcurrentMatches = DefaultMaxConcurrentMatches
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = api.MaxRequestBytes
	}
	if l.MaxLargeBodyBytes <= 0 {
		l.MaxLargeBodyBytes = DefaultMaxLargeBodyBytes
	}
	// A budget below one body would refuse the largest accepted body.
	l.MaxLargeBodyBytes = max(l.MaxLargeBodyBytes, l.MaxBodyBytes)
	if l.LargeBodyWait <= 0 {
		l.LargeBodyWait = DefaultLargeBodyWait
	}
	return l
}

// Option adjusts Handler.
type Option func(*handlerOptions)

type handlerOptions struct {
	limits Limits
	info   StatusInfo
	now    func() time.Time
}

// WithLimits sets the match endpoint's limits.
func WithLimits(l Limits) Option { return func(o *handlerOptions) { o.limits = l } }

// WithStatusInfo names the indexer on the status page.
func WithStatusInfo(info StatusInfo) Option { return func(o *handlerOptions) { o.info = info } }

// Handler returns the HTTP mux of the API; GET / is the status page.
func Handler(b Backend, m *Metrics, reg prometheus.Gatherer, opts ...Option) http.Handler {
	ho := handlerOptions{now: time.Now}
	for _, o := range opts {
		o(&ho)
	}
	lim := ho.limits.withDefaults()
	slots := make(chan struct{}, lim.MaxConcurrentMatches)
	large := semaphore.NewWeighted(lim.MaxLargeBodyBytes)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", statusHandler(b, m, ho.info, ho.now))
	qh := queryHandler{lim: lim, slots: slots, large: large, m: m}
	mux.HandleFunc("POST /v1/match", qh.serve("match", func(ctx context.Context, kind bodyKind, body []byte, r *http.Request, dst []byte) ([]byte, int, error) {
		q, err := decodeBody(kind, body)
		if err == nil {
			_, err = modelFromQuery(kind, &q, r.URL.RawQuery)
		}
		if err != nil {
			m.Requests.WithLabelValues("match", "bad_request").Inc()
			return nil, http.StatusBadRequest, err
		}
		resp, status, err := matchQuery(ctx, b, m, q)
		if err != nil {
			return nil, status, err
		}
		return resp.AppendJSON(dst), http.StatusOK, nil
	}))
	if rb, ok := b.(RouteBackend); ok {
		mux.HandleFunc("POST /v1/route", qh.serve("route", func(ctx context.Context, kind bodyKind, body []byte, r *http.Request, dst []byte) ([]byte, int, error) {
			resp, status, err := routeBody(ctx, rb, m, kind, body, r.URL.RawQuery)
			if err != nil {
				return nil, status, err
			}
			return resp.AppendJSON(dst), http.StatusOK, nil
		}))
	}
	mux.HandleFunc("GET /v1/lanes", func(w http.ResponseWriter, r *http.Request) {
		m.Requests.WithLabelValues("lanes", "ok").Inc()
		httpserve.WriteJSON(w, http.StatusOK, map[string]any{"lanes": b.Lanes()})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httpserve.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if d := r.URL.Query().Get("domain"); d != "" {
			domainReady(w, b, d)
			return
		}
		if !b.Ready() {
			httpserve.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "no lane is active"})
			return
		}
		httpserve.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	if reg != nil {
		mux.Handle("GET /metrics", promx.Handler(reg))
	}
	return mux
}

// queryHandler is the HTTP side shared by match and route: the bound on
// requests in progress, the media type, the body limits and the
// large-body budget, then answer.
type queryHandler struct {
	lim   Limits
	slots chan struct{}
	large *semaphore.Weighted
	m     *Metrics
}

// answerFunc decodes a body read whole and appends the JSON answer to
// dst, or returns the error and its status (counted by the callee).
type answerFunc func(ctx context.Context, kind bodyKind, body []byte, r *http.Request, dst []byte) ([]byte, int, error)

func (h *queryHandler) serve(endpoint string, answer answerFunc) http.HandlerFunc {
	lim, m := h.lim, h.m
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case h.slots <- struct{}{}:
			defer func() { <-h.slots }()
		default:
			overloaded(w, m, endpoint, &api.RequestError{Reason: fmt.Sprintf("more than %d match requests in progress; retry later", lim.MaxConcurrentMatches)})
			return
		}
		kind, err := classifyBody(r.Header.Get("Content-Type"))
		if err != nil {
			m.Requests.WithLabelValues(endpoint, "unsupported_media_type").Inc()
			writeError(w, http.StatusUnsupportedMediaType, err)
			return
		}
		limit := maxBodyFor(kind, lim.MaxBodyBytes)
		if r.ContentLength > limit {
			m.Requests.WithLabelValues(endpoint, "too_large").Inc()
			writeError(w, http.StatusRequestEntityTooLarge, tooLargeError(limit))
			return
		}
		small := bodies.get()
		defer bodies.put(small)
		buf := small
		budget := largeBodyBudget{sem: h.large, wait: lim.LargeBodyWait, ctx: r.Context()}
		defer budget.release()
		if r.ContentLength > PooledBodyBytes {
			// The declared length is what net/http will deliver: take it
			// from the budget and read into a buffer of exactly that size.
			if err := budget.take(r.ContentLength); err != nil {
				overloaded(w, m, endpoint, err)
				return
			}
			big := make([]byte, 0, r.ContentLength)
			buf = &big
		}
		body := &cappedBody{r: http.MaxBytesReader(w, r.Body, limit)}
		// A body of unknown length that outgrows the pooled buffer takes
		// the largest body's share.
		b, err := readBody(body, buf, &budget, limit)
		switch {
		case body.exceeded:
			m.Requests.WithLabelValues(endpoint, "too_large").Inc()
			writeError(w, http.StatusRequestEntityTooLarge, tooLargeError(limit))
			return
		case err != nil && isOverBudget(err):
			overloaded(w, m, endpoint, err)
			return
		case err != nil:
			m.Requests.WithLabelValues(endpoint, "bad_request").Inc()
			writeError(w, http.StatusBadRequest, err)
			return
		}
		// The answer goes into the body's buffer (no longer needed): the
		// same bytes httpserve.WriteJSON would write, without reflection.
		out, status, err := answer(r.Context(), kind, b, r, (*buf)[:0])
		if err != nil {
			writeError(w, status, err)
			return
		}
		*buf = append(out, '\n')
		w.Header().Set("Content-Type", "application/json")
		w.Write(*buf) //nolint:errcheck // the client went away; nothing to answer
	}
}

// Match decodes body as contentType (see classifyBody: JSON or the binary
// api.ContentTypeSeqHashes; anything else is 415), runs it and returns the
// response or an error with the HTTP status it maps to. The NATS endpoint
// uses it. The latency exemplar is ctx's trace, when sampled.
func Match(ctx context.Context, b Backend, m *Metrics, contentType string, body []byte) (api.MatchResponse, int, error) {
	kind, err := classifyBody(contentType)
	if err != nil {
		m.Requests.WithLabelValues("match", "unsupported_media_type").Inc()
		return api.MatchResponse{}, http.StatusUnsupportedMediaType, err
	}
	if limit := maxBodyFor(kind, api.MaxRequestBytes); int64(len(body)) > limit {
		m.Requests.WithLabelValues("match", "too_large").Inc()
		return api.MatchResponse{}, http.StatusRequestEntityTooLarge, tooLargeError(limit)
	}
	q, err := decodeBody(kind, body)
	if err != nil {
		m.Requests.WithLabelValues("match", "bad_request").Inc()
		return api.MatchResponse{}, http.StatusBadRequest, err
	}
	return matchQuery(ctx, b, m, q)
}

// modelFromQuery sets the model of a binary body's query from the URL
// query's model (or domain) parameter and returns the rest of the URL
// query. A JSON body names its model itself: a model parameter with one
// is refused, so that a request never names two.
func modelFromQuery(kind bodyKind, q *api.Query, raw string) (rest string, err error) {
	model, rest, err := api.SplitModelQuery(raw)
	if err != nil || model == "" {
		return rest, err
	}
	if kind != bodySeqHashes {
		return "", &api.RequestError{Field: api.ModelParam, Reason: "a JSON request names its model in the body"}
	}
	q.Model = model
	return rest, nil
}

func tooLargeError(limit int64) error {
	return &api.RequestError{Reason: fmt.Sprintf("request body exceeds %d bytes", limit)}
}

func decodeBody(kind bodyKind, b []byte) (api.Query, error) {
	if kind == bodySeqHashes {
		return api.DecodeSeqHashes(b)
	}
	return api.DecodeMatchBody(b)
}

func matchQuery(ctx context.Context, b Backend, m *Metrics, q api.Query) (api.MatchResponse, int, error) {
	start := time.Now()
	resp, err := b.Match(q)
	promx.Observe(m.Latency, time.Since(start).Seconds(), trace.SpanContextFromContext(ctx))
	if err != nil {
		if errors.Is(err, api.ErrUnavailable) {
			m.Requests.WithLabelValues("match", "unavailable").Inc()
			return api.MatchResponse{}, http.StatusServiceUnavailable, err
		}
		if errors.Is(err, api.ErrUnknownDomain) {
			m.Requests.WithLabelValues("match", "unknown_domain").Inc()
			return api.MatchResponse{}, http.StatusNotFound, err
		}
		m.Requests.WithLabelValues("match", "error").Inc()
		return api.MatchResponse{}, http.StatusInternalServerError, err
	}
	m.Requests.WithLabelValues("match", "ok").Inc()
	return resp, http.StatusOK, nil
}

// bodies are the read buffers of match requests up to PooledBodyBytes.
var bodies = bodyPool{p: sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}}

// bodyPool keeps read buffers of at most PooledBodyBytes: a larger one
// (a large body, or an answer that outgrew the buffer) is left to the
// collector, so the pool never pins the memory of a burst of large bodies.
type bodyPool struct{ p sync.Pool }

func (b *bodyPool) get() *[]byte { return b.p.Get().(*[]byte) }

// put keeps buf for reuse when it is at most PooledBodyBytes and reports
// whether it did.
func (b *bodyPool) put(buf *[]byte) bool {
	if cap(*buf) > PooledBodyBytes {
		return false
	}
	*buf = (*buf)[:0]
	b.p.Put(buf)
	return true
}

// largeBodyBudget is one request's share of the large-body budget.
type largeBodyBudget struct {
	sem  *semaphore.Weighted
	wait time.Duration
	ctx  context.Context
	held int64
}

// overBudgetError: the large-body budget stayed full for the whole wait.
type overBudgetError struct {
	n    int64
	wait time.Duration
}

func (e *overBudgetError) Error() string {
	return fmt.Sprintf("large match bodies in progress leave no room for %d more bytes within %s; retry later", e.n, e.wait)
}

func isOverBudget(err error) bool {
	var over *overBudgetError
	return errors.As(err, &over)
}

// take raises the request's share to n bytes.
func (l *largeBodyBudget) take(n int64) error {
	if n <= l.held {
		return nil
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.wait)
	defer cancel()
	if err := l.sem.Acquire(ctx, n-l.held); err != nil {
		return &overBudgetError{n: n, wait: l.wait}
	}
	l.held = n
	return nil
}

func (l *largeBodyBudget) release() {
	if l.held > 0 {
		l.sem.Release(l.held)
		l.held = 0
	}
}

func overloaded(w http.ResponseWriter, m *Metrics, endpoint string, err error) {
	m.Requests.WithLabelValues(endpoint, "overloaded").Inc()
	w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	writeError(w, http.StatusTooManyRequests, err)
}

// readBody reads the whole body into buf (bounded by the caller's
// MaxBytesReader). Once buf has grown past PooledBodyBytes, budget's share
// is raised to growTo (its error ends the read).
func readBody(r io.Reader, buf *[]byte, budget *largeBodyBudget, growTo int64) ([]byte, error) {
	b, err := readAll(r, (*buf)[:0], budget, growTo)
	*buf = b
	if err != nil && isOverBudget(err) {
		return nil, err
	}
	if err != nil {
		return nil, &api.RequestError{Reason: "reading the body: " + err.Error()}
	}
	return b, nil
}

// readAll is io.ReadAll into dst's spare capacity. A full dst is grown
// only when a read shows more bytes coming, so a body read into a buffer
// of its exact length is never copied. Once dst has grown past
// PooledBodyBytes, budget's share is raised to growTo (nil: no budget).
func readAll(r io.Reader, dst []byte, budget *largeBodyBudget, growTo int64) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			var one [1]byte
			n, err := r.Read(one[:])
			if n == 1 {
				dst = append(dst, one[0])
				if cap(dst) > PooledBodyBytes && budget != nil {
					if err := budget.take(growTo); err != nil {
						return dst, err
					}
				}
			}
			if err == io.EOF {
				return dst, nil
			}
			if err != nil {
				return dst, err
			}
			continue
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// cappedBody records whether the body passed its http.MaxBytesReader
// limit, so the handler answers 413 rather than 400.
type cappedBody struct {
	r        io.Reader
	exceeded bool
}

func (c *cappedBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		c.exceeded = true
	}
	return n, err
}

func writeError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(api.ErrorJSON(err), '\n'))
}
