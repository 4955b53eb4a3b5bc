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

	"github.com/ckfrelay/ckfrelay/internal/ctxwait"
	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/promx"
	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/internal/retry"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
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

// ErrorKind classifies registry refusals; each kind is itself an error.
type ErrorKind uint8

const (
	// ErrTooManyDomains: the domain would pass Config.MaxDomains.
	ErrTooManyDomains ErrorKind = iota + 1
	// ErrTableMemory: the domain's table would pass Config.MaxTableBytes.
	ErrTableMemory
	// ErrNotAllowed: discovery found a domain Config.Allow refuses.
	ErrNotAllowed
	// ErrInvalidDomain: the name is not a valid domain, or its service
	// could not be built.
	ErrInvalidDomain
)

func (k ErrorKind) String() string {
	switch k {
	case ErrTooManyDomains:
		return "too_many_domains"
	case ErrTableMemory:
		return "table_memory"
	case ErrNotAllowed:
		return "not_allowed"
	case ErrInvalidDomain:
		return "invalid_domain"
	}
	return fmt.Sprintf("ErrorKind(%d)", uint8(k))
}

func (k ErrorKind) Error() string { return "domains: " + k.String() }

// Error is a refused domain.
type Error struct {
	Kind   ErrorKind
	Domain string
	Detail string
	Err    error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("domains: domain %q refused (%s)", e.Domain, e.Kind)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap matches the kind and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Config configures a Registry.
type Config struct {
	// Base is the indexer configuration every domain's service starts
	// from; Domain, Metrics, Registerer and ReserveTable are set per
	// domain. Base.KvRelay applies to the default domain only; KvRelay
	// follows models into domains of their own.
	Base indexer.Config
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
	// Logger receives the registry's logs.
	Logger zerolog.Logger
}

// domain is one served domain.
type domain struct {
	name string
	// model is the kvrelay model the domain follows ("" none).
	model string
	svc   *indexer.Service
	// metrics holds the domain's series, unregistered when it is removed.
	metrics *promx.Scope
	cancel  context.CancelFunc
	done    chan struct{}
	// table is the bytes reserved for its table (0 before it exists).
	table atomic.Uint64
}

// Registry serves several domains from one process.
type Registry struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg Config
	log zerolog.Logger
	m   *metrics

	// byName is the served domains (copy-on-write), read by every query
	// without a lock.
	byName atomic.Pointer[map[string]*domain]
	// def is the default domain's name ("" when there is none yet).
	def atomic.Pointer[string]
	// names maps the other names a query may give a domain by (a kvrelay
	// model's followed name, canonical id and aliases) to it
	// (copy-on-write, read without a lock).
	names atomic.Pointer[map[string]string]

	mu         sync.Mutex // guards the fields below and the writes of byName
	tableBytes uint64
	runCtx     context.Context
	wg         sync.WaitGroup
	refused    map[string]bool
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
		return nil, &Error{Kind: ErrTooManyDomains, Domain: cfg.Domains[cfg.MaxDomains], Detail: fmt.Sprintf("%d configured, at most %d", len(cfg.Domains), cfg.MaxDomains)}
	}
	seen := map[string]bool{}
	for _, d := range cfg.Domains {
		if seen[d] {
			return nil, &Error{Kind: ErrInvalidDomain, Domain: d, Detail: "configured twice"}
		}
		seen[d] = true
		c := cfg.Base
		c.Domain = d
		if err := c.Validate(); err != nil {
			return nil, &Error{Kind: ErrInvalidDomain, Domain: d, Err: err}
		}
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Registry{nc: nc, js: js, cfg: cfg, log: cfg.Logger.With().Str("component", "domains").Logger(), m: m, refused: map[string]bool{}, modelsDone: map[string]bool{}}
	empty := map[string]*domain{}
	r.byName.Store(&empty)
	noNames := map[string]string{}
	r.names.Store(&noNames)
	def := ""
	if len(cfg.Domains) > 0 {
		def = cfg.Domains[0]
	}
	r.def.Store(&def)
	m.limit.WithLabelValues("domains").Set(float64(cfg.MaxDomains))
	m.limit.WithLabelValues("table_bytes").Set(float64(cfg.MaxTableBytes))
	// The configured domains are known (and 503, not 404) before Run.
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range cfg.Domains {
		d, err := r.newDomain(name, nil)
		if err != nil {
			return nil, &Error{Kind: ErrInvalidDomain, Domain: name, Err: err}
		}
		r.publishLocked(d)
	}
	return r, nil
}

