package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// ServiceName is the gRPC service the server registers (and reports in the
// health service).
const ServiceName = "dynamo.kvrelay.v1.KvEventRelay"

// Server serves a set of pools over dynamo.kvrelay.v1 in one catalog: one
// Publication per pool, added and removed at runtime (AddPool,
// RemovePool). Safe for concurrent use.
type Server struct {
	kvrelayv1.UnimplementedKvEventRelayServer

	cfg    Config
	relay  *kvrelayv1.RelayIdentity
	log    zerolog.Logger
	m      *metrics
	gs     *grpc.Server
	health *health.Server
	start  time.Time

	// done is closed by Shutdown: every stream ends.
	done     chan struct{}
	stopOnce sync.Once
	stopping atomic.Bool

	catalogSubs, poolStreams, readinessSubs, loadSubs, servingLoadSubs limiter

	mu sync.Mutex // guards the pool set and the views below
	// pools is the pool set by name; setChanged is closed (and replaced)
	// at each change of it.
	pools             map[string]*servedPool
	setChanged        chan struct{}
	view              view
	load, servingLoad window
}

// view is the catalog and readiness projection of the published
// generations.
type view struct {
	inited       bool
	published    []published
	catalogRev   uint64
	catalog      *kvrelayv1.KvPoolCatalogSnapshot
	readinessRev uint64
	entries      []*kvrelayv1.TopologyEntry
}

// window caches the load window of one sequence so every subscriber sees
// the same content for it.
type window struct {
	seq   uint64
	built bool
	at    time.Time
	pools []windowPool
}

// windowPool is one published pool's loads in a window.
type windowPool struct {
	gen  Generation
	load PoolLoad
	// serving is the pool's serving load when servingOK (§6.4).
	serving   ServingLoad
	servingOK bool
}

// New builds a server; Serve starts it. A non-nil pub is served as the
// pool named "" (the single-pool relay); nil starts with no pool, for
// AddPool.
func New(pub Publication, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("%w: metrics: %w", ErrConfig, err)
	}
	drt, inc := cfg.identity()
	s := &Server{
		cfg: cfg, log: cfg.Logger.With().Str("component", "kvrelay").Logger(), m: m,
		relay: &kvrelayv1.RelayIdentity{DrtInstanceId: drt, RelayIncarnation: inc},
		start: time.Now(), done: make(chan struct{}),
		catalogSubs: limiter{max: int64(cfg.MaxCatalogSubscribers)}, poolStreams: limiter{max: int64(cfg.MaxPoolStreams)},
		readinessSubs: limiter{max: int64(cfg.MaxReadinessSubscribers)}, loadSubs: limiter{max: int64(cfg.MaxLoadSubscribers)},
		servingLoadSubs: limiter{max: int64(cfg.MaxServingLoadSubscribers)}, pools: map[string]*servedPool{}, setChanged: make(chan struct{}),
	}
	if pub != nil {
		s.AddPool("", pub)
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes), grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.KeepaliveInterval, Timeout: cfg.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.gs = grpc.NewServer(opts...)
	kvrelayv1.RegisterKvEventRelayServer(s.gs, s)
	s.health = health.NewServer()
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s.gs, s.health)
	reflection.Register(s.gs)
	return s, nil
}

// Relay returns the server's relay identity.
func (s *Server) Relay() *kvrelayv1.RelayIdentity { return s.relay }

// Serve serves on ln until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.log.Info().Str("addr", ln.Addr().String()).Bool("tls", s.cfg.TLS != nil).Msg("serving dynamo.kvrelay.v1")
	err := s.gs.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) || s.stopping.Load() {
		return nil
	}
	return err
}

