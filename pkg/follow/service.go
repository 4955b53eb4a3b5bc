package follow

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/backoff"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/ctxwait"
	"github.com/ckfrelay/ckfrelay/pkg/inflight"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/retry"
	"github.com/ckfrelay/ckfrelay/pkg/route"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// TracerName names the indexer's OpenTelemetry tracer.
const TracerName = "github.com/ckfrelay/ckfrelay/pkg/follow"

// SpanLaneApply is the span started, as a child of the relay's publish
// context carried in the delta's headers, around each delta's admission.
const SpanLaneApply = "ckf.indexer.lane_apply"

// EventTimeHeader is the delta header the relay sets to the unix time in
// nanoseconds (decimal) of the oldest worker event folded into the delta;
// the indexer derives MetricEventToQueryable from it.
const EventTimeHeader = "Ckf-Event-Time"

// Service follows one domain's lanes and answers its queries: the engine
// of the global indexer (internal/indexer) and of pkg/client's Mirror.
type Service struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	cfg      Config
	log      zerolog.Logger
	tracer   trace.Tracer
	reg      *prometheus.Registry
	m        *serviceMetrics
	attach   Attachment
	instance ckf.ConsumerInstanceID
	domainID ckf.IndexerDomainID
	// requester names this process in snapshot requests.
	requester string

	started atomic.Bool

	// Set once by Run before any runner starts; read-only afterwards.
	res   *streams.Resources
	coord *lease.Coordinator

	// laneStreamGen counts lane stream incarnations seen since Run: a lane
	// consuming under an older one bootstraps again (watchLaneStream).
	laneStreamGen atomic.Uint64

	// gen is the current pool generation, published once the first pool is
	// built and replaced by each rebuild; queries load it without locking.
	gen atomic.Pointer[poolGen]
	// labels maps lanes to the DC name and pool id string of query
	// answers (copy-on-write), formatted once per lane, not per query.
	labels atomic.Pointer[[ckf.LaneCount]laneLabel]
	// heard is, per lane, when JetStream stored the last message of the
	// lane's installed epoch (unix nanos; 0: none since the lane was
	// configured). Runners write it, queries read it without locking.
	heard [ckf.LaneCount]atomic.Int64
	// staleAfter is, per lane, its stale threshold in nanoseconds when it
	// is not Config.LaneStaleAfter (kvrelay lanes); 0: the config's.
	staleAfter [ckf.LaneCount]atomic.Int64
	// kvMetrics are the kvrelay followers' series.
	kvMetrics *client.Metrics
	// lm and loads are the load plane's (load.go): each lane's last load.
	lm    *loadMetrics
	loads [ckf.LaneCount]laneLoad
	// owners is each lane's installed (identity, epoch) (load.go), read by
	// queries without locking.
	owners [ckf.LaneCount]atomic.Pointer[laneOwner]
	// routing answers routes (route.go).
	routing *routing
	// ledger and inflight are the in-flight account of routes
	// (inflight.go); nil when it is off.
	ledger   *inflight.Ledger
	inflight *inflightState

	mu      sync.Mutex // guards the fields below
	runners [ckf.LaneCount]*laneRunner
	// retiring holds, per lane, the runner of a retired lane until it has
	// returned (retireLaneLocked); a revived lane's runner waits for it.
	retiring [ckf.LaneCount]*laneRunner
	closing  bool
	// runnerCtx is the context runners run under; set by Run.
	runnerCtx context.Context
	runnersWG sync.WaitGroup
	dispatch  sync.WaitGroup
	stopFault chan struct{}
	// limiter spaces pool rebuilds.
	limiter rebuildLimiter
	// kvRefused holds the lane map entries already refused for colliding
	// with a kvrelay lane ("lane/dc"), so each is logged once.
	kvRefused map[string]bool

	scratch sync.Pool // *consumer.QueryScratch

	// readObject reads and decodes a snapshot body; tests replace it
	// (before Run) to inject Object Store failures.
	readObject func(ctx context.Context, store jetstream.ObjectStore, mk *wire.SnapshotMarker, format ckf.FormatIdentity) ([]uint64, error)
	// rebuildDelay waits out a rate-limited pool rebuild's delay d and
	// reports whether the service still runs; tests replace it (before
	// Run) to hold a rebuild until they release it.
	rebuildDelay func(d time.Duration, stop <-chan struct{}) bool
	// now is the clock of the superseded-traffic fault, of an awaiting
	// lane's snapshot requests and of the rebuild limiter; tests replace it
	// before Run (it must be safe for concurrent use).
	now func() time.Time
	// newPool builds an ingestion pool; tests replace it (before Run) to
	// give the pool's lag watchdog a clock of their own.
	newPool func(*consumer.Indexer, consumer.PoolConfig) (*consumer.Pool, error)
}