// Run starts the configured domains, follows the lane maps when
// Config.Discover is set, and returns when ctx ends, after every domain's
// service stopped. A domain whose service fails stops alone.
func (r *Registry) Run(ctx context.Context) error {
	r.mu.Lock()
	r.runCtx = ctx
	for _, d := range *r.byName.Load() {
		r.startLocked(d)
	}
	r.mu.Unlock()
	r.followModels(ctx)
	if r.cfg.Discover {
		r.discover(ctx)
	}
	<-ctx.Done()
	r.wg.Wait()
	return nil
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
			if err := r.Add(d); err != nil && !errors.Is(err, errKnown) {
				r.log.Warn().Err(err).Msg("discovered domain refused")
			}
		}
		ctxwait.Sleep(ctx, discoverRetry)
	}
}

// errKnown: Add of a domain already served.
var errKnown = errors.New("domains: already served")

// Add serves domain from now on: its service starts under Run's context.
// A domain over a bound, refused by Allow or invalid fails with *Error
// (counted and logged once); one already served is a no-op (errKnown).
func (r *Registry) Add(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addLocked(name, nil)
}

// addLocked is Add; kv, when set, is the domain's kvrelay configuration
// (a model's). r.mu held.
func (r *Registry) addLocked(name string, kv *indexer.KvRelayConfig) error {
	cur := *r.byName.Load()
	if _, ok := cur[name]; ok {
		return errKnown
	}
	if r.runCtx == nil || r.runCtx.Err() != nil {
		return &Error{Kind: ErrInvalidDomain, Domain: name, Detail: "the registry is not running"}
	}
	var rerr *Error
	switch {
	case !slices.Contains(r.cfg.Domains, name) && r.cfg.Allow != nil && !r.cfg.Allow(name):
		rerr = &Error{Kind: ErrNotAllowed, Domain: name, Detail: "not in the allowed domains"}
	case len(cur) >= r.cfg.MaxDomains:
		rerr = &Error{Kind: ErrTooManyDomains, Domain: name, Detail: fmt.Sprintf("%d domains served, at most %d", len(cur), r.cfg.MaxDomains)}
	}
	var d *domain
	if rerr == nil {
		var err error
		if d, err = r.newDomain(name, kv); err != nil {
			rerr = &Error{Kind: ErrInvalidDomain, Domain: name, Err: err}
		}
	}
	if rerr != nil {
		return r.refuseLocked(rerr)
	}
	r.publishLocked(d)
	r.startLocked(d)
	return nil
}

// publishLocked makes d visible to queries. r.mu held.
func (r *Registry) publishLocked(d *domain) {
	next := maps.Clone(*r.byName.Load())
	next[d.name] = d
	r.byName.Store(&next)
	if *r.def.Load() == "" && len(next) == 1 {
		r.def.Store(&d.name)
	}
	r.m.domains.Set(float64(len(next)))
	r.log.Info().Str("domain", d.name).Int("domains", len(next)).Msg("domain added")
}

// startLocked runs d's service under Run's context. r.mu held.
func (r *Registry) startLocked(d *domain) {
	ctx, cancel := context.WithCancel(r.runCtx)
	d.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(d.done)
		if err := d.svc.Run(ctx); err != nil {
			r.m.failed.WithLabelValues(d.name).Inc()
			r.log.Error().Err(err).Str("domain", d.name).Msg("domain stopped; the other domains go on")
		}
	}()
}

// refuseLocked counts and logs a refusal (once per domain and kind).
func (r *Registry) refuseLocked(e *Error) error {
	r.m.refused.WithLabelValues(e.Kind.String()).Inc()
	key := e.Kind.String() + "/" + e.Domain
	if !r.refused[key] {
		r.refused[key] = true
		r.log.Error().Err(e).Str("domain", e.Domain).Msg("domain refused; the domains already served are unchanged")
	}
	return e
}

