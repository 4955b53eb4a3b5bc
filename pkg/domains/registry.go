package domains

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/ctxwait"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/promx"
	"github.com/ckfrelay/ckfrelay/pkg/retry"
	"github.com/ckfrelay/ckfrelay/pkg/unithost"
)

// Defaults of zero Config bounds.
const (
	// DefaultMaxDomains bounds the domains of one process.
	DefaultMaxDomains = 64
	// DefaultMaxTableBytes bounds the sum of the domains' tables (8 GiB:
	// 64 domains of the 4M-bucket, 512 MiB table, or more of smaller ones).
	DefaultMaxTableBytes = 8 << 30
	// discoverRetry spaces the lane-map discovery watch's restarts.
	discoverRetry = time.Second
)

// Config configures a Registry.
type Config struct {
	// Base is the indexer configuration every domain's service starts
	// from; Domain, Metrics, Registerer and ReserveTable are set per
	// domain. Base.KvRelay applies to the default domain only; KvRelay
	// follows models into domains of their own.
	Base follow.Config
	// Domains are served from the start; the first is the default domain
	// of queries that name none.
	Domains []string
	// Discover adds every domain a relay registers in the lease bucket's
	// lane maps (lease.Coordinator.WatchDomains), when Allow admits it.
	Discover bool
	// Allow filters discovered domains and the domains of KvRelay's
	// models (nil: all).
	Allow func(domain string) bool
	// KvRelay follows models over dynamo.kvrelay.v1, each into a domain of
	// its own (kvrelay.go); zero: none.
	KvRelay KvRelayModels
	// MaxDomains and MaxTableBytes bound the domains and the sum of their
	// tables (0: the defaults).
	MaxDomains    int
	MaxTableBytes uint64
	// Registerer is the process registry; each domain's series are
	// registered on it with the label domain (nil: a private registry).
	Registerer prometheus.Registerer
	// StopOnFailure ends Run when a domain's service fails
	// (unithost.Config): a process of a fixed set of domains exits then.
	StopOnFailure bool
	// Logger receives the registry's logs.
	Logger zerolog.Logger
}

// domain is one served domain: a unit of the registry's host.
type domain struct {
	name string
	// model is the kvrelay model the domain follows ("" none).
	model string
	svc   *follow.Service
	// metrics holds the domain's series, unregistered when it is removed.
	metrics *promx.Scope
	// table is the bytes reserved for its table (0 before it exists).
	table atomic.Uint64
}

func (d *domain) Run(ctx context.Context) error { return d.svc.Run(ctx) }

// Registry serves several domains from one process: the units of a
// unithost.Host, which owns their life cycle, the MaxDomains bound, the
// admission (Allow), refusals and the domain metrics (see its concurrency
// contract); the registry adds the table budget, discovery, the kvrelay
// models and the routing of queries. Safe for concurrent use.
type Registry struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	cfg  Config
	log  zerolog.Logger
	m    *metrics
	host *unithost.Host[*domain]

	// def is the default domain's name ("" when there is none yet).
	def atomic.Pointer[string]
	// names maps the other names a query may give a domain by (a kvrelay
	// model's followed name, canonical id and aliases) to it
	// (copy-on-write, read without a lock).
	names atomic.Pointer[map[string]string]

	mu         sync.Mutex // guards tableBytes; may be held while calling the host
	tableBytes uint64

	models sync.Mutex // serializes addModel; guards modelsDone and the writes of names
	// modelsDone is every kvrelay model added or refused: each is judged
	// once, so a refusal is counted once however often catalogs list it.
	modelsDone map[string]bool
}