// New validates cfg and builds a service on nc and js (which must be bound
// to nc's account and the JetStream domain holding the lanes). It does no
// I/O: Run creates the resources.
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Service, error) {
	if nc == nil || js == nil {
		return nil, configError("nats", "a connection and a JetStream context are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	domainID, err := ckf.DomainFromName(cfg.Domain)
	if err != nil {
		return nil, &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "domain", Err: err}
	}
	instance := cfg.ConsumerInstance
	for instance == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		instance = binary.LittleEndian.Uint64(b[:])
	}
	reg := cfg.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var regr prometheus.Registerer = reg
	if cfg.Registerer != nil {
		regr = cfg.Registerer
	}
	m, err := newServiceMetrics(regr)
	if err != nil {
		return nil, &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "metrics", Err: err}
	}
	kvm, err := client.NewMetrics(regr)
	if err != nil {
		return nil, &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "metrics", Err: err}
	}
	lm, err := newLoadMetrics(reg)
	if err != nil {
		return nil, &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "metrics", Err: err}
	}
	tp := cfg.Tracer
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	s := &Service{
		nc:         nc,
		js:         js,
		cfg:        cfg,
		log:        cfg.Logger.With().Str("component", "indexer").Str("domain", cfg.Domain).Str("instance", "indexer-"+strconv.FormatUint(instance, 16)).Logger(),
		tracer:     tp.Tracer(TracerName),
		reg:        reg,
		m:          m,
		instance:   ckf.ConsumerInstanceID(instance),
		domainID:   domainID,
		requester:  "indexer-" + strconv.FormatUint(instance, 16),
		stopFault:  make(chan struct{}),
		limiter:    rebuildLimiter{min: cfg.PoolRebuildMin, max: cfg.PoolRebuildMax},
		readObject: readSnapshotObject,
		rebuildDelay: func(d time.Duration, stop <-chan struct{}) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-stop:
				return false
			case <-t.C:
				return true
			}
		},
		kvMetrics: kvm,
		lm:        lm,
		routing:   newRouting(cfg.Route, cfg.Domain),
		kvRefused: map[string]bool{},
		now:       time.Now,
		newPool:   consumer.NewPool,
	}
	// The labels first: the in-flight collector reads them, and a shared
	// registry may scrape it as soon as it is registered.
	s.labels.Store(&[ckf.LaneCount]laneLabel{})
	if s.ledger, s.inflight, err = newInflight(s, regr); err != nil {
		return nil, &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "metrics", Err: err}
	}
	s.scratch.New = func() any { return new(consumer.QueryScratch) }
	if cfg.Attach != nil {
		if s.attach, err = cfg.Attach(s, regr); err != nil {
			return nil, &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "attach", Err: err}
		}
	}
	return s, nil
}

// ConsumerInstance returns this process's consumer instance id.
func (s *Service) ConsumerInstance() ckf.ConsumerInstanceID { return s.instance }

// Metrics returns the registry holding the indexer and API metrics.
func (s *Service) Metrics() *prometheus.Registry { return s.reg }

// Conn is the NATS connection the service follows its lanes on.
func (s *Service) Conn() *nats.Conn { return s.nc }

// Logger is the service's logger (component, domain and instance set).
func (s *Service) Logger() zerolog.Logger { return s.log }

