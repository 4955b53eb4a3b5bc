package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/internal/refusal"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// errZombie means JetStream refused a publish because another writer moved
// the lane: this relay no longer owns it.
var errZombie = errors.New("relay: lane advanced by another publisher")

// ErrLeaseLost is returned by publishing once the producer lease is gone.
var ErrLeaseLost = errors.New("relay: producer lease lost")

// Relay publishes one DC pool. Run owns all mutable state on one goroutine
// (the actor); Status and the metrics are the only concurrent readers.
type Relay struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	log zerolog.Logger
	// baseLog is log without the lane, which setup adds once registered.
	baseLog zerolog.Logger
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	m       *relayMetrics

	pool ckf.PoolID
	subj wire.LaneSubjects
	kv   *kvPublication // nil unless Config.KvRelay is set

	// The load plane (load.go): the workers' reports and the last window
	// built (read by the kvrelay load streams).
	loads    workerLoads
	lastLoad atomic.Pointer[wire.PoolLoad]
	// now is the load plane's and the refusal window's clock (tests
	// replace it before Run).
	now func() time.Time
	// refusals watches refused events per worker (input.go).
	refusals *refusal.Tracker

	mu     sync.Mutex
	status Status
	faults map[string]string // kind → detail; guarded by mu

	// retiring: the next end of Run's context is the pool's retirement
	// (Retire), not a process stop.
	retiring atomic.Bool

	// testHooks
	beforePublish        func(kind wire.MessageKind) error
	beforeCheckpointLoad func(ctx context.Context) error
	rebuildTarget        func(target uint64)
	onCut                func()

	// Bounds of the checkpoint's metadata lookup (checkpointInfo);
	// tests shorten them.
	cpInfoAttempt, cpInfoBudget time.Duration
}

// Retire makes the next end of Run's context a retirement: the pool was
// removed on purpose, so when this relay holds the lease at that moment it
// marks the lane retired in the lane map (lease.Coordinator.Retire) before
// releasing the lease, and the indexers drop the lane instead of keeping it
// as a stale one. Call it before cancelling Run's context.
func (r *Relay) Retire() { r.retiring.Store(true) }

// New validates cfg and prepares a relay; Run starts it.
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dom, err := ckf.DomainFromName(cfg.Domain)
	if err != nil {
		return nil, fmt.Errorf("%w: domain: %w", ErrConfig, err)
	}
	subj, err := wire.NewLaneSubjects(cfg.Domain, cfg.DC)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	m, err := newRelayMetrics(cfg.Metrics, cfg.DC)
	if err != nil {
		return nil, fmt.Errorf("%w: metrics: %w", ErrConfig, err)
	}
	r := &Relay{
		cfg:    cfg,
		nc:     nc,
		js:     js,
		log:    cfg.Logger.With().Str("domain", cfg.Domain).Str("dc", cfg.DC).Str("instance", cfg.Instance).Logger(),
		tracer: cfg.tracer(),
		prop:   propagation.TraceContext{},
		m:      m,
		pool:   ckf.PoolID{Domain: dom, Dc: ckf.DcIDFromName(cfg.DC)},
		subj:   subj,
		status: Status{State: StateStarting, Domain: cfg.Domain, DC: cfg.DC, Instance: cfg.Instance, Lane: -1},
		now:    time.Now,

		refusals: refusal.New(refusal.Config{}),

		cpInfoAttempt: checkpointInfoAttempt,
		cpInfoBudget:  checkpointInfoBudget,
	}
	r.baseLog = r.log
	if cfg.KvRelay != nil {
		r.kv = newKvPublication(*cfg.KvRelay, r.pool.Dc, r)
	}
	r.setState(StateStarting)
	return r, nil
}