// Shutdown marks the service NOT_SERVING, ends every stream with
// UNAVAILABLE / PUBLICATION_UNAVAILABLE and stops the server: it waits for
// the handlers to finish for at most ShutdownGrace (and until ctx ends),
// then force-closes the connections, so a stream whose client never reads
// (its handler blocked in Send) cannot hold it up.
func (s *Server) Shutdown(ctx context.Context) {
	s.stopOnce.Do(func() {
		s.stopping.Store(true)
		s.health.Shutdown()
		close(s.done)
		stopped := make(chan struct{})
		go func() { s.gs.GracefulStop(); close(stopped) }()
		grace := time.NewTimer(s.cfg.ShutdownGrace)
		defer grace.Stop()
		select {
		case <-stopped:
			return
		case <-ctx.Done():
		case <-grace.C:
		}
		s.gs.Stop()
		<-stopped
	})
}

// limiter bounds the streams of one kind.
type limiter struct {
	n   atomic.Int64
	max int64
}

func (l *limiter) acquire() bool {
	if l.n.Add(1) > l.max {
		l.n.Add(-1)
		return false
	}
	return true
}

func (l *limiter) release() { l.n.Add(-1) }

// fail maps err to its status and trailer, counts and logs the refusal.
func (s *Server) fail(rpc string, setTrailer func(md map[string][]string), subscriber string, err error) error {
	st, md := kvrelay.StatusOf(err)
	if md != nil {
		setTrailer(md)
	}
	_, reason := kvrelay.Status(err)
	s.m.refusals.WithLabelValues(rpc, reason.String()).Inc()
	ev := s.log.Info()
	if reason == kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INTERNAL {
		ev = s.log.Warn()
	}
	ev.Str("rpc", rpc).Str("subscriber", subscriber).Str("reason", reason.String()).Str("code", st.Code().String()).Err(err).Msg("kvrelay request refused or stream ended")
	return st.Err()
}

func (s *Server) streamFail(rpc string, ss grpc.ServerStream, subscriber string, err error) error {
	return s.fail(rpc, func(md map[string][]string) { ss.SetTrailer(md) }, subscriber, err)
}

// admit takes a permit of l or fails with RESOURCE_LIMIT.
// openStream is the prologue of the catalog, readiness and load streams:
// the request's validation error, then an admission permit from l, each
// ending the stream with its status (the returned err, to return as is).
// Otherwise fail ends the stream with a status later, and done releases the
// permit and the stream gauge.
func (s *Server) openStream(rpc string, ss grpc.ServerStream, subscriber string, invalid error, l *limiter, what string) (fail func(error) error, done func(), err error) {
	fail = func(err error) error { return s.streamFail(rpc, ss, subscriber, err) }
	if invalid != nil {
		return nil, nil, fail(invalid)
	}
	release, err := admit(l, what)
	if err != nil {
		return nil, nil, fail(err)
	}
	closeGauge := s.m.stream(rpc)
	return fail, func() { closeGauge(); release() }, nil
}

func admit(l *limiter, what string) (func(), error) {
	if !l.acquire() {
		return nil, fmt.Errorf("Relay total %s limit %d reached: %w", what, l.max, kvrelay.ErrResourceLimit)
	}
	return l.release, nil
}

// endErr is the error a stream ends with: shutdown, or the client went away.
func (s *Server) endErr(ctx context.Context) error {
	select {
	case <-s.done:
		return fmt.Errorf("relay shutting down: %w", kvrelay.ErrPublicationUnavailable)
	default:
	}
	return ctx.Err()
}

// GetRelayInfo answers the protocol version and relay identity.
func (s *Server) GetRelayInfo(ctx context.Context, req *kvrelayv1.RelayInfoRequest) (*kvrelayv1.RelayInfo, error) {
	if err := kvrelay.ValidateRelayInfoRequest(req); err != nil {
		return nil, s.fail("GetRelayInfo", func(md map[string][]string) { _ = grpc.SetTrailer(ctx, md) }, "", err)
	}
	return &kvrelayv1.RelayInfo{ProtocolVersion: kvrelayv1.ProtocolVersion, Relay: s.relay, ContractMarker: kvrelayv1.ContractMarker}, nil
}