// Run creates the JetStream resources, serves the NATS endpoint, follows
// the lane map and runs one lane runner per lane until ctx ends. It then
// stops the runners and the endpoint, closes the pool and returns nil; a
// setup failure is returned at once. Run may be called once.
func (s *Service) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return &Error{Kind: ErrAlreadyRunning, Lane: -1}
	}
	// The hub (or the indexer's own server) may start after the indexer:
	// retry with backoff instead of exiting, so any start order converges.
	// Only the lane side is ensured here; input streams live with the relays.
	var res *streams.Resources
	var coord *lease.Coordinator
	pol := s.cfg.Setup
	user := pol.OnRetry
	pol.OnRetry = func(attempt int, err error, wait time.Duration) {
		s.m.setupRetries.Inc()
		s.log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in_ms", wait).Msg("start-up step failed; retrying")
		if user != nil {
			user(attempt, err, wait)
		}
	}
	err := pol.Do(ctx, func(ctx context.Context) error {
		var err error
		if res, err = streams.EnsureLanes(ctx, s.js, s.cfg.Streams); err != nil {
			if errors.Is(err, streams.ErrInvalidOptions) {
				return retry.Permanent(fmt.Errorf("ensure streams: %w", err))
			}
			return fmt.Errorf("ensure streams: %w", err)
		}
		if coord, err = lease.New(ctx, s.js, s.cfg.LeaseOptions...); err != nil {
			if errors.Is(err, lease.ErrInvalidOption) {
				return retry.Permanent(fmt.Errorf("lease coordinator: %w", err))
			}
			return fmt.Errorf("lease coordinator: %w", err)
		}
		return nil
	})
	if err != nil {
		return setupError(ctx, "setup", err)
	}
	s.res, s.coord = res, coord

	loadSub, err := s.subscribeLoad()
	if err != nil {
		return fmt.Errorf("indexer: subscribe to load windows: %w", err)
	}
	defer loadSub.Unsubscribe() //nolint:errcheck // the connection may be closed already
	acctSub, err := s.subscribeAccounts()
	if err != nil {
		return fmt.Errorf("indexer: subscribe to route accounts: %w", err)
	}
	if acctSub != nil {
		defer acctSub.Unsubscribe() //nolint:errcheck // the connection may be closed already
	}
	if s.attach != nil {
		if err = s.attach.Start(); err != nil {
			return fmt.Errorf("indexer: start attachment: %w", err)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.runnerCtx = rctx
	s.mu.Unlock()
	defer s.shutdown(cancel)
	if s.ledger != nil {
		s.runnersWG.Add(1)
		go func() {
			defer s.runnersWG.Done()
			s.publishAccounts(rctx)
		}()
	}

	s.log.Info().Msg("indexer started")
	s.startKvLanes()
	if info, err := res.Lanes.Info(rctx); err == nil {
		s.runnersWG.Add(1)
		go func() {
			defer s.runnersWG.Done()
			s.watchLaneStream(rctx, info.Created)
		}()
	}
	bo := backoff.New(s.cfg.BootstrapBackoffMin, s.cfg.BootstrapBackoffMax)
	for rctx.Err() == nil {
		ch, err := coord.WatchLaneMap(rctx, s.cfg.Domain)
		if err != nil {
			s.log.Warn().Err(err).Msg("lane map watch failed; retrying")
			if !ctxwait.Sleep(rctx, bo.Next()) {
				break
			}
			continue
		}
		for m := range ch {
			bo.Reset()
			if s.laneMapRefused(m) {
				continue
			}
			s.applyLaneMap(m)
		}
		if rctx.Err() == nil {
			s.log.Warn().Msg("lane map watch ended; watching again")
			ctxwait.Sleep(rctx, bo.Next())
		}
	}
	return nil
}

// watchLaneStream checks the lane stream every StreamCheckInterval. A
// missing stream (deleted) is recreated; a stream created at another time
// than the last one seen restarts its sequences, so every lane's consumer
// position is meaningless: laneStreamGen moves and each lane bootstraps
// again from the new stream's newest marker (the relays republish theirs
// when their next publish fails). Both are counted and logged.
func (s *Service) watchLaneStream(ctx context.Context, created time.Time) {
	t := time.NewTicker(s.cfg.StreamCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		info, err := s.res.Lanes.Info(ctx)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if _, err := streams.Ensure(ctx, s.js, s.cfg.Streams); err != nil {
				s.log.Warn().Err(err).Msg("lane stream missing; recreating it failed")
				continue
			}
			s.m.streamRecreated.WithLabelValues("created").Inc()
			s.log.Warn().Msg("lane stream was missing; recreated it")
			continue
		}
		if err != nil || info.Created.Equal(created) {
			continue
		}
		if !created.IsZero() {
			s.m.streamRecreated.WithLabelValues("recreated").Inc()
		}
		s.log.Warn().Time("was_created", created).Time("created", info.Created).Msg("lane stream replaced; every lane bootstraps again")
		created = info.Created
		s.laneStreamGen.Add(1)
	}
}

