package pools

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/ctxwait"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/promx"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/unithost"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// DefaultMaxPools bounds the pools of one process when the file says
// nothing.
const DefaultMaxPools = 64

// scanInterval paces the scans of the input stream's subjects for pools
// whose first event arrived while nobody listened.
const scanInterval = 5 * time.Second

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
	// StopOnFailure ends Run when a pool fails (unithost.Config): a process
	// of a fixed pool (relay-producer without --pools-file) exits then.
	StopOnFailure bool
	Logger        zerolog.Logger
}

// pool is one running pool: a unit of the manager's host.
type pool struct {
	domain string
	r      *relay.Relay
	// metrics holds the pool's series, unregistered when it is removed.
	metrics *promx.Scope
}

func (p *pool) Run(ctx context.Context) error { return p.r.Run(ctx) }

// Manager runs the pools of one DC: the units of a unithost.Host, which
// owns their life cycle, the max_pools bound, refusals and the pool
// metrics (see its concurrency contract); the manager adds the pools
// file, discovery and the kvrelay catalog's callbacks. Safe for
// concurrent use.
type Manager struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	cfg  Config
	log  zerolog.Logger
	m    *metrics
	host *unithost.Host[*pool]

	// reloading serializes Reload.
	reloading sync.Mutex
	// file is the pools file in force (replaced by Reload); read by the
	// host's admission and build under the host's lock.
	file atomic.Pointer[File]

	mu sync.Mutex // guards the fields below; never held while calling the host
	// discovering: the discovery of allowed domains was handed to the
	// host (at New when the file allows some, or by the first Reload that
	// does).
	discovering bool
	// onAdd is told of every pool started (the kvrelay catalog).
	onAdd []func(domain string, r *relay.Relay)
	onDel []func(domain string)
}

// New validates cfg and builds every declared pool (started by Run).
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Manager, error) {
	if cfg.File.MaxPools == 0 {
		cfg.File.MaxPools = DefaultMaxPools
	}
	if err := wire.ValidateName("dc", cfg.Base.DC); err != nil {
		return nil, fmt.Errorf("pools: %w", err)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	m := &Manager{nc: nc, js: js, cfg: cfg, m: met,
		log: cfg.Logger.With().Str("component", "pools").Str("dc", cfg.Base.DC).Logger()}
	f := cfg.File
	m.file.Store(&f)
	m.host, err = unithost.New(unithost.Config[*pool]{
		Noun: "pool", Registerer: cfg.Registerer, Max: f.MaxPools, Admit: m.admits,
		Metrics: unithost.MetricNames{Units: MetricPools, Refused: MetricRefused, Limit: MetricLimit, Failed: MetricFailed, FailedLabel: "domain"},
		Build: func(domain string) (*pool, error) {
			spec, _ := m.file.Load().Declared(domain)
			return m.newPool(spec)
		},
		OnAdd: func(domain string, p *pool) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, f := range m.onAdd {
				f(domain, p.r)
			}
		},
		OnRemove: func(domain string, p *pool) {
			p.r.Retire() // on purpose: its lane says so, unlike a crash's
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, f := range m.onDel {
				f(domain)
			}
		},
		Stopped:       func(_ string, p *pool) { p.metrics.Close() },
		StopOnFailure: cfg.StopOnFailure,
		Logger:        m.log,
	})
	if err != nil {
		return nil, err
	}
	for _, spec := range f.Pools {
		if err := m.host.Add(spec.Domain); err != nil {
			return nil, err
		}
	}
	m.startDiscovery()
	return m, nil
}

// admits is the host's admission: a declared or allowed domain.
func (m *Manager) admits(domain string) bool {
	f := m.file.Load()
	_, declared := f.Declared(domain)
	return declared || f.Allows(domain)
}

// OnPool registers callbacks told of each pool started and removed (the
// kvrelay catalog follows them); call before Run.
func (m *Manager) OnPool(add func(domain string, r *relay.Relay), del func(domain string)) {
	m.mu.Lock()
	m.onAdd = append(m.onAdd, add)
	m.onDel = append(m.onDel, del)
	m.mu.Unlock()
	m.host.Each(func(name string, p *pool) bool {
		add(name, p.r)
		return true
	})
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
			scope.Close()
			return nil, fmt.Errorf("pools: %s: %w", spec.Domain, err)
		}
		c.CKF.Mode = mode
	}
	r, err := relay.New(m.nc, m.js, c)
	if err != nil {
		scope.Close()
		return nil, fmt.Errorf("pools: %s: %w", spec.Domain, err)
	}
	return &pool{domain: spec.Domain, r: r, metrics: scope}, nil
}

