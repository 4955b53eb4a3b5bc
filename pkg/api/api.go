// Package api is the indexer's query surface: the JSON request/response
// contract of POST /v1/match (shared by HTTP and the NATS micro endpoint),
// GET /v1/lanes, /healthz, /readyz, /metrics and the status page at /.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/internal/promx"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Limits on one match request.
const (
	MaxRequestBytes = 4 << 20
	MaxBlocks       = 1 << 16
	MaxBlockSize    = 1 << 16
)

// ErrUnavailable means no lane is ready; the caller should route elsewhere.
var ErrUnavailable = errors.New("api: no lane is ready")

// RequestError is a bad request; Field names the offending JSON field.
type RequestError struct {
	Field  string
	Reason string
}

func (e *RequestError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Query is a decoded match request: exactly one of Locals or Seqs is set.
type Query struct {
	Locals []ckf.LocalBlockHash
	Seqs   []ckf.SequenceHash
}

// Blocks is the number of query positions.
func (q Query) Blocks() int { return len(q.Locals) + len(q.Seqs) }

// DecodeMatchRequest parses and validates a match request body. u64 values
// are decoded as integers (never through float64). See
// DecodeMatchRequestFrom.
func DecodeMatchRequest(body []byte) (Query, error) {
	if len(body) > MaxRequestBytes {
		return Query{}, &RequestError{Reason: fmt.Sprintf("request body exceeds %d bytes", MaxRequestBytes)}
	}
	return DecodeMatchRequestFrom(bytes.NewReader(body))
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &RequestError{Field: te.Field, Reason: fmt.Sprintf("cannot use %s as %s", te.Value, te.Type)}
	}
	if errors.Is(err, io.EOF) {
		return &RequestError{Reason: "empty request body"}
	}
	// encoding/json has no typed error for DisallowUnknownFields.
	if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		return &RequestError{Field: strings.TrimSuffix(name, `"`), Reason: "unknown field"}
	}
	return &RequestError{Reason: "malformed JSON: " + err.Error()}
}

// LaneDepth is one lane's answer.
type LaneDepth struct {
	Lane  int    `json:"lane"`
	DC    string `json:"dc"`
	Pool  string `json:"pool"`
	Depth uint32 `json:"depth"`
}

// MatchResponse is the JSON answer of a match.
type MatchResponse struct {
	ReadyLanes uint16      `json:"ready_lanes"`
	Blocks     int         `json:"blocks"`
	Lanes      []LaneDepth `json:"lanes"`
	Best       *LaneDepth  `json:"best"`
}

// SetBest picks the deepest lane (lowest lane number on ties); none when
// every depth is 0.
func (r *MatchResponse) SetBest() {
	r.Best = nil
	for i := range r.Lanes {
		l := &r.Lanes[i]
		if l.Depth > 0 && (r.Best == nil || l.Depth > r.Best.Depth) {
			r.Best = l
		}
	}
}

// LaneStatus is one row of GET /v1/lanes.
type LaneStatus struct {
	Lane              int    `json:"lane"`
	DC                string `json:"dc"`
	Pool              string `json:"pool"`
	State             string `json:"state"`
	Epoch             uint64 `json:"epoch"`
	InstalledSequence uint64 `json:"installed_sequence"`
	StreamLag         uint64 `json:"stream_lag_messages"`
	LastFault         string `json:"last_fault,omitempty"`
}

// Backend answers queries; the indexer service implements it.
type Backend interface {
	// Match answers q; ErrUnavailable when no lane is ready.
	Match(q Query) (MatchResponse, error)
	Lanes() []LaneStatus
	Ready() bool
}

// Metrics counts API traffic.
type Metrics struct {
	Requests *prometheus.CounterVec
	Latency  prometheus.Histogram
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
	}
	for _, c := range []prometheus.Collector{m.Requests, m.Latency} {
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
}

func (l Limits) withDefaults() Limits {
	if l.MaxConcurrentMatches <= 0 {
		l.MaxConcurrentMatches = DefaultMaxConcurrentMatches
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = MaxRequestBytes
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
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", statusHandler(b, m, ho.info, ho.now))
	mux.HandleFunc("POST /v1/match", func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			m.Requests.WithLabelValues("match", "overloaded").Inc()
			w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
			writeError(w, http.StatusTooManyRequests, &RequestError{Reason: fmt.Sprintf("more than %d match requests in progress; retry later", lim.MaxConcurrentMatches)})
			return
		}
		tooLarge := &RequestError{Reason: fmt.Sprintf("request body exceeds %d bytes", lim.MaxBodyBytes)}
		if r.ContentLength > lim.MaxBodyBytes {
			m.Requests.WithLabelValues("match", "too_large").Inc()
			writeError(w, http.StatusRequestEntityTooLarge, tooLarge)
			return
		}
		body := &cappedBody{r: http.MaxBytesReader(w, r.Body, lim.MaxBodyBytes)}
		q, err := DecodeMatchRequestFrom(body)
		switch {
		case body.exceeded:
			m.Requests.WithLabelValues("match", "too_large").Inc()
			writeError(w, http.StatusRequestEntityTooLarge, tooLarge)
			return
		case err != nil:
			m.Requests.WithLabelValues("match", "bad_request").Inc()
			writeError(w, http.StatusBadRequest, err)
			return
		}
		resp, status, err := matchQuery(r.Context(), b, m, q)
		if err != nil {
			writeError(w, status, err)
			return
		}
		httpserve.WriteJSON(w, http.StatusOK, resp)
	})
	mux.HandleFunc("GET /v1/lanes", func(w http.ResponseWriter, r *http.Request) {
		m.Requests.WithLabelValues("lanes", "ok").Inc()
		httpserve.WriteJSON(w, http.StatusOK, map[string]any{"lanes": b.Lanes()})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		httpserve.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
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

// Match decodes body, runs it and returns the response or an error with
// the HTTP status it maps to. The NATS endpoint uses it too. The latency
// exemplar is ctx's trace, when sampled.
func Match(ctx context.Context, b Backend, m *Metrics, body []byte) (MatchResponse, int, error) {
	q, err := DecodeMatchRequest(body)
	if err != nil {
		m.Requests.WithLabelValues("match", "bad_request").Inc()
		return MatchResponse{}, http.StatusBadRequest, err
	}
	return matchQuery(ctx, b, m, q)
}

func matchQuery(ctx context.Context, b Backend, m *Metrics, q Query) (MatchResponse, int, error) {
	start := time.Now()
	resp, err := b.Match(q)
	promx.Observe(m.Latency, time.Since(start).Seconds(), trace.SpanContextFromContext(ctx))
	if err != nil {
		if errors.Is(err, ErrUnavailable) {
			m.Requests.WithLabelValues("match", "unavailable").Inc()
			return MatchResponse{}, http.StatusServiceUnavailable, err
		}
		m.Requests.WithLabelValues("match", "error").Inc()
		return MatchResponse{}, http.StatusInternalServerError, err
	}
	m.Requests.WithLabelValues("match", "ok").Inc()
	return resp, http.StatusOK, nil
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

// ErrorBody is the JSON shape of every error answer.
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// ErrorJSON renders err as an ErrorBody.
func ErrorJSON(err error) []byte {
	body := ErrorBody{Error: err.Error()}
	var re *RequestError
	if errors.As(err, &re) {
		body.Field = re.Field
	}
	b, _ := json.Marshal(body)
	return b
}

func writeError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(ErrorJSON(err), '\n'))
}