// WatchKvPoolCatalog streams complete catalog snapshots: the current one,
// every change, and the same revision again every catalog heartbeat (§6.1).
func (s *Server) WatchKvPoolCatalog(req *kvrelayv1.WatchKvPoolCatalogRequest, ss kvrelayv1.KvEventRelay_WatchKvPoolCatalogServer) error {
	const rpc = "WatchKvPoolCatalog"
	fail, done, err := s.openStream(rpc, ss, req.GetSubscriberId(), kvrelay.ValidateWatchKvPoolCatalogRequest(req), &s.catalogSubs, "catalog subscriber")
	if err != nil {
		return err
	}
	defer done()
	return s.revisioned(ss.Context(), s.cfg.CatalogHeartbeat, func(v view) uint64 { return v.catalogRev }, func(v view) error {
		return ss.Send(&kvrelayv1.KvPoolCatalogUpdate{
			ProtocolVersion: kvrelayv1.ProtocolVersion, Relay: s.relay, Revision: v.catalogRev,
			Snapshot: v.catalog, ContractMarker: kvrelayv1.ContractMarker,
		})
	}, fail)
}

// SubscribeServingReadiness streams the serving topology: READY with legacy
// fallback while the pool is published, no entry otherwise (§6.2).
func (s *Server) SubscribeServingReadiness(req *kvrelayv1.SubscribeServingReadinessRequest, ss kvrelayv1.KvEventRelay_SubscribeServingReadinessServer) error {
	const rpc = "SubscribeServingReadiness"
	fail, done, err := s.openStream(rpc, ss, req.GetSubscriberId(), kvrelay.ValidateSubscribeServingReadinessRequest(req), &s.readinessSubs, "readiness subscriber")
	if err != nil {
		return err
	}
	defer done()
	return s.revisioned(ss.Context(), s.cfg.ReadinessHeartbeat, func(v view) uint64 { return v.readinessRev }, func(v view) error {
		return ss.Send(&kvrelayv1.ServingReadinessUpdate{
			ProtocolVersion: kvrelayv1.ProtocolVersion, Relay: s.relay, Revision: v.readinessRev,
			Entries: v.entries, ContractMarker: kvrelayv1.ContractMarker,
		})
	}, fail)
}

// revisioned runs a complete-snapshot stream: send the current view, again
// on every change of its revision, and unchanged every heartbeat.
func (s *Server) revisioned(ctx context.Context, heartbeat time.Duration, rev func(view) uint64, send func(view) error, fail func(error) error) error {
	v, changed := s.current()
	if err := send(v); err != nil {
		return err
	}
	last := rev(v)
	hb := time.NewTicker(heartbeat)
	defer hb.Stop()
	// The pool set and each pool's generation signal changes on their own
	// channels, as many as there are pools: a dynamic select.
	const (
		caseCtx = iota
		caseDone
		caseHeartbeat
		caseChanged
	)
	recv := func(ch any) reflect.SelectCase {
		return reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
	}
	cases := []reflect.SelectCase{recv(ctx.Done()), recv(s.done), recv(hb.C)}
	for {
		cases = cases[:caseChanged]
		for _, ch := range changed {
			cases = append(cases, recv(ch))
		}
		chosen, _, _ := reflect.Select(cases)
		switch chosen {
		case caseCtx:
			return ctx.Err()
		case caseDone:
			return fail(s.endErr(ctx))
		case caseHeartbeat:
			v, changed = s.current()
		default:
			v, changed = s.current()
			if rev(v) == last {
				continue
			}
		}
		if err := send(v); err != nil {
			return err
		}
		last = rev(v)
	}
}

// loadWindow returns the window of the current sequence (§6.3): window 0 at
// start, one more every LoadWindow, holding every published pool.
func (s *Server) loadWindow(w *window) (window, time.Time) {
	now := time.Now()
	seq := uint64(now.Sub(s.start) / s.cfg.LoadWindow)
	next := s.start.Add(time.Duration(seq+1) * s.cfg.LoadWindow)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !w.built || w.seq != seq {
		*w = window{seq: seq, built: true, at: now}
		for _, p := range s.publishedLocked() {
			wp := windowPool{gen: p.gen, load: p.pool.pub.Load()}
			wp.serving, wp.servingOK = p.pool.pub.ServingLoad()
			w.pools = append(w.pools, wp)
		}
	}
	return *w, next
}