// Run runs the pools (the declared ones, and each allowed domain from its
// first event) until ctx ends, and returns after every pool stopped: the
// failures of the pools still run then, joined (unithost.ErrFailed), or
// nil.
func (m *Manager) Run(ctx context.Context) error { return m.host.Run(ctx) }

// startDiscovery hands the discovery of allowed domains to the host when
// the file allows some and it is not handed yet; once started it runs
// until Run ends (a file that allows none refuses what it finds).
func (m *Manager) startDiscovery() {
	m.mu.Lock()
	if m.discovering || len(m.file.Load().Allow) == 0 {
		m.mu.Unlock()
		return
	}
	m.discovering = true
	m.mu.Unlock()
	if err := m.host.Go(m.discover); err != nil {
		m.log.Warn().Err(err).Msg("discovery of allowed domains not started")
	}
}

// eventsSubjectAll is the worker events of every domain of the DC
// (wire.WorkerEventsDomainsFilter; the DC is validated by New).
func (m *Manager) eventsSubjectAll() string {
	f, _ := wire.WorkerEventsDomainsFilter(m.cfg.Base.DC)
	return f
}

// discover adds allowed domains seen on the DC's worker events: live (a
// core subscription) and already stored in the input stream (scanned
// now and every scanInterval, for events published while not listening).
func (m *Manager) discover(ctx context.Context) {
	seen := make(chan string, 64)
	sub, err := m.nc.Subscribe(m.eventsSubjectAll(), func(msg *nats.Msg) {
		if d := m.domainOf(msg.Subject); d != "" {
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
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
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
			if _, ok := m.host.Get(d); ok {
				continue
			}
			if err := m.host.Add(d); err != nil && !errors.Is(err, unithost.ErrExists) {
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
		if d := m.domainOf(subj); d != "" {
			select {
			case seen <- d:
			case <-ctx.Done():
				return
			}
		}
	}
}

// domainOf is the domain of a worker events subject of the DC
// (wire.ParseWorkerEventsSubject), "" for any other subject.
func (m *Manager) domainOf(subject string) string {
	d, dc, _, err := wire.ParseWorkerEventsSubject(subject)
	if err != nil || dc != m.cfg.Base.DC || wire.ValidateName("domain", d) != nil {
		return ""
	}
	return d
}

// Add starts a pool for domain: with its declared spec when the pools file
// declares it (also after a Remove), else with the process's sizing. A
// domain neither declared nor allowed, past max_pools or invalid is
// refused with a *unithost.Error (counted, logged once); one already
// running is unithost.ErrExists.
func (m *Manager) Add(domain string) error { return m.host.Add(domain) }

// Remove retires a pool: when it holds the lease it marks its lane retired
// in the lane map, so the indexers drop the lane instead of keeping it as a
// stale one (relay.Relay.Retire), then releases the lease, as a stopping
// relay does; the manager forgets it. False when it was not running.
func (m *Manager) Remove(domain string) bool { return m.host.Remove(domain) }

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
// (retiring their lanes and releasing their leases, so a standby whose
// file still has them takes over), and its allow patterns and max_pools
// apply from now on. The other running pools go on untouched. Reloads are
// applied one at a time.
func (m *Manager) Reload(f File) (ReloadResult, error) {
	if f.MaxPools == 0 {
		f.MaxPools = DefaultMaxPools
	}
	m.reloading.Lock()
	defer m.reloading.Unlock()
	var res ReloadResult
	old := m.file.Swap(&f)
	m.host.SetBounds(f.MaxPools, m.admits)
	running := m.host.Names()
	for _, name := range running {
		spec, declared := f.Declared(name)
		if !declared && !f.Allows(name) {
			res.Removed = append(res.Removed, name)
			continue
		}
		if was, _ := old.Declared(name); !reflect.DeepEqual(was, spec) {
			res.Unchanged = append(res.Unchanged, name)
		}
	}
	m.startDiscovery()
	for _, name := range res.Removed {
		m.Remove(name)
	}
	for _, p := range f.Pools {
		if slices.Contains(running, p.Domain) {
			continue
		}
		switch err := m.host.Add(p.Domain); {
		case err == nil:
			res.Added = append(res.Added, p.Domain)
		case !errors.Is(err, unithost.ErrExists):
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
	p, ok := m.host.Get(domain)
	if !ok {
		return nil, false
	}
	return p.r, true
}

// Domains lists the pools' domains, sorted.
func (m *Manager) Domains() []string { return m.host.Names() }

// Statuses is every pool's status, by domain.
func (m *Manager) Statuses() []relay.Status {
	out := make([]relay.Status, 0, m.host.Len())
	m.host.Each(func(_ string, p *pool) bool {
		out = append(out, p.r.Status())
		return true
	})
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