// setupError reports a failed setup step, or nil when ctx ended meanwhile
// (a stop during startup is still a stop).
func setupError(ctx context.Context, step string, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("indexer: %s: %w", step, err)
}

// shutdown stops the runners, then the attachment, then the pool.
func (s *Service) shutdown(cancel context.CancelFunc) {
	cancel()
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.runnersWG.Wait()
	// The lanes go away with the service: a registry that outlives it (a
	// restarted service in the same process) keeps no stale lane series.
	s.mu.Lock()
	for _, r := range s.runners {
		if r != nil {
			r.m.remove()
			s.lm.removeLane(r.lane, r.dc)
		}
	}
	s.mu.Unlock()
	if s.attach != nil {
		if err := s.attach.Stop(); err != nil {
			s.log.Warn().Err(err).Msg("stopping the attachment")
		}
	}
	close(s.stopFault)
	s.dispatch.Wait()
	if g := s.gen.Load(); g != nil {
		_ = g.pool.Close() // always nil
	}
	s.log.Info().Msg("indexer stopped")
}

// laneMapRefused reports a lane map that must not be obeyed at all (it did
// not decode: the running lanes stay as they are) and the entries that were
// refused on read (the rest of the map applies).
func (s *Service) laneMapRefused(m lease.LaneMap) bool {
	if m.Err != nil {
		s.m.laneMapRejected.WithLabelValues("map").Inc()
		s.log.Error().Err(m.Err).Uint64("revision", m.Revision).Msg("lane map does not decode; not obeyed, running lanes kept")
		return true
	}
	for _, r := range m.Rejected {
		s.m.laneMapRejected.WithLabelValues("lane").Inc()
		s.log.Error().Str("entry", r).Uint64("revision", m.Revision).Msg("lane map entry refused")
	}
	return false
}

// applyLaneMap starts a runner for every lane entry not yet running. Lanes
// are never re-pointed, so a changed entry on a running lane is refused.
func (s *Service) applyLaneMap(m lease.LaneMap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	for lane, e := range m.Lanes {
		if e == nil || s.kvRefusesLocked(lane, e) {
			continue
		}
		if r := s.runners[lane]; r != nil {
			switch {
			case r.pool != e.Pool || r.dc != e.DcName:
				s.log.Error().Int("lane", lane).Str("dc", e.DcName).Str("running_dc", r.dc).
					Msg("lane map re-pointed a running lane; ignoring the change")
			case e.Retired():
				s.retireLaneLocked(r)
			}
			continue
		}
		if !e.Retired() {
			s.startLaneLocked(lane, e)
		}
	}
}

// retireLaneLocked stops following a lane its relay retired on purpose
// (lease.LaneEntry.RetiredAt): the lane leaves Lanes, query and route
// answers at once, its series go once its runner returned, and it is
// counted. A lane that merely went silent is never retired here: it stays
// listed as stale. The lane stays configured for its pool in the table
// (lanes are never re-pointed), so a revived entry starts a new runner
// that bootstraps from the relay's next snapshot. s.mu held.
func (s *Service) retireLaneLocked(r *laneRunner) {
	lane := r.lane
	s.runners[lane] = nil
	s.retiring[lane] = r
	labels := *s.labels.Load()
	labels[lane] = laneLabel{}
	s.labels.Store(&labels)
	s.heard[lane].Store(0)
	s.owners[lane].Store(nil)
	if g := s.gen.Load(); g != nil {
		g.pool.Indexer().RetireLaneReadiness(lane)
	}
	s.m.lanesRetired.Inc()
	r.log.Info().Msg("lane retired by its relay; no longer followed")
	if r.stop == nil {
		r.m.remove() // refused: it never ran
		s.retiring[lane] = nil
		return
	}
	r.stop()
	s.runnersWG.Add(1)
	go func() {
		defer s.runnersWG.Done()
		<-r.done
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.retiring[lane] != r {
			return // revived meanwhile: the new runner owns the lane's series
		}
		s.retiring[lane] = nil
		// The runner may have installed a snapshot while it stopped.
		if g := s.gen.Load(); g != nil {
			g.pool.Indexer().RetireLaneReadiness(lane)
		}
		r.m.remove()
		s.lm.removeLane(lane, r.dc)
	}()
}

