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

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/lanerules"
	"github.com/ckfrelay/ckfrelay/pkg/route"
)

// MirrorConfig configures a Mirror. Domain, Domains or Discover names
// what to follow; the rest defaults as the global-indexer binary does.
type MirrorConfig struct {
	// Domain is the domain a request that names no model is answered
	// from (with Domains empty and Discover off, the only one).
	Domain string
	// Domains are further domains (models) to follow in the same mirror,
	// each into a table of its own, as global-indexer --domain a,b does;
	// a request picks one by its "model".
	Domains []string
	// Discover also follows every domain a relay registers in the lease
	// bucket's lane maps (global-indexer --domains-from lane-map).
	Discover bool
	// MaxDomains and MaxTableBytes bound the domains followed and the sum
	// of their tables (0: the indexer's
	// defaults, 64 and 8 GiB); a domain past them is refused, and the ones
	// followed are unchanged.
	MaxDomains    int
	MaxTableBytes uint64
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
	// /metrics shows them, each labelled by its domain (nil: a private
	// registry).
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
	// RouteInflightOff turns off the in-flight account of routes: by
	// default a route counts its request's prompt tokens against the DC it
	// chose until that DC's load windows can show them, and shares the
	// account with the domain's other routers (indexers and mirrors) on
	// ckfload.<domain>.<dc>.inflight, as global-indexer does. A route with
	// probe set counts nothing.
	RouteInflightOff bool
	// LoadMaxAge drops lane load older than this (--load-max-age; 0: 5 s).
	LoadMaxAge time.Duration
}

// Mirror follows one or several domains' lanes from JetStream in this
// process and answers Match and Route from its own copy of their tables:
// a Go router pays for a prefix search, not a network round trip. It runs
// the global indexer's own code: the lane engine of pkg/follow in the host
// of pkg/domains, for one domain as for many (without the indexer's NATS
// endpoint), so it applies the same epochs, fencing, freshness and
// fail-closed rules and gives the same answers; it holds one table per
// domain (16 lanes ×
// the lanes' bucket count × 8 bytes). A request names its domain with
// "model" (a domain followed, or none for Domain); ForModel gives the
// same for requests sent as hashes.
//
// Run must be running for the mirror to follow the lanes; the query
// methods are safe for concurrent use and never block on the network.
type Mirror struct {
	// reg is the host of the domains followed, one or many: the same
	// pkg/domains registry global-indexer runs.
	reg *domains.Registry
}

// NewMirror builds a mirror on nc for the domains cfg names. It does not
// start following the lanes: call Run.
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
	icfg, err := follow.Config{Domain: cfg.Domain, Logger: cfg.Logger, Tracer: cfg.Tracer}.WithRules(cfg.Rules)
	if err != nil {
		return nil, fmt.Errorf("client: mirror: %w", err)
	}
	icfg.Route = follow.RouteConfig{Policy: cfg.Route, PrefillRate: cfg.RoutePrefillRate, BlockSize: cfg.RouteBlockSize,
		Inflight: follow.InflightConfig{Off: cfg.RouteInflightOff}}
	icfg.LoadMaxAge = cfg.LoadMaxAge
	var names []string
	if cfg.Domain != "" {
		names = append(names, cfg.Domain)
	}
	for _, d := range cfg.Domains {
		if d != cfg.Domain {
			names = append(names, d)
		}
	}
	rc := domains.Config{Base: icfg, Domains: names, Discover: cfg.Discover, MaxDomains: cfg.MaxDomains,
		MaxTableBytes: cfg.MaxTableBytes, Logger: cfg.Logger}
	if cfg.Metrics != nil {
		rc.Registerer = cfg.Metrics
	}
	reg, err := domains.New(nc, js, rc)
	if err != nil {
		return nil, fmt.Errorf("client: mirror: %w", err)
	}
	return &Mirror{reg: reg}, nil
}

// Run follows the lanes until ctx ends (it returns nil then).
func (m *Mirror) Run(ctx context.Context) error { return m.reg.Run(ctx) }

