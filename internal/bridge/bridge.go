// Package bridge subscribes to the ZMQ KV-event streams of vLLM / SGLang
// engines and publishes each batch, converted to Dynamo RouterEvent JSON
// (internal/engine), on the KVEVENTS stream subject
// kvevents.<domain>.<dc>.<worker_id> the relay consumes.
//
// Per engine it keeps sequence discipline (docs/engine-kv-events.md §1.2–1.3, §6):
// replay from the last applied batch on every connect, replay of gaps,
// an unrecoverable gap reported and the worker cleared, an engine restart
// detected (the sequence goes back, or replay returns other bytes for the
// batch we last applied) and the worker cleared. Each batch is published
// with a JetStream acknowledgement and the message id
// "<endpoint>#<epoch>#<seq>", so a re-send after a crash is deduplicated;
// the last acknowledged position per engine is kept in a JetStream KV
// bucket and a restarted bridge resumes from it.
//
// Concurrency: one goroutine per engine owns that engine's sockets and
// sequence state; Status and the checkpoint flusher read a mutex-guarded
// copy.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ckfrelay/ckfrelay/internal/engine"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Config configures a bridge (one per DC).
type Config struct {
	Domain  string
	DC      string
	Engines []EngineSpec
	// BlockSize is the router's kv_block_size; stores with another size
	// are dropped. 0 accepts every event's own block_size.
	BlockSize int
	// IndexHostPinned also indexes host-pinned (CPU) blocks.
	IndexHostPinned bool
	// Bucket holds the resume points (default DefaultBucket).
	Bucket string
	// Streams sizes KVEVENTS (and the relay's resources) if the bridge
	// creates them first.
	Streams streams.Options

	ReconnectMin, ReconnectMax time.Duration
	// ReplayIdleTimeout bounds the silence between two replay replies;
	// ReplayTimeout a whole replay.
	ReplayIdleTimeout, ReplayTimeout time.Duration
	// MaxInFlight bounds unacknowledged publishes per engine.
	MaxInFlight int
	// AckTimeout bounds the wait for one acknowledgement.
	AckTimeout time.Duration
	// CheckpointInterval paces resume-point writes.
	CheckpointInterval time.Duration
	// LoadInterval paces the scrapes of the engines' metrics endpoints and
	// the worker load reports (default DefaultLoadInterval).
	LoadInterval time.Duration
	// HTTPClient scrapes the metrics endpoints (nil: one with a timeout of
	// LoadInterval).
	HTTPClient *http.Client

	// ResubscribeCheck is how long after connecting the bridge replays
	// once more if no live batch arrived (ZMQ's slow-joiner window).
	ResubscribeCheck time.Duration

	Logger  zerolog.Logger
	Tracer  trace.TracerProvider
	Metrics prometheus.Registerer
	// Now is the clock for status times (nil = time.Now).
	Now func() time.Time
}

func (c *Config) defaults() {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.ReconnectMin <= 0 {
		c.ReconnectMin = 100 * time.Millisecond
	}
	if c.ReconnectMax <= 0 {
		c.ReconnectMax = 5 * time.Second
	}
	if c.ReplayIdleTimeout <= 0 {
		c.ReplayIdleTimeout = 2 * time.Second
	}
	if c.ReplayTimeout <= 0 {
		c.ReplayTimeout = 2 * time.Minute
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 1024
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = 10 * time.Second
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = 250 * time.Millisecond
	}
	if c.ResubscribeCheck <= 0 {
		c.ResubscribeCheck = 500 * time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.LoadInterval <= 0 {
		c.LoadInterval = DefaultLoadInterval
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: c.LoadInterval}
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if _, err := wire.WorkerEventsSubject(c.Domain, c.DC, 0); err != nil {
		errs = append(errs, fmt.Errorf("domain/dc: %w", err))
	}
	if err := validate(c.Engines); err != nil {
		errs = append(errs, err)
	}
	if c.BlockSize < 0 {
		errs = append(errs, fmt.Errorf("block size %d is negative", c.BlockSize))
	}
	return errors.Join(errs...)
}

// Bridge runs one source per engine.
type Bridge struct {
	cfg     Config
	js      jetstream.JetStream
	log     zerolog.Logger
	m       *bridgeMetrics
	tracer  trace.Tracer
	tracing bool
	prop    propagation.TextMapPropagator

	mu      sync.Mutex
	sources []*source
	running bool
}

// New returns a bridge publishing through js.
func New(cfg Config, js jetstream.JetStream) (*Bridge, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tp := cfg.Tracer
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	_, isNoop := tp.(noop.TracerProvider)
	m, err := newBridgeMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("bridge: metrics: %w", err)
	}
	return &Bridge{
		cfg:     cfg,
		js:      js,
		log:     cfg.Logger.With().Str("component", "engine-bridge").Str("dc", cfg.DC).Logger(),
		m:       m,
		tracer:  tp.Tracer("github.com/ckfrelay/ckfrelay/internal/bridge"),
		tracing: !isNoop,
		prop:    propagation.TraceContext{},
	}, nil
}

