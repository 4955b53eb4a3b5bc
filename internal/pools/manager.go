package pools

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/ctxwait"
	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/internal/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/internal/promx"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/streams"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// DefaultMaxPools bounds the pools of one process when the file says
// nothing.
const DefaultMaxPools = 64

// scanInterval paces the scans of the input stream's subjects for pools
// whose first event arrived while nobody listened.
const scanInterval = 5 * time.Second

// ErrTooManyPools: a pool past max_pools was refused.
var ErrTooManyPools = errors.New("pools: too many pools")

// ErrNotAllowed: a domain neither declared nor allowed.
var ErrNotAllowed = errors.New("pools: domain not allowed")

// Config configures a Manager.
type Config struct {
	// Base is the relay configuration every pool starts from (its DC,
	// instance, cadence, sizing); Domain, Metrics, KvRelay and the
	// per-pool overrides of File are set per pool.
	Base relay.Config
	// KvRelay, when set, publishes every pool over dynamo.kvrelay.v1: each
	// pool's relay gets the descriptor metadata PoolSpec.KvRelaySpec makes
	// of its kvrelay block and these defaults (a discovered pool has no
	// block), and its Publication is handed to OnPool's callbacks' one
	// server. A pool whose metadata does not validate is refused. Nil: no
	// pool is published over kvrelay.
	KvRelay *server.PoolText
	// File declares the pools, the allow patterns and the bound.
	File File
	// Registerer is the process registry; each pool's series are
	// registered on it with the label domain (nil: a private registry).
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// pool is one running pool.
type pool struct {
	domain string
	r      *relay.Relay
	// metrics holds the pool's series, unregistered when it is removed.
	metrics *promx.Scope
	cancel  context.CancelFunc
	done    chan struct{}
	err     atomic.Pointer[error]
}

// Manager runs the pools of one DC.
type Manager struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg Config
	log zerolog.Logger
	m   *metrics

	byName atomic.Pointer[map[string]*pool]

	mu     sync.Mutex // guards cfg.File, the fields below and the writes of byName
	runCtx context.Context
	// discovering: the discovery of allowed domains runs (from Run, or
	// from the first Reload that allows some).
	discovering bool
	wg          sync.WaitGroup
	refused     map[string]bool
	// onAdd is told of every pool started (the kvrelay catalog).
	onAdd []func(domain string, r *relay.Relay)
	onDel []func(domain string)
}

