package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
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
	"github.com/ckfrelay/ckfrelay/internal/kvrelay"
)

// ServiceName is the gRPC service the server registers (and reports in the
// health service).
const ServiceName = "dynamo.kvrelay.v1.KvEventRelay"

// Server serves one pool over dynamo.kvrelay.v1. Safe for concurrent use.
type Server struct {
	kvrelayv1.UnimplementedKvEventRelayServer

	cfg    Config
	pub    Publication
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

	catalogSubs, poolStreams, poolSubs, readinessSubs, loadSubs, servingLoadSubs limiter

	mu                sync.Mutex // guards the views below
	view              view
	load, servingLoad window
}

// view is the catalog and readiness projection of the current generation.
type view struct {
	inited       bool
	ok           bool
	key          kvrelay.ProducerKey
	catalogRev   uint64
	catalog      *kvrelayv1.KvPoolCatalogSnapshot
	readinessRev uint64
	entries      []*kvrelayv1.TopologyEntry
	gen          Generation
}

// window caches the load window of one sequence so every subscriber sees
// the same content for it.
type window struct {
	seq   uint64
	built bool
	at    time.Time
	gen   Generation
	ok    bool
	load  PoolLoad
	// serving is the pool's serving load when servingOK (§6.4).
	serving   ServingLoad
	servingOK bool
}

// New builds a server for pub; Serve starts it.
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
		cfg: cfg, pub: pub, log: cfg.Logger.With().Str("component", "kvrelay").Logger(), m: m,
		relay: &kvrelayv1.RelayIdentity{DrtInstanceId: drt, RelayIncarnation: inc},
		start: time.Now(), done: make(chan struct{}),
		catalogSubs: limiter{max: int64(cfg.MaxCatalogSubscribers)}, poolStreams: limiter{max: int64(cfg.MaxPoolStreams)},
		poolSubs: limiter{max: int64(cfg.MaxSubscribersPerPool)}, readinessSubs: limiter{max: int64(cfg.MaxReadinessSubscribers)},
		loadSubs: limiter{max: int64(cfg.MaxLoadSubscribers)}, servingLoadSubs: limiter{max: int64(cfg.MaxServingLoadSubscribers)},
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

// current returns the catalog/readiness view, bumping the revisions when the
// generation changed since the last call, and the channel of the next change.
func (s *Server) current() (view, <-chan struct{}) {
	changed := s.pub.Changed()
	gen, ok := s.pub.Generation()
	s.mu.Lock()
	defer s.mu.Unlock()
	v := &s.view
	if !v.inited || v.ok != ok || v.key != gen.Key {
		first := !v.inited
		v.inited, v.ok, v.key, v.gen = true, ok, gen.Key, gen
		v.catalog = &kvrelayv1.KvPoolCatalogSnapshot{}
		v.entries = nil
		if ok {
			v.catalog.Pools = []*kvrelayv1.KvPoolDescriptor{gen.Descriptor}
			v.entries = []*kvrelayv1.TopologyEntry{readinessEntry(gen.Descriptor)}
		}
		switch {
		case first && !ok:
			v.catalogRev, v.readinessRev = 0, 1
		case first:
			v.catalogRev, v.readinessRev = 1, 1
		default:
			v.catalogRev++
			v.readinessRev++
		}
	}
	return *v, changed
}

// readinessEntry is the pool's serving topology while it is published: one
// member, READY (§6.2); a legacy (role-less) member is READY under legacy
// fallback, with no present roles listed.
func readinessEntry(d *kvrelayv1.KvPoolDescriptor) *kvrelayv1.TopologyEntry {
	legacy := slices.Contains(d.PoolRoles, kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY)
	present := []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY}
	if !legacy {
		present = slices.Clone(d.PoolRoles)
	}
	return &kvrelayv1.TopologyEntry{
		Namespace:            d.ServingEndpoint.Namespace,
		CanonicalModelId:     d.Registrations[0].CanonicalModelId,
		State:                kvrelayv1.ServingReadinessState_SERVING_READINESS_STATE_READY,
		PresentRoles:         present,
		Members:              []*kvrelayv1.TopologyMember{{Endpoint: d.ServingEndpoint, Roles: d.PoolRoles, PoolId: d.Producer.PoolId}},
		LegacyFallbackActive: legacy,
	}
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
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return fail(s.endErr(ctx))
		case <-changed:
			v, changed = s.current()
			if rev(v) == last {
				continue
			}
		case <-hb.C:
			v, changed = s.current()
		}
		if err := send(v); err != nil {
			return err
		}
		last = rev(v)
	}
}