// windowed runs a load stream: the current window, then each next one.
func (s *Server) windowed(ctx context.Context, w *window, send func(window) error, fail func(error) error) error {
	cur, next := s.loadWindow(w)
	if err := send(cur); err != nil {
		return err
	}
	last := cur.seq
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return fail(s.endErr(ctx))
		case <-t.C:
		}
		cur, next = s.loadWindow(w)
		t.Reset(time.Until(next))
		if cur.seq <= last {
			continue
		}
		last = cur.seq
		if err := send(cur); err != nil {
			return err
		}
	}
}

func ms(t time.Time) uint64 { return uint64(t.UnixMilli()) }

// SubscribeKvPoolLoad streams complete KV occupancy windows (§6.3); what the
// relay does not know is 0.
func (s *Server) SubscribeKvPoolLoad(req *kvrelayv1.SubscribeKvPoolLoadRequest, ss kvrelayv1.KvEventRelay_SubscribeKvPoolLoadServer) error {
	const rpc = "SubscribeKvPoolLoad"
	fail, done, err := s.openStream(rpc, ss, req.GetSubscriberId(), kvrelay.ValidateSubscribeKvPoolLoadRequest(req), &s.loadSubs, "load subscriber")
	if err != nil {
		return err
	}
	defer done()
	return s.windowed(ss.Context(), &s.load, func(w window) error {
		u := &kvrelayv1.KvPoolLoadUpdate{
			ProtocolVersion: kvrelayv1.ProtocolVersion, Relay: s.relay, WindowSequence: w.seq,
			ObservedMs: ms(w.at), WindowMs: uint64(s.cfg.LoadWindow.Milliseconds()), ContractMarker: kvrelayv1.ContractMarker,
		}
		for _, p := range w.pools {
			u.Pools = append(u.Pools, &kvrelayv1.KvPoolLoadEntry{
				Producer: p.gen.Descriptor.Producer, KvUsedBlocks: p.load.UsedBlocks, TotalKvBlocks: p.load.TotalBlocks,
				KvObservedRanks: p.load.ObservedRanks, KvExpectedRanks: p.load.ExpectedRanks,
			})
		}
		return ss.Send(u)
	}, fail)
}