// New validates cfg and builds every declared pool (started by Run).
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Manager, error) {
	if cfg.File.MaxPools == 0 {
		cfg.File.MaxPools = DefaultMaxPools
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	m := &Manager{nc: nc, js: js, cfg: cfg, m: met, refused: map[string]bool{},
		log: cfg.Logger.With().Str("component", "pools").Str("dc", cfg.Base.DC).Logger()}
	empty := map[string]*pool{}
	m.byName.Store(&empty)
	met.limit.Set(float64(cfg.File.MaxPools))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, spec := range cfg.File.Pools {
		p, err := m.newPool(spec)
		if err != nil {
			return nil, err
		}
		m.publishLocked(p)
	}
	return m, nil
}

// OnPool registers callbacks told of each pool started and removed (the
// kvrelay catalog follows them); call before Run.
func (m *Manager) OnPool(add func(domain string, r *relay.Relay), del func(domain string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onAdd = append(m.onAdd, add)
	m.onDel = append(m.onDel, del)
	for name, p := range *m.byName.Load() {
		add(name, p.r)
	}
}

// newPool builds the relay of spec (not started).
func (m *Manager) newPool(spec PoolSpec) (*pool, error) {
	c := m.cfg.Base
	c.Domain = spec.Domain
	c.KvRelay = nil
	if m.cfg.KvRelay != nil {
		ks, err := spec.KvRelaySpec(*m.cfg.KvRelay)
		if err != nil {
			return nil, err
		}
		c.KvRelay = &ks
	}
	scope := promx.NewScope(m.cfg.Registerer, prometheus.Labels{"domain": spec.Domain})
	c.Metrics = scope
	if spec.ExpectedBlocks != 0 {
		c.CKF.ExpectedBlocksPerDC = spec.ExpectedBlocks
	}
	if spec.MaxTrackedBlocks != 0 {
		c.MaxTrackedBlocks = spec.MaxTrackedBlocks
	}
	if spec.Seed != 0 {
		c.CKF.Seed = spec.Seed
	}
	if spec.Mode != "" {
		mode, err := ckf.ParseHashMode(spec.Mode)
		if err != nil {
			return nil, fmt.Errorf("pools: %s: %w", spec.Domain, err)
		}
		c.CKF.Mode = mode
	}
	r, err := relay.New(m.nc, m.js, c)
	if err != nil {
		scope.Close()
		return nil, fmt.Errorf("pools: %s: %w", spec.Domain, err)
	}
	return &pool{domain: spec.Domain, r: r, metrics: scope, done: make(chan struct{})}, nil
}

func (m *Manager) publishLocked(p *pool) {
	next := maps.Clone(*m.byName.Load())
	next[p.domain] = p
	m.byName.Store(&next)
	m.m.pools.Set(float64(len(next)))
	for _, f := range m.onAdd {
		f(p.domain, p.r)
	}
	m.log.Info().Str("domain", p.domain).Int("pools", len(next)).Msg("pool added")
}

// startLocked runs p under Run's context; a pool that fails stops alone.
func (m *Manager) startLocked(p *pool) {
	ctx, cancel := context.WithCancel(m.runCtx)
	p.cancel = cancel
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(p.done)
		if err := p.r.Run(ctx); err != nil {
			p.err.Store(&err)
			m.m.failed.WithLabelValues(p.domain).Inc()
			m.log.Error().Err(err).Str("domain", p.domain).Msg("pool stopped; the other pools go on")
		}
	}()
}

// Run starts the declared pools and adds each allowed domain on its first
// event, until ctx ends; it returns after every pool stopped.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	m.runCtx = ctx
	for _, p := range *m.byName.Load() {
		m.startLocked(p)
	}
	m.startDiscoveryLocked()
	m.mu.Unlock()
	<-ctx.Done()
	m.wg.Wait()
	return nil
}

// eventsSubjectAll is the worker events of every domain of the DC.
// startDiscoveryLocked starts the discovery of allowed domains under Run's
// context when the file allows some and it does not run yet; once started
// it runs until Run ends (a file that allows none refuses what it finds).
// m.mu held.
func (m *Manager) startDiscoveryLocked() {
	if m.discovering || len(m.cfg.File.Allow) == 0 || m.runCtx == nil {
		return
	}
	m.discovering = true
	ctx := m.runCtx
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.discover(ctx)
	}()
}

func (m *Manager) eventsSubjectAll() string { return "kvevents.*." + m.cfg.Base.DC + ".>" }

// discover adds allowed domains seen on the DC's worker events: live (a
// core subscription) and already stored in the input stream (scanned
// now and every scanInterval, for events published while not listening).
func (m *Manager) discover(ctx context.Context) {
	seen := make(chan string, 64)
	sub, err := m.nc.Subscribe(m.eventsSubjectAll(), func(msg *nats.Msg) {
		if d := domainOf(msg.Subject); d != "" {
			select {
			case seen <- d:
			default: // the scan finds it
			}
		}
	})
	if err != nil {
		m.log.Warn().Err(err).Msg("subscribing to the worker events failed; scanning the input stream only")
	} else {
		defer func() { _ = sub.Unsubscribe() }()
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			m.scan(ctx, seen)
			if !ctxwait.Sleep(ctx, scanInterval) {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-seen:
			if _, ok := (*m.byName.Load())[d]; ok {
				continue
			}
			if err := m.Add(d); err != nil && !errors.Is(err, errKnown) {
				m.log.Debug().Err(err).Str("domain", d).Msg("pool not added")
			}
		}
	}
}

