package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/lanerules"
	"github.com/ckfrelay/ckfrelay/pkg/route"
)

// MirrorConfig configures a Mirror. Domain is required; the rest defaults
// as the global-indexer binary does.
type MirrorConfig struct {
	Domain string
	// Rules are the lane rules, one field per global-indexer flag
	// (--max-apply-lag, --expected-blocks, --lane-stale-after,
	// --stale-lanes, --workers, --queue, --control-timeout,
	// --snapshot-fetch-timeout). A zero field takes the binary's default
	// (lanerules.Defaults), so a mirror keeps and retires lanes as an
	// indexer run with the same flags does.
	Rules lanerules.Rules
	// Logger receives the lane machinery's logs (zero value: none).
	Logger zerolog.Logger
	// Tracer provides lane_apply spans (nil: none).
	Tracer trace.TracerProvider
	// Metrics receives the lane metrics (ckf_indexer_*), as the indexer's
	// /metrics shows them (nil: a private registry).
	Metrics *prometheus.Registry
	// JSDomain is the JetStream domain holding the lanes (e.g. "hub" when
	// the router's NATS is a leaf of the hub); empty: the connection's.
	JSDomain string
	// Route configures Route as global-indexer's --route-* flags do (the
	// zero value: pkg/route's defaults); RoutePrefillRate is each DC's
	// prefill speed in tokens/s (--dc-prefill-rate), RouteBlockSize the
	// block size of requests given as hashes (--route-block-size, 0: 16).
	Route            route.Config
	RoutePrefillRate map[string]float64
	RouteBlockSize   int
	// LoadMaxAge drops lane load older than this (--load-max-age; 0: 5 s).
	LoadMaxAge time.Duration
}

// Mirror follows one domain's lanes from JetStream in this process and
// answers Match from its own copy of the table: a Go router pays for a
// prefix search, not a network round trip. It is the global indexer's own
// lane machinery (internal/indexer, without its NATS endpoint), so it
// applies the same epochs, fencing, freshness and fail-closed rules and
// gives the same answers; it holds one table (16 lanes × the lanes'
// bucket count × 8 bytes).
//
// Run must be running for the mirror to follow the lanes; Match is safe
// for concurrent use and never blocks on the network.
type Mirror struct {
	svc *indexer.Service
}

// NewMirror builds a mirror on nc for cfg.Domain. It does not start
// following the lanes: call Run.
func NewMirror(nc *nats.Conn, cfg MirrorConfig) (*Mirror, error) {
	if nc == nil {
		return nil, errors.New("client: mirror: nil NATS connection")
	}
	var js jetstream.JetStream
	var err error
	if cfg.JSDomain != "" {
		js, err = jetstream.NewWithDomain(nc, cfg.JSDomain)
	} else {
		js, err = jetstream.New(nc)
	}
	if err != nil {
		return nil, fmt.Errorf("client: mirror: %w", err)
	}
	icfg, err := indexer.Config{
		Domain: cfg.Domain, Logger: cfg.Logger, Tracer: cfg.Tracer, Metrics: cfg.Metrics,
		NoMatchEndpoint: true,
	}.WithRules(cfg.Rules)
	if err != nil {
		return nil, fmt.Errorf("client: mirror: %w", err)
	}
	icfg.Route = indexer.RouteConfig{Policy: cfg.Route, PrefillRate: cfg.RoutePrefillRate, BlockSize: cfg.RouteBlockSize}
	icfg.LoadMaxAge = cfg.LoadMaxAge
	svc, err := indexer.New(nc, js, icfg)
	if err != nil {
		return nil, fmt.Errorf("client: mirror: %w", err)
	}
	return &Mirror{svc: svc}, nil
}

// Run follows the lanes until ctx ends (it returns nil then).
func (m *Mirror) Run(ctx context.Context) error { return m.svc.Run(ctx) }

// Ready reports whether at least one lane can answer.
func (m *Mirror) Ready() bool { return m.svc.Ready() }

// TableBytes is the memory of the mirror's table (0 until the first
// lane's format is known).
func (m *Mirror) TableBytes() uint64 { return m.svc.TableBytes() }

// Lanes returns the rows GET /v1/lanes would show.
func (m *Mirror) Lanes() []api.LaneStatus { return m.svc.Lanes() }

// Match answers req as POST /v1/match would: the same validation (through
// the API's own decoder) and the same answer; no lane ready is
// ErrUnavailable, a bad request a *StatusError matching ErrBadRequest.
func (m *Mirror) Match(_ context.Context, req api.MatchRequest) (api.MatchResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.MatchResponse{}, fmt.Errorf("client: encode request: %w", err)
	}
	q, err := api.DecodeMatchBody(body)
	if err != nil {
		return api.MatchResponse{}, badRequest(err)
	}
	return m.svc.Match(q)
}

// MatchSequenceHashes answers a request given as its sequence hashes,
// without any encoding.
func (m *Mirror) MatchSequenceHashes(_ context.Context, hashes []uint64) (api.MatchResponse, error) {
	if len(hashes) > api.MaxBlocks {
		return api.MatchResponse{}, badRequest(&api.RequestError{Field: "sequence_hashes", Reason: fmt.Sprintf("more than %d blocks", api.MaxBlocks)})
	}
	seqs := make([]ckf.SequenceHash, len(hashes))
	for i, h := range hashes {
		seqs[i] = ckf.SequenceHash(h)
	}
	return m.svc.Match(api.Query{Seqs: seqs})
}

// badRequest is err as the refusal a server would have sent.
func badRequest(err error) error {
	se := &StatusError{Status: 400, Message: err.Error()}
	var re *api.RequestError
	if errors.As(err, &re) {
		se.Message, se.Field = re.Reason, re.Field
	}
	return se
}

var _ Matcher = (*Mirror)(nil)