// SubscribeServingLoad streams serving-load windows (§6.4). The pool's view
// is COMPLETE, with its two token gauges, when the relay has a complete
// serving load from its workers' reports and measured its prefill;
// DEGRADED, with live_workers but no gauges, when that prefill was
// estimated; otherwise UNAVAILABLE. The relay sees no frontend, so the
// model's view is always UNAVAILABLE.
func (s *Server) SubscribeServingLoad(req *kvrelayv1.SubscribeServingLoadRequest, ss kvrelayv1.KvEventRelay_SubscribeServingLoadServer) error {
	const rpc = "SubscribeServingLoad"
	fail, done, err := s.openStream(rpc, ss, req.GetSubscriberId(), kvrelay.ValidateSubscribeServingLoadRequest(req), &s.servingLoadSubs, "serving load subscriber")
	if err != nil {
		return err
	}
	defer done()
	return s.windowed(ss.Context(), &s.servingLoad, func(w window) error {
		u := &kvrelayv1.ServingLoadUpdate{
			ProtocolVersion: kvrelayv1.ProtocolVersion, Relay: s.relay, WindowSequence: w.seq,
			ObservedMs: ms(w.at), WindowMs: uint64(s.cfg.LoadWindow.Milliseconds()), ContractMarker: kvrelayv1.ContractMarker,
		}
		// One model entry per (namespace, canonical model), listing every
		// pool that serves it, in the pools' order.
		models := map[modelKey]*kvrelayv1.ModelServingLoad{}
		for _, p := range w.pools {
			d := p.gen.Descriptor
			pool := &kvrelayv1.PoolServingLoad{
				Producer:   d.Producer,
				Load:       &kvrelayv1.LoadView{Tokens: &kvrelayv1.TokenLoadStats{}, Status: kvrelayv1.DataStatus_DATA_STATUS_UNAVAILABLE},
				Deployment: &kvrelayv1.PoolDeploymentStatus{},
			}
			if p.servingOK {
				workers := p.serving.Workers
				pool.Deployment = &kvrelayv1.PoolDeploymentStatus{LiveWorkers: &workers}
				pool.Load = &kvrelayv1.LoadView{Tokens: &kvrelayv1.TokenLoadStats{}, SourceObservedMs: ms(p.serving.SourceTime)}
				if p.serving.PrefillEstimated {
					// An estimated prefill (waiting × a mean prompt, blind to
					// the prompts still being prefilled) is partial
					// information, and COMPLETE would have a consumer take it
					// for the engines' measured gauge. DEGRADED says the
					// workers are reporting (live_workers, source_observed_ms)
					// while §6.4 keeps both gauges for COMPLETE; a consumer
					// then treats the pool's load as unknown
					// (pkg/kvrelay/client: neutral) rather than as a queue it
					// would underestimate.
					pool.Load.Status = kvrelayv1.DataStatus_DATA_STATUS_DEGRADED
				} else {
					prefill, decode := p.serving.ActivePrefillTokens, p.serving.ActiveDecodeBlocks
					pool.Load.Status = kvrelayv1.DataStatus_DATA_STATUS_COMPLETE
					pool.Load.Tokens.ActivePrefillTokens, pool.Load.Tokens.ActiveDecodeBlocks = &prefill, &decode
				}
			}
			u.Pools = append(u.Pools, pool)
			k := modelOf(d)
			if m, ok := models[k]; ok {
				m.Deployment.ServingPools = append(m.Deployment.ServingPools, d.Producer.PoolId)
				continue
			}
			zero := uint64(0)
			m := &kvrelayv1.ModelServingLoad{
				Namespace: k.namespace, CanonicalModelId: k.model,
				Load: &kvrelayv1.LoadView{
					Requests: &kvrelayv1.RequestLifecycleStats{},
					Tokens:   &kvrelayv1.TokenLoadStats{InputTokensTotal: &zero, OutputTokensTotal: &zero},
					Status:   kvrelayv1.DataStatus_DATA_STATUS_UNAVAILABLE,
				},
				Deployment: &kvrelayv1.ModelDeploymentStatus{ServingPools: []*kvrelayv1.KvPoolId{d.Producer.PoolId}},
			}
			models[k] = m
			u.Models = append(u.Models, m)
		}
		return ss.Send(u)
	}, fail)
}

type metrics struct {
	refusals *prometheus.CounterVec
	streams  *prometheus.GaugeVec
	// poolSubs is each served pool's open pool streams, by the name the
	// pool was added under (a pools file's domain).
	poolSubs *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ckf_kvrelay_refusals_total",
			Help: "dynamo.kvrelay.v1 requests refused and streams ended with an error, by RPC and RelayErrorReason.",
		}, []string{"rpc", "reason"}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ckf_kvrelay_streams",
			Help: "Open dynamo.kvrelay.v1 streams by RPC.",
		}, []string{"rpc"}),
		poolSubs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ckf_kvrelay_pool_subscribers",
			Help: "Open SubscribeKvPool streams of each served pool, by the pool's name in this process.",
		}, []string{"pool"}),
	}
	for _, c := range []prometheus.Collector{m.refusals, m.streams, m.poolSubs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// poolStream counts an open stream of the pool name; call the result
// when it ends. The series is taken once, so a stream ending after its
// pool left (and its series was deleted) does not bring the series back.
func (m *metrics) poolStream(name string) func() {
	g := m.poolSubs.WithLabelValues(name)
	g.Inc()
	return g.Dec
}

// stream counts an open stream; call the result when it ends.
func (m *metrics) stream(rpc string) func() {
	g := m.streams.WithLabelValues(rpc)
	g.Inc()
	return g.Dec
}