// startLaneLocked configures lane in the pool (when it exists) and starts
// its runner. s.mu held.
func (s *Service) startLaneLocked(lane int, e *lease.LaneEntry) {
	log := s.log.With().Int("lane", lane).Str("dc", e.DcName).Logger()
	lm := s.m.forLane(lane, e.DcName)
	subj, err := wire.NewLaneSubjects(s.cfg.Domain, e.DcName)
	if err == nil && e.Pool.Domain != s.domainID {
		err = &consumer.BuildError{Kind: consumer.ErrMixedIndexerDomain, Lane: lane, Expected: s.domainID, Actual: e.Pool.Domain}
	}
	if err == nil {
		if g := s.gen.Load(); g != nil && !laneConfiguredFor(g, lane, e.Pool) {
			err = g.pool.ConfigureLane(lane, e.Pool)
			if errors.Is(err, consumer.ErrWorkerFailed) || errors.Is(err, consumer.ErrPoolClosed) {
				// The pool is failing (or its rebuild is being retried):
				// configure the shared indexer only; the rebuilt pool
				// claims every configured lane.
				s.poolFailedLocked(g)
				err = g.pool.Indexer().ConfigureLane(lane, e.Pool)
			}
		}
	}
	r := newLaneRunner(s, lane, e.DcName, e.Pool, subj, log, lm)
	prev := s.retiring[lane]
	s.retiring[lane] = nil
	s.runners[lane] = r
	s.heard[lane].Store(0)
	s.owners[lane].Store(nil)
	labels := *s.labels.Load()
	labels[lane] = laneLabel{dc: e.DcName, pool: e.Pool.String()}
	s.labels.Store(&labels)
	if err != nil {
		// The lane stays refused: a lane is never re-pointed, so retrying
		// the same configuration cannot succeed.
		lm.fault(ErrLaneConfig.String())
		r.setStatus(PhaseRefused, laneError(ErrLaneConfig, lane, err, "dc %s", e.DcName).Error())
		log.Error().Err(err).Msg("lane refused")
		return
	}
	log.Info().Str("pool", e.Pool.String()).Msg("lane added")
	ctx, stop := context.WithCancel(s.runnerCtx)
	r.stop = stop
	s.runnersWG.Add(1)
	go func() {
		defer s.runnersWG.Done()
		defer close(r.done)
		defer stop()
		if prev != nil {
			// A revived lane: its retired runner lets go of the lane first.
			select {
			case <-prev.done:
			case <-ctx.Done():
				return
			}
		}
		r.run(ctx)
	}()
}

// laneConfiguredFor reports whether g's table has lane configured for pool
// already: a lane revived after its retirement (lanes are never
// unconfigured).
func laneConfiguredFor(g *poolGen, lane int, pool ckf.PoolID) bool {
	p, ok := g.pool.Indexer().Manifest().PoolID(lane)
	return ok && p == pool
}