// newDomain builds name's service on the process registry, labelled; kv,
// when set, is its kvrelay configuration (a model's), else Base.KvRelay
// goes to the default domain alone.
func (r *Registry) newDomain(name string, kv *indexer.KvRelayConfig) (*domain, error) {
	d := &domain{name: name, done: make(chan struct{})}
	c := r.cfg.Base
	c.Domain = name
	c.Metrics = nil
	d.metrics = promx.NewScope(r.cfg.Registerer, prometheus.Labels{"domain": name})
	c.Registerer = d.metrics
	switch {
	case kv != nil:
		c.KvRelay = *kv
		d.model = kv.Model
	case name != *r.def.Load() && !(*r.def.Load() == "" && len(*r.byName.Load()) == 0):
		c.KvRelay = indexer.KvRelayConfig{}
	}
	c.ReserveTable = func(_ ckf.FormatIdentity, bytes uint64) error { return r.reserve(d, bytes) }
	svc, err := indexer.New(r.nc, r.js, c)
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
		return r.refuseLocked(&Error{Kind: ErrTableMemory, Domain: d.name,
			Detail: fmt.Sprintf("a table of %d bytes over the %d reserved passes the bound of %d", bytes, r.tableBytes, r.cfg.MaxTableBytes)})
	}
	r.tableBytes += bytes
	d.table.Store(bytes)
	r.m.tableBytes.Set(float64(r.tableBytes))
	return nil
}

// Remove stops serving name and frees its table; false when it was not
// served.
func (r *Registry) Remove(name string) bool {
	r.mu.Lock()
	cur := *r.byName.Load()
	d, ok := cur[name]
	if ok {
		next := maps.Clone(cur)
		delete(next, name)
		r.byName.Store(&next)
		r.m.domains.Set(float64(len(next)))
		names := maps.Clone(*r.names.Load())
		maps.DeleteFunc(names, func(_, dn string) bool { return dn == name })
		r.names.Store(&names)
		// A later catalog update that lists the model adds its domain again.
		delete(r.modelsDone, d.model)
	}
	r.mu.Unlock()
	if !ok {
		return false
	}
	if d.cancel != nil {
		d.cancel()
		<-d.done
	}
	d.metrics.Close()
	r.mu.Lock()
	r.tableBytes -= d.table.Swap(0)
	r.m.tableBytes.Set(float64(r.tableBytes))
	r.mu.Unlock()
	r.log.Info().Str("domain", name).Msg("domain removed")
	return true
}

// Service returns the service of a served domain.
func (r *Registry) Service(name string) (*indexer.Service, bool) {
	d, ok := (*r.byName.Load())[name]
	if !ok {
		return nil, false
	}
	return d.svc, true
}

// Domains lists the served domains, sorted.
func (r *Registry) Domains() []string {
	return slices.Sorted(maps.Keys(*r.byName.Load()))
}

// TableBytes is the table memory reserved by every domain.
func (r *Registry) TableBytes() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tableBytes
}

// resolve finds the domain a query names: by its name, else by a kvrelay
// model's name.
func (r *Registry) resolve(name string) (*domain, bool) {
	by := *r.byName.Load()
	if d, ok := by[name]; ok {
		return d, true
	}
	if dn, ok := (*r.names.Load())[name]; ok {
		d, ok := by[dn]
		return d, ok
	}
	return nil, false
}

// lookup finds the domain a query names, or the default one.
func (r *Registry) lookup(model string) (*domain, error) {
	by := *r.byName.Load()
	if model == "" {
		if len(by) == 1 {
			for _, d := range by {
				return d, nil
			}
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
	by := *r.byName.Load()
	for _, name := range slices.Sorted(maps.Keys(by)) {
		out = append(out, by[name].svc.Lanes()...)
	}
	return out
}

// Ready reports whether some domain is ready; DomainReady answers for one.
func (r *Registry) Ready() bool {
	for _, d := range *r.byName.Load() {
		if d.svc.Ready() {
			return true
		}
	}
	return false
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

var (
	_ queryapi.DomainBackend = (*Registry)(nil)
	_ queryapi.RouteBackend  = (*Registry)(nil)
)