// New validates cfg and builds a registry; Run starts the domains.
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Registry, error) {
	if cfg.MaxDomains <= 0 {
		cfg.MaxDomains = DefaultMaxDomains
	}
	if cfg.MaxTableBytes == 0 {
		cfg.MaxTableBytes = DefaultMaxTableBytes
	}
	if len(cfg.Domains) == 0 && !cfg.Discover && !cfg.KvRelay.enabled() {
		return nil, errors.New("domains: no domain configured, discovery off and no kvrelay model")
	}
	if err := cfg.KvRelay.Validate(cfg.Base); err != nil {
		return nil, err
	}
	if len(cfg.Domains) > cfg.MaxDomains {
		return nil, &unithost.Error{Kind: unithost.ErrTooMany, Noun: "domain", Name: cfg.Domains[cfg.MaxDomains], Detail: fmt.Sprintf("%d configured, at most %d", len(cfg.Domains), cfg.MaxDomains)}
	}
	seen := map[string]bool{}
	for _, d := range cfg.Domains {
		if seen[d] {
			return nil, &unithost.Error{Kind: unithost.ErrInvalid, Noun: "domain", Name: d, Detail: "configured twice"}
		}
		seen[d] = true
		c := cfg.Base
		c.Domain = d
		if err := c.Validate(); err != nil {
			return nil, &unithost.Error{Kind: unithost.ErrInvalid, Noun: "domain", Name: d, Err: err}
		}
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Registry{nc: nc, js: js, cfg: cfg, log: cfg.Logger.With().Str("component", "domains").Logger(), m: m, modelsDone: map[string]bool{}}
	noNames := map[string]string{}
	r.names.Store(&noNames)
	def := ""
	if len(cfg.Domains) > 0 {
		def = cfg.Domains[0]
	}
	r.def.Store(&def)
	r.host, err = unithost.New(unithost.Config[*domain]{
		Noun: "domain", Registerer: cfg.Registerer, Max: cfg.MaxDomains,
		Metrics: unithost.MetricNames{Units: MetricDomains, Refused: MetricRefused, Limit: MetricLimit, Failed: MetricFailed, FailedLabel: "domain"},
		Admit: func(name string) bool {
			return cfg.Allow == nil || slices.Contains(cfg.Domains, name) || cfg.Allow(name)
		},
		Build: func(name string) (*domain, error) { return r.newDomain(name, nil) },
		OnAdd: func(name string, _ *domain) {
			if *r.def.Load() == "" && r.host.Len() == 1 {
				r.def.Store(&name)
			}
		},
		Stopped:       r.stopped,
		StopOnFailure: cfg.StopOnFailure,
		Logger:        r.log,
	})
	if err != nil {
		return nil, err
	}
	r.host.SetLimit("table_bytes", float64(cfg.MaxTableBytes))
	// The configured domains are known (and 503, not 404) before Run.
	for _, name := range cfg.Domains {
		if err := r.host.Add(name); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Run serves the configured domains, follows the lane maps when
// Config.Discover is set and the kvrelay models when configured, until
// ctx ends; it returns after every domain's service stopped: the failures
// of the domains still served then, joined (unithost.ErrFailed), or nil.
// A domain whose service fails stops alone.
func (r *Registry) Run(ctx context.Context) error {
	if r.cfg.KvRelay.enabled() {
		if err := r.host.Go(r.followModels); err != nil {
			return err
		}
	}
	if r.cfg.Discover {
		if err := r.host.Go(r.discover); err != nil {
			return err
		}
	}
	return r.host.Run(ctx)
}

// discover adds each domain the lane maps name, until ctx ends.
func (r *Registry) discover(ctx context.Context) {
	var coord *lease.Coordinator
	err := retry.Policy{}.Do(ctx, func(ctx context.Context) error {
		var err error
		coord, err = lease.New(ctx, r.js, r.cfg.Base.LeaseOptions...)
		return err
	})
	if err != nil {
		return // ctx ended
	}
	for ctx.Err() == nil {
		ch, err := coord.WatchDomains(ctx)
		if err != nil {
			r.log.Warn().Err(err).Msg("watching the lane maps failed; retrying")
			ctxwait.Sleep(ctx, discoverRetry)
			continue
		}
		for d := range ch {
			if err := r.Add(d); err != nil && !errors.Is(err, unithost.ErrExists) {
				r.log.Warn().Err(err).Msg("discovered domain refused")
			}
		}
		ctxwait.Sleep(ctx, discoverRetry)
	}
}

// Add serves domain from now on: its service starts under Run. A domain
// over a bound, refused by Allow or invalid fails with *unithost.Error
// (counted and logged once); one already served is unithost.ErrExists.
func (r *Registry) Add(name string) error { return r.host.Add(name) }

// newDomain builds name's service on the process registry, labelled; kv,
// when set, is its kvrelay configuration (a model's), else Base.KvRelay
// goes to the default domain alone. Called under the host's lock.
func (r *Registry) newDomain(name string, kv *follow.KvRelayConfig) (*domain, error) {
	d := &domain{name: name}
	c := r.cfg.Base
	c.Domain = name
	c.Metrics = nil
	d.metrics = promx.NewScope(r.cfg.Registerer, prometheus.Labels{"domain": name})
	c.Registerer = d.metrics
	switch {
	case kv != nil:
		c.KvRelay = *kv
		d.model = kv.Model
	case name != *r.def.Load() && !(*r.def.Load() == "" && r.host.Len() == 0):
		c.KvRelay = follow.KvRelayConfig{}
	}
	c.ReserveTable = func(_ ckf.FormatIdentity, bytes uint64) error { return r.reserve(d, bytes) }
	svc, err := follow.New(r.nc, r.js, c)
	if err != nil {
		d.metrics.Close()
		return nil, err
	}
	d.svc = svc
	return d, nil
}

// reserve books bytes of table memory for d, or refuses it: the domain's
// lanes then report the refusal (ErrLaneConfig) and retry, and the domains
// already served keep their tables.
func (r *Registry) reserve(d *domain, bytes uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := d.table.Load(); old != 0 {
		// A table is built once per service; a second reservation (a
		// failed build retried) replaces the first.
		r.tableBytes -= old
		d.table.Store(0)
	}
	if r.tableBytes+bytes > r.cfg.MaxTableBytes {
		return r.host.Refuse(&unithost.Error{Kind: unithost.ErrOverBudget, Name: d.name,
			Detail: fmt.Sprintf("a table of %d bytes over the %d reserved passes the table memory bound of %d", bytes, r.tableBytes, r.cfg.MaxTableBytes)})
	}
	r.tableBytes += bytes
	d.table.Store(bytes)
	r.m.tableBytes.Set(float64(r.tableBytes))
	return nil
}

// Remove stops serving name and frees its table; false when it was not
// served.
func (r *Registry) Remove(name string) bool { return r.host.Remove(name) }

// stopped frees what a removed domain held: its series, its table, its
// names; a later catalog update that lists its model adds it again.
func (r *Registry) stopped(name string, d *domain) {
	d.metrics.Close()
	r.mu.Lock()
	r.tableBytes -= d.table.Swap(0)
	r.m.tableBytes.Set(float64(r.tableBytes))
	r.mu.Unlock()
	r.models.Lock()
	names := maps.Clone(*r.names.Load())
	maps.DeleteFunc(names, func(_, dn string) bool { return dn == name })
	r.names.Store(&names)
	delete(r.modelsDone, d.model)
	r.models.Unlock()
}

// Service returns the service of a served domain.
func (r *Registry) Service(name string) (*follow.Service, bool) {
	d, ok := r.host.Get(name)
	if !ok {
		return nil, false
	}
	return d.svc, true
}

// Domains lists the served domains, sorted.
func (r *Registry) Domains() []string { return r.host.Names() }

// TableBytes is the table memory reserved by every domain.
func (r *Registry) TableBytes() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tableBytes
}

// resolve finds the domain a query names: by its name, else by a kvrelay
// model's name.
func (r *Registry) resolve(name string) (*domain, bool) {
	if d, ok := r.host.Get(name); ok {
		return d, true
	}
	if dn, ok := (*r.names.Load())[name]; ok {
		return r.host.Get(dn)
	}
	return nil, false
}

// lookup finds the domain a query names, or the default one.
func (r *Registry) lookup(model string) (*domain, error) {
	if model == "" {
		if d, ok := r.host.Only(); ok {
			return d, nil
		}
		model = *r.def.Load()
		if model == "" {
			return nil, fmt.Errorf("domains: the request names no model and there is no default: %w", api.ErrUnknownDomain)
		}
	}
	d, ok := r.resolve(model)
	if !ok {
		return nil, fmt.Errorf("domains: %q is not served: %w", model, api.ErrUnknownDomain)
	}
	return d, nil
}

// Match answers q from the domain it names (or the default one).
func (r *Registry) Match(q api.Query) (api.MatchResponse, error) {
	d, err := r.lookup(q.Model)
	if err != nil {
		return api.MatchResponse{}, err
	}
	q.Model = ""
	return d.svc.Match(q)
}

// Route answers a route from the domain q names (or the default one).
func (r *Registry) Route(q api.Query, o api.RouteOptions) (api.RouteResponse, error) {
	d, err := r.lookup(q.Model)
	if err != nil {
		return api.RouteResponse{}, err
	}
	q.Model = ""
	return d.svc.Route(q, o)
}

// Lanes lists every domain's lanes, by domain then lane.
func (r *Registry) Lanes() []api.LaneStatus {
	out := []api.LaneStatus{}
	r.host.Each(func(_ string, d *domain) bool {
		out = append(out, d.svc.Lanes()...)
		return true
	})
	return out
}

// Ready reports whether some domain is ready; DomainReady answers for one.
func (r *Registry) Ready() bool {
	return r.host.Ready(func(d *domain) bool { return d.svc.Ready() })
}

// DomainReady reports whether name (a domain, or a kvrelay model's name)
// is served and ready.
func (r *Registry) DomainReady(name string) (ready, known bool) {
	d, ok := r.resolve(name)
	if !ok {
		return false, false
	}
	return d.svc.Ready(), true
}