// ensurePool returns the current pool generation, building the first one
// with format (or Config.Format) and every lane started so far.
func (s *Service) ensurePool(format ckf.FormatIdentity) (*poolGen, error) {
	if g := s.gen.Load(); g != nil {
		return g, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.gen.Load(); g != nil {
		return g, nil
	}
	if s.closing {
		return nil, &consumer.IngestionError{Kind: consumer.ErrPoolClosed, Lane: -1}
	}
	if s.cfg.Format != nil {
		format = *s.cfg.Format
	}
	var lanes [ckf.LaneCount]*ckf.PoolID
	for lane, r := range s.runners {
		if r != nil && r.Status().State != PhaseRefused {
			pool := r.pool
			lanes[lane] = &pool
		}
	}
	man, err := consumer.NewManifest(s.instance, s.domainID, format, lanes)
	if err != nil {
		return nil, err
	}
	if s.cfg.ReserveTable != nil {
		if err := s.cfg.ReserveTable(format, TableBytesOf(format)); err != nil {
			return nil, err
		}
	}
	ix, err := consumer.NewIndexer(man, s.cfg.Search)
	if err != nil {
		return nil, err
	}
	p, err := s.newPool(ix, s.cfg.Pool)
	if err != nil {
		return nil, err
	}
	g := newPoolGen(p)
	s.gen.Store(g)
	s.log.Info().Uint64("bucket_count", format.BucketCount).Uint64("seed", format.Seed).
		Msg("ingestion pool built")
	s.dispatch.Add(1)
	go s.dispatchFaults(g)
	return g, nil
}

// dispatchFaults routes g's faults to lane runners until g is replaced or
// the service stops.
func (s *Service) dispatchFaults(g *poolGen) {
	defer s.dispatch.Done()
	for {
		select {
		case <-s.stopFault:
			return
		case <-g.replaced:
			return
		case f := <-g.pool.Faults():
			s.routeFault(g, f)
		}
	}
}

func (s *Service) routeFault(g *poolGen, f consumer.Fault) {
	s.mu.Lock()
	runners := s.runners
	s.mu.Unlock()
	if f.Kind == consumer.FaultWorkerFailed {
		s.m.workerFailures.Inc()
		s.log.Error().Int("worker", f.Worker).Msg("ingestion worker failed; rebuilding the ingestion pool")
		for lane, r := range runners {
			if w, ok := g.pool.WorkerForLane(lane); ok && w == f.Worker && r != nil {
				r.deliverFault(g, f)
			}
		}
		s.poolFailed(g)
		return
	}
	if f.Lane >= 0 && f.Lane < ckf.LaneCount && runners[f.Lane] != nil {
		runners[f.Lane].deliverFault(g, f)
	}
}

// Ready reports whether some lane is active.
func (s *Service) Ready() bool {
	p := s.currentPool()
	if p == nil {
		return false
	}
	ready := p.Indexer().ReadyLanes()
	if s.cfg.StaleLanes != StaleExclude {
		return ready != 0
	}
	now := s.now()
	for lane := range ckf.LaneCount {
		if ready&(1<<lane) != 0 {
			if _, stale := s.laneAge(lane, now); !stale {
				return true
			}
		}
	}
	return false
}

// currentPool returns the current generation's pool, or nil before the
// first is built. Every generation shares one indexer.
func (s *Service) currentPool() *consumer.Pool {
	if g := s.gen.Load(); g != nil {
		return g.pool
	}
	return nil
}

// Domain is the domain the service follows.
func (s *Service) Domain() string { return s.cfg.Domain }

// DomainReady reports, for /readyz?domain=, whether domain is this
// service's and ready.
func (s *Service) DomainReady(domain string) (ready, known bool) {
	if domain != s.cfg.Domain {
		return false, false
	}
	return s.Ready(), true
}

// checkDomain refuses a query that names a domain this service does not
// serve (a query naming none is this domain's).
func (s *Service) checkDomain(q api.Query) error {
	if q.Model != "" && q.Model != s.cfg.Domain {
		return fmt.Errorf("indexer: %q (this indexer serves %q): %w", q.Model, s.cfg.Domain, api.ErrUnknownDomain)
	}
	return nil
}

// find runs q's prefix search over the current pool into res (a value, so
// nothing in it aliases the pooled scratch). It returns api.ErrUnavailable
// when no pool or no lane is ready; op names the caller in other errors.
// A non-nil key receives the request's tie-break key (requestKey's value).
func (s *Service) find(q api.Query, res *consumer.QueryResult, op string, key *uint64) error {
	p := s.currentPool()
	if p == nil {
		return api.ErrUnavailable
	}
	sc := s.scratch.Get().(*consumer.QueryScratch)
	defer s.scratch.Put(sc)
	var err error
	switch {
	case q.Seqs != nil:
		err = p.Indexer().FindPrefixMatchesSequence(q.Seqs, sc, res)
		if key != nil {
			*key = route.KeyOf(q.Seqs)
		}
	case key != nil:
		// The search folds the key (requestKey) as it hashes the chain,
		// rather than hashing the prompt again or folding it after.
		k := route.NewKeyHash(len(q.Locals))
		_, err = p.Indexer().FindPrefixMatchesChain(q.Locals, sc, res, &k)
		*key = k.Sum()
	default:
		err = p.Indexer().FindPrefixMatches(q.Locals, sc, res)
	}
	if errors.Is(err, consumer.ErrUnavailable) {
		return api.ErrUnavailable
	}
	if err != nil {
		return fmt.Errorf("indexer: %s: %w", op, err)
	}
	return nil
}

// Match answers q over the lanes ready when the query starts. It returns
// api.ErrUnavailable when no lane is ready, and api.ErrUnknownDomain when
// q names another domain.
func (s *Service) Match(q api.Query) (api.MatchResponse, error) {
	if err := s.checkDomain(q); err != nil {
		return api.MatchResponse{}, err
	}
	var res consumer.QueryResult
	if err := s.find(q, &res, "match", nil); err != nil {
		return api.MatchResponse{}, err
	}
	labels := s.labels.Load()
	now := s.now()
	exclude := s.cfg.StaleLanes == StaleExclude
	resp := api.MatchResponse{ReadyLanes: res.CapturedReadyLanes, Blocks: q.Blocks(), Lanes: []api.LaneDepth{}}
	for _, l := range res.Lanes {
		if !l.Present {
			continue
		}
		age, stale := s.laneAge(int(l.Lane), now)
		if stale && exclude {
			resp.ReadyLanes &^= 1 << l.Lane
			continue
		}
		lbl := labels[l.Lane]
		if lbl.dc == "" {
			// Retired: a ready bit raised while its runner stopped.
			resp.ReadyLanes &^= 1 << l.Lane
			continue
		}
		resp.Lanes = append(resp.Lanes, api.LaneDepth{Lane: int(l.Lane), DC: lbl.dc, Pool: lbl.pool, Depth: l.Depth,
			AgeMs: age, Stale: stale})
	}
	if exclude && resp.ReadyLanes == 0 {
		return api.MatchResponse{}, api.ErrUnavailable
	}
	resp.SetBest()
	return resp, nil
}

// laneAge is how long ago lane last heard from its relay, in ms (-1:
// never), and whether that is past LaneStaleAfter (a lane that never
// heard from its relay is stale).
func (s *Service) laneAge(lane int, now time.Time) (ageMs int64, stale bool) {
	h := s.heard[lane].Load()
	if h == 0 {
		return -1, true
	}
	age := max(now.UnixNano()-h, 0)
	return age / int64(time.Millisecond), age > int64(s.staleFor(lane))
}

// laneLabel is how a lane is named in query answers.
type laneLabel struct{ dc, pool string }

// TableBytesOf is the size of the transposed table of format: 16 lanes ×
// the bucket count × 8 bytes.
func TableBytesOf(format ckf.FormatIdentity) uint64 {
	return ckf.LaneCount * format.BucketCount * 8
}

// TableBytes is the size of the current table (0 before the first pool):
// 16 lanes × the bucket count × 8 bytes.
func (s *Service) TableBytes() uint64 {
	p := s.currentPool()
	if p == nil {
		return 0
	}
	return p.Indexer().TableMemory().Bytes
}

// Lanes reports every lane of the lane map this service follows.
func (s *Service) Lanes() []api.LaneStatus {
	s.mu.Lock()
	runners := s.runners
	s.mu.Unlock()
	out := []api.LaneStatus{}
	for _, r := range runners {
		if r != nil {
			st := r.Status()
			st.Domain = s.cfg.Domain
			out = append(out, st)
		}
	}
	return out
}