// Ready reports whether at least one lane of some domain can answer.
func (m *Mirror) Ready() bool { return m.reg.Ready() }

// DomainReady reports whether model (a domain followed, or a name it is
// known by) is followed and has a lane that can answer, as GET
// /readyz?domain= does.
func (m *Mirror) DomainReady(model string) (ready, known bool) {
	return m.reg.DomainReady(model)
}

// Domains lists the domains followed, sorted.
func (m *Mirror) Domains() []string {
	return m.reg.Domains()
}

// TableBytes is the memory of the mirror's tables (0 until the first
// lane's format is known).
func (m *Mirror) TableBytes() uint64 { return m.reg.TableBytes() }

// Lanes returns the rows GET /v1/lanes would show: every domain's lanes,
// by domain then lane.
func (m *Mirror) Lanes() []api.LaneStatus { return m.reg.Lanes() }

// Match answers req as POST /v1/match would: the same validation (through
// the API's own decoder) and the same answer, from the domain req.Model
// names; no lane ready is ErrUnavailable, a model not followed
// ErrUnknownModel, a bad request a *StatusError matching ErrBadRequest.
func (m *Mirror) Match(_ context.Context, req api.MatchRequest) (api.MatchResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.MatchResponse{}, fmt.Errorf("client: encode request: %w", err)
	}
	q, err := api.DecodeMatchBody(body)
	if err != nil {
		return api.MatchResponse{}, badRequest(err)
	}
	return m.reg.Match(q)
}

// MatchSequenceHashes answers a request given as its sequence hashes,
// without any encoding, from the default domain (ForModel: another).
func (m *Mirror) MatchSequenceHashes(ctx context.Context, hashes []uint64) (api.MatchResponse, error) {
	return m.matchSeqs(ctx, "", hashes)
}

func (m *Mirror) matchSeqs(_ context.Context, model string, hashes []uint64) (api.MatchResponse, error) {
	if len(hashes) > api.MaxBlocks {
		return api.MatchResponse{}, badRequest(&api.RequestError{Field: "sequence_hashes", Reason: fmt.Sprintf("more than %d blocks", api.MaxBlocks)})
	}
	if err := checkModel(model); err != nil {
		return api.MatchResponse{}, err
	}
	seqs := make([]ckf.SequenceHash, len(hashes))
	for i, h := range hashes {
		seqs[i] = ckf.SequenceHash(h)
	}
	return m.reg.Match(api.Query{Seqs: seqs, Model: model})
}

// checkModel refuses a model name the API's decoder would.
func checkModel(model string) error {
	if len(model) > api.MaxModelBytes {
		return badRequest(&api.RequestError{Field: "model", Reason: fmt.Sprintf("longer than %d bytes", api.MaxModelBytes)})
	}
	return nil
}

// ForModel is the mirror answering for model: every request it takes
// names model (a JSON request's own "model" must be empty or the same).
func (m *Mirror) ForModel(model string) *MirrorModel { return &MirrorModel{m: m, model: model} }

// MirrorModel is a Mirror answering for one model; see Mirror.ForModel.
type MirrorModel struct {
	m     *Mirror
	model string
}

// Match answers req for the model.
func (v *MirrorModel) Match(ctx context.Context, req api.MatchRequest) (api.MatchResponse, error) {
	var err error
	if req.Model, err = requestModel(v.model, req.Model); err != nil {
		return api.MatchResponse{}, err
	}
	return v.m.Match(ctx, req)
}

// MatchSequenceHashes answers hashes for the model.
func (v *MirrorModel) MatchSequenceHashes(ctx context.Context, hashes []uint64) (api.MatchResponse, error) {
	return v.m.matchSeqs(ctx, v.model, hashes)
}

// Ready reports whether the model is followed and a lane of it can answer.
func (v *MirrorModel) Ready() bool {
	ready, _ := v.m.DomainReady(v.model)
	return ready
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

var (
	_ Matcher = (*Mirror)(nil)
	_ Matcher = (*MirrorModel)(nil)
)