// scan lists the domains with stored events in the input stream.
func (m *Manager) scan(ctx context.Context, seen chan<- string) {
	js := m.cfg.Base.InputJS
	if js == nil {
		js = m.js
	}
	s, err := js.Stream(ctx, streams.EventStream)
	if err != nil {
		return
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(m.eventsSubjectAll()))
	if err != nil {
		return
	}
	for subj := range info.State.Subjects {
		if d := domainOf(subj); d != "" {
			select {
			case seen <- d:
			case <-ctx.Done():
				return
			}
		}
	}
}

// domainOf is the domain token of kvevents.<domain>.<dc>.<worker>.
func domainOf(subject string) string {
	parts := strings.SplitN(subject, ".", 3)
	if len(parts) < 3 || parts[0] != "kvevents" || wire.ValidateToken("domain", parts[1]) != nil {
		return ""
	}
	return parts[1]
}

var errKnown = errors.New("pools: already running")

// Add starts a pool for domain: with its declared spec when the pools file
// declares it (also after a Remove), else with the process's sizing. A
// domain neither declared nor allowed, or past max_pools, is refused
// (counted, logged once); one already running is errKnown.
func (m *Manager) Add(domain string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := *m.byName.Load()
	if _, ok := cur[domain]; ok {
		return errKnown
	}
	spec, declared := m.cfg.File.Declared(domain)
	var err error
	switch {
	case m.runCtx == nil || m.runCtx.Err() != nil:
		return fmt.Errorf("pools: %s: the manager is not running", domain)
	case !declared && !m.cfg.File.Allows(domain):
		err = fmt.Errorf("%w: %q matches no allow pattern", ErrNotAllowed, domain)
		m.refuseLocked(domain, "not_allowed", err)
		return err
	case len(cur) >= m.cfg.File.MaxPools:
		err = fmt.Errorf("%w: %q would pass max_pools %d", ErrTooManyPools, domain, m.cfg.File.MaxPools)
		m.refuseLocked(domain, "too_many_pools", err)
		return err
	}
	p, err := m.newPool(spec)
	if err != nil {
		m.refuseLocked(domain, "invalid", err)
		return err
	}
	m.publishLocked(p)
	m.startLocked(p)
	return nil
}

func (m *Manager) refuseLocked(domain, kind string, err error) {
	m.m.refused.WithLabelValues(kind).Inc()
	if !m.refused[kind+"/"+domain] {
		m.refused[kind+"/"+domain] = true
		m.log.Warn().Err(err).Str("domain", domain).Msg("pool refused; the running pools are unchanged")
	}
}

// Remove retires a pool: when it holds the lease it marks its lane retired
// in the lane map, so the indexers drop the lane instead of keeping it as a
// stale one (relay.Relay.Retire), then releases the lease, as a stopping
// relay does; the manager forgets it. False when it was not running.
func (m *Manager) Remove(domain string) bool {
	m.mu.Lock()
	cur := *m.byName.Load()
	p, ok := cur[domain]
	if ok {
		next := maps.Clone(cur)
		delete(next, domain)
		m.byName.Store(&next)
		m.m.pools.Set(float64(len(next)))
		for _, f := range m.onDel {
			f(domain)
		}
	}
	m.mu.Unlock()
	if !ok {
		return false
	}
	if p.cancel != nil {
		p.r.Retire() // on purpose: its lane says so, unlike a crash's
		p.cancel()
		<-p.done
	}
	p.metrics.Close()
	m.log.Info().Str("domain", domain).Msg("pool removed")
	return true
}

// ReloadResult is what Reload did.
type ReloadResult struct {
	// Added are the declared pools started; Removed the pools stopped,
	// neither declared nor allowed any more.
	Added, Removed []string
	// Unchanged are running pools whose declared settings changed: they
	// keep the ones they run with until the process restarts, since other
	// settings would publish another CKF format on the same lane, which
	// the indexers' tables refuse.
	Unchanged []string
	// Refused are the declared pools that could not start (past
	// max_pools, or invalid), each error naming its domain.
	Refused []error
}