// loadWindow returns the window of the current sequence (§6.3): window 0 at
// start, one more every LoadWindow.
func (s *Server) loadWindow(w *window) (window, time.Time) {
	now := time.Now()
	seq := uint64(now.Sub(s.start) / s.cfg.LoadWindow)
	next := s.start.Add(time.Duration(seq+1) * s.cfg.LoadWindow)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !w.built || w.seq != seq {
		gen, ok := s.pub.Generation()
		*w = window{seq: seq, built: true, at: now, gen: gen, ok: ok}
		if ok {
			w.load = s.pub.Load()
			w.serving, w.servingOK = s.pub.ServingLoad()
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
		if w.ok {
			u.Pools = []*kvrelayv1.KvPoolLoadEntry{{
				Producer: w.gen.Descriptor.Producer, KvUsedBlocks: w.load.UsedBlocks, TotalKvBlocks: w.load.TotalBlocks,
				KvObservedRanks: w.load.ObservedRanks, KvExpectedRanks: w.load.ExpectedRanks,
			}}
		}
		return ss.Send(u)
	}, fail)
}

// SubscribeServingLoad streams serving-load windows (§6.4). The pool's view
// is COMPLETE, with its two token gauges, when the relay has a complete
// serving load from its workers' reports; otherwise UNAVAILABLE. The
// relay sees no frontend, so the model's view is always UNAVAILABLE.
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
		if w.ok {
			d := w.gen.Descriptor
			zero := uint64(0)
			pool := &kvrelayv1.PoolServingLoad{
				Producer:   d.Producer,
				Load:       &kvrelayv1.LoadView{Tokens: &kvrelayv1.TokenLoadStats{}, Status: kvrelayv1.DataStatus_DATA_STATUS_UNAVAILABLE},
				Deployment: &kvrelayv1.PoolDeploymentStatus{},
			}
			if w.servingOK {
				prefill, decode, workers := w.serving.ActivePrefillTokens, w.serving.ActiveDecodeBlocks, w.serving.Workers
				pool.Load = &kvrelayv1.LoadView{
					Tokens:           &kvrelayv1.TokenLoadStats{ActivePrefillTokens: &prefill, ActiveDecodeBlocks: &decode},
					Status:           kvrelayv1.DataStatus_DATA_STATUS_COMPLETE,
					SourceObservedMs: ms(w.serving.SourceTime),
				}
				pool.Deployment = &kvrelayv1.PoolDeploymentStatus{LiveWorkers: &workers}
			}
			u.Pools = []*kvrelayv1.PoolServingLoad{pool}
			u.Models = []*kvrelayv1.ModelServingLoad{{
				Namespace: d.ServingEndpoint.Namespace, CanonicalModelId: d.Registrations[0].CanonicalModelId,
				Load: &kvrelayv1.LoadView{
					Requests: &kvrelayv1.RequestLifecycleStats{},
					Tokens:   &kvrelayv1.TokenLoadStats{InputTokensTotal: &zero, OutputTokensTotal: &zero},
					Status:   kvrelayv1.DataStatus_DATA_STATUS_UNAVAILABLE,
				},
				Deployment: &kvrelayv1.ModelDeploymentStatus{ServingPools: []*kvrelayv1.KvPoolId{d.Producer.PoolId}},
			}}
		}
		return ss.Send(u)
	}, fail)
}

type metrics struct {
	refusals *prometheus.CounterVec
	streams  *prometheus.GaugeVec
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
	}
	for _, c := range []prometheus.Collector{m.refusals, m.streams} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// stream counts an open stream; call the result when it ends.
func (m *metrics) stream(rpc string) func() {
	g := m.streams.WithLabelValues(rpc)
	g.Inc()
	return g.Dec
}