func (b *Bridge) now() time.Time { return b.cfg.Now() }

func (b *Bridge) subjectFor(worker uint64) string {
	s, _ := wire.WorkerEventsSubject(b.cfg.Domain, b.cfg.DC, worker) // validated in New
	return s
}

// Status is the bridge's /v1/status body.
type Status struct {
	Domain  string         `json:"domain"`
	DC      string         `json:"dc"`
	Running bool           `json:"running"`
	Engines []EngineStatus `json:"engines"`
}

// Status reports every engine.
func (b *Bridge) Status() Status {
	b.mu.Lock()
	srcs := append([]*source(nil), b.sources...)
	running := b.running
	b.mu.Unlock()
	st := Status{Domain: b.cfg.Domain, DC: b.cfg.DC, Running: running, Engines: make([]EngineStatus, 0, len(srcs))}
	for _, s := range srcs {
		st.Engines = append(st.Engines, s.status())
	}
	return st
}

// Run bridges until ctx ends, then waits for outstanding
// acknowledgements and writes final resume points.
func (b *Bridge) Run(ctx context.Context) error {
	if _, err := streams.Ensure(ctx, b.js, b.cfg.Streams); err != nil {
		return err
	}
	kv, err := ensureBucket(ctx, b.js, b.cfg.Bucket, b.cfg.Streams.Memory)
	if err != nil {
		return err
	}
	srcs := make([]*source, 0, len(b.cfg.Engines))
	for _, spec := range b.cfg.Engines {
		key := CheckpointKey(b.cfg.Domain, b.cfg.DC, spec)
		pos, err := loadPosition(ctx, kv, key, spec)
		switch {
		case err != nil:
			b.m.checkpoints.WithLabelValues("load_error").Inc()
			b.log.Warn().Err(err).Str("engine", spec.String()).Msg("resume point unusable; starting fresh")
		case pos.Has:
			b.m.checkpoints.WithLabelValues("restored").Inc()
			b.log.Info().Str("engine", spec.String()).Uint64("seq", pos.Seq).Uint64("epoch", pos.Epoch).Msg("resuming after the last acknowledged batch")
		}
		srcs = append(srcs, newSource(b, spec, key, pos))
	}
	b.mu.Lock()
	b.sources, b.running = srcs, true
	b.mu.Unlock()
	defer func() { b.mu.Lock(); b.running = false; b.mu.Unlock() }()

	var wg sync.WaitGroup
	for _, s := range srcs {
		wg.Go(func() { s.run(ctx) })
	}
	if w := b.loadWorkers(); len(w) > 0 {
		wg.Go(func() { b.reportLoad(ctx, b.js.Conn(), w) })
	}
	t := time.NewTicker(b.cfg.CheckpointInterval)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
			b.flush(ctx, kv, srcs)
		}
	}
	wg.Wait()
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.flush(fctx, kv, srcs)
	return nil
}

func (b *Bridge) flush(ctx context.Context, kv jetstream.KeyValue, srcs []*source) {
	for _, s := range srcs {
		p, ok := s.takeCheckpoint()
		if !ok {
			continue
		}
		if err := storePosition(ctx, kv, s.key, p); err != nil {
			s.markDirty()
			b.m.checkpoints.WithLabelValues("write_error").Inc()
			b.log.Warn().Err(err).Str("engine", s.spec.String()).Msg("resume point not stored")
			continue
		}
		b.m.checkpoints.WithLabelValues("written").Inc()
	}
}

func (b *Bridge) countStats(c *convertCounters, st *engine.Stats) {
	c.stored.Add(float64(st.Stored))
	c.removed.Add(float64(st.Removed))
	c.cleared.Add(float64(st.Cleared))
	b.m.blocks.Add(float64(st.Blocks))
	c.tier.Add(float64(st.TierFiltered))
	c.unknownMedium.Add(float64(st.UnknownMedium))
	c.blockSize.Add(float64(st.BlockSizeMismatch))
	c.nonMain.Add(float64(st.NonMainGroup))
	c.remote.Add(float64(st.RemoteLocality))
	c.dupHash.Add(float64(st.DuplicateHashes))
	c.emptyStore.Add(float64(st.EmptyStores))
	c.shortTokens.Add(float64(st.ShortTokens))
}