// ReloadFile reads the pools file anew with read (which also checks it)
// and applies it (Reload). A file read refuses changes nothing: the
// error is returned and counted.
func (m *Manager) ReloadFile(read func() (File, error)) (ReloadResult, error) {
	f, err := read()
	if err != nil {
		m.m.reloads.WithLabelValues("invalid_file").Inc()
		m.log.Error().Err(err).Msg("pools file refused on reload; the pools run as they were")
		return ReloadResult{}, err
	}
	return m.Reload(f)
}

// Reload applies f, a pools file read anew (the operator's SIGHUP): pools
// it declares start, running pools it neither declares nor allows stop
// (releasing their leases, so a standby whose file still has them takes
// over), and its allow patterns and max_pools apply from now on. The other
// running pools go on untouched.
func (m *Manager) Reload(f File) (ReloadResult, error) {
	if f.MaxPools == 0 {
		f.MaxPools = DefaultMaxPools
	}
	var res ReloadResult
	m.mu.Lock()
	if m.runCtx == nil || m.runCtx.Err() != nil {
		m.mu.Unlock()
		return res, errors.New("pools: reload: the manager is not running")
	}
	old := m.cfg.File
	m.cfg.File = f
	m.m.limit.Set(float64(f.MaxPools))
	cur := *m.byName.Load()
	for _, name := range slices.Sorted(maps.Keys(cur)) {
		spec, declared := f.Declared(name)
		if !declared && !f.Allows(name) {
			res.Removed = append(res.Removed, name)
			continue
		}
		if was, _ := old.Declared(name); !reflect.DeepEqual(was, spec) {
			res.Unchanged = append(res.Unchanged, name)
		}
	}
	m.startDiscoveryLocked()
	m.mu.Unlock()
	for _, name := range res.Removed {
		m.Remove(name)
	}
	for _, p := range f.Pools {
		if _, running := cur[p.Domain]; running {
			continue
		}
		switch err := m.Add(p.Domain); {
		case err == nil:
			res.Added = append(res.Added, p.Domain)
		case !errors.Is(err, errKnown):
			res.Refused = append(res.Refused, err)
		}
	}
	m.m.reloads.WithLabelValues("ok").Inc()
	m.log.Info().Strs("added", res.Added).Strs("removed", res.Removed).Strs("unchanged", res.Unchanged).
		Int("refused", len(res.Refused)).Msg("pools file reloaded")
	return res, nil
}

// Relay returns a running pool's relay.
func (m *Manager) Relay(domain string) (*relay.Relay, bool) {
	p, ok := (*m.byName.Load())[domain]
	if !ok {
		return nil, false
	}
	return p.r, true
}

// Domains lists the pools' domains, sorted.
func (m *Manager) Domains() []string { return slices.Sorted(maps.Keys(*m.byName.Load())) }

// Statuses is every pool's status, by domain.
func (m *Manager) Statuses() []relay.Status {
	by := *m.byName.Load()
	out := make([]relay.Status, 0, len(by))
	for _, d := range slices.Sorted(maps.Keys(by)) {
		out = append(out, by[d].r.Status())
	}
	return out
}

// Handler serves /healthz, /readyz (200 while some pool publishes;
// ?domain=NAME: that pool, 404 when not run here), /v1/status ({"pools":
// [...]}) and /metrics.
func (m *Manager) Handler(reg prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpserve.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if d := r.URL.Query().Get("domain"); d != "" {
			rl, ok := m.Relay(d)
			if !ok {
				httpserve.WriteJSON(w, http.StatusNotFound, map[string]string{"status": "no such pool"})
				return
			}
			st := rl.Status()
			code := http.StatusOK
			if st.State != relay.StateActive {
				code = http.StatusServiceUnavailable
			}
			httpserve.WriteJSON(w, code, map[string]string{"status": string(st.State)})
			return
		}
		for _, st := range m.Statuses() {
			if st.State == relay.StateActive {
				httpserve.WriteJSON(w, http.StatusOK, map[string]string{"status": "active"})
				return
			}
		}
		httpserve.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "no pool is active"})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		httpserve.WriteJSON(w, http.StatusOK, map[string]any{"pools": m.Statuses()})
	})
	if reg != nil {
		mux.Handle("GET /metrics", promx.Handler(reg))
	}
	return mux
}
