package relay

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/retry"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// HeaderEventTime carries, on a delta, the JetStream time (unix nanos) of
// the oldest input event whose effect the delta publishes. The indexer
// turns it into event→queryable latency.
const HeaderEventTime = "Ckf-Event-Time"

// Config configures one relay (one DC pool).
type Config struct {
	Domain string
	DC     string
	// Instance names this relay process in leases and heartbeats.
	Instance string
	// CKF sizes the filter and selects the hash mode. Its publication
	// cadence is managed by the relay (timer and FlushEvents).
	CKF ckf.Config
	// PublishInterval is the longest an applied event waits before its
	// delta is cut.
	PublishInterval time.Duration
	// FlushEvents cuts a delta early after this many events.
	FlushEvents int
	// FlushWhenIdle cuts a delta whenever the input queue is momentarily
	// empty instead of waiting for PublishInterval: an event is published
	// as soon as the relay has nothing else queued, while under load the
	// events that arrive during a publish form the next batch.
	FlushWhenIdle bool
	// SnapshotInterval publishes a fresh barrier snapshot periodically so
	// a new consumer never replays much.
	SnapshotInterval time.Duration
	// CheckpointInterval paces checkpoints of the exact pool state (with
	// the input sequence they cover) to the snapshot Object Store while
	// publishing, plus one on a graceful stop; a restart restores the
	// latest and replays only the input after it. 0 disables them (a
	// restart then replays the whole input subject).
	CheckpointInterval time.Duration
	// HeartbeatInterval paces drain markers (when the sequence moved) and
	// heartbeats (when it did not).
	HeartbeatInterval time.Duration
	// LeaseTTL is the producer lease time-to-live; it is renewed every
	// third of it.
	LeaseTTL time.Duration
	// MaxTrackedBlocks bounds the exact ownership: while the pool tracks
	// this many distinct blocks, stored events are refused (counted in
	// ckf_relay_refused_events_total) and the relay reports the
	// tracked_blocks fault (log, /v1/status, ckf_relay_fault) instead of
	// growing. 0 = DefaultTrackedBlocksFactor × CKF.ExpectedBlocksPerDC.
	MaxTrackedBlocks uint64
	// RestartBackoffMin and RestartBackoffMax space the relay's attempts
	// after an epoch ends in failure (or its setup fails): the wait starts
	// at the minimum and doubles up to the maximum while failures repeat,
	// so a deleted stream or bucket is recreated without a hot loop of
	// epochs. Defaults 50ms and 10s.
	RestartBackoffMin time.Duration
	RestartBackoffMax time.Duration
	// UploadMinRate is the slowest rate, in bytes per second, at which a
	// snapshot body may still reach the object store: its put times out
	// after uploadGrace plus its size at this rate. A fixed timeout capped
	// the lane a slow WAN link could carry (32 MiB at 10 Mbit/s needs 27 s
	// of the link to itself). 0 = DefaultUploadMinRate.
	UploadMinRate int64
	// MaxDeltaImages splits larger publications into consecutive deltas so
	// each fits a NATS message.
	MaxDeltaImages int
	// Streams sizes the JetStream resources if the relay creates them
	// (Streams.Replicas also sizes the lease bucket).
	Streams streams.Options
	// InputJS, when set, is where the input stream KVEVENTS lives: the DC's
	// own JetStream domain, so workers publish locally and durably and a
	// WAN cut loses nothing. The lanes, snapshots and leases stay on the
	// JetStream passed to New (the hub's domain). Nil: one site for all.
	InputJS jetstream.JetStream
	// Setup paces the retries of the start-up steps (ensure the streams,
	// open the lease bucket, register the lane) while NATS or the hub's
	// JetStream is not reachable yet. The zero value uses retry's defaults.
	Setup retry.Policy
	// KVCapacityBlocks is the pool's KV capacity in blocks (the sum over
	// its workers) for the load windows' occupancy; 0 takes the capacities
	// the workers declare in their load reports (none: occupancy unknown).
	KVCapacityBlocks uint64
	// LoadInterval paces the load windows (default DefaultLoadInterval).
	LoadInterval time.Duration
	// WorkerLoadFresh is how long a worker's load report counts (default
	// DefaultWorkerLoadFresh, three of the bridge's 1 s scrapes).
	WorkerLoadFresh time.Duration
	// KvRelay, when set, makes the relay a dynamo.kvrelay.v1 publication
	// (Relay.Publication) of this pool, described by the spec.
	KvRelay *server.PoolSpec

	Logger zerolog.Logger
	Tracer trace.TracerProvider
	// Metrics receives the relay's series (nil: a private registry). One
	// relay per registerer: a second registration fails New.
	Metrics prometheus.Registerer
}

// DefaultConfig returns production defaults for domain and dc.
func DefaultConfig(domain, dc string) Config {
	host, _ := os.Hostname()
	c := ckf.NewConfig(1 << 20)
	return Config{
		Domain:             domain,
		DC:                 dc,
		Instance:           fmt.Sprintf("%s-%d-%s", host, os.Getpid(), strconv.FormatInt(time.Now().UnixNano()%1e6, 36)),
		CKF:                c,
		PublishInterval:    10 * time.Millisecond,
		FlushEvents:        4096,
		FlushWhenIdle:      true,
		SnapshotInterval:   5 * time.Minute,
		CheckpointInterval: time.Minute,
		HeartbeatInterval:  time.Second,
		LeaseTTL:           10 * time.Second,
		MaxDeltaImages:     64 << 10,
		Streams:            streams.Options{EventMaxAge: DefaultInputMaxAge, EventMaxBytes: DefaultInputMaxBytes},
		Logger:             zerolog.Nop(),
	}
}

// DefaultUploadMinRate is 1 MiB/s (about 8.4 Mbit/s): a 32 MiB lane's
// snapshot body gets 30 s + 32 s.
const DefaultUploadMinRate = 1 << 20

// uploadGrace is the part of an upload's timeout that does not depend on
// its size: connection set-up, the object store's info and chunk acks.
const uploadGrace = 30 * time.Second

// uploadTimeout bounds the put of a body of size bytes.
func (c *Config) uploadTimeout(size int) time.Duration {
	rate := c.UploadMinRate
	if rate <= 0 {
		rate = DefaultUploadMinRate
	}
	return uploadGrace + time.Duration(float64(size)/float64(rate)*float64(time.Second))
}

// Input retention defaults (applied when the relay creates KVEVENTS): a
// day of events is 1,440 default checkpoint intervals, so a restart always
// finds the input after its latest checkpoint; 16 GiB bounds the disk a
// flood of events can take.
const (
	DefaultInputMaxAge   = 24 * time.Hour
	DefaultInputMaxBytes = 16 << 30
)

// DefaultTrackedBlocksFactor sets the default MaxTrackedBlocks: a CKF sized
// for n blocks holds about 1.6 n before inserts fail, so 4 n leaves room
// for capacity omissions without letting one bus client grow the relay
// without bound.
const DefaultTrackedBlocksFactor = 4

// maxTrackedBlocks returns the effective bound.
func (c *Config) maxTrackedBlocks() uint64 {
	if c.MaxTrackedBlocks != 0 {
		return c.MaxTrackedBlocks
	}
	return DefaultTrackedBlocksFactor * c.CKF.ExpectedBlocksPerDC
}

func (c *Config) loadInterval() time.Duration {
	if c.LoadInterval > 0 {
		return c.LoadInterval
	}
	return DefaultLoadInterval
}

func (c *Config) workerLoadFresh() time.Duration {
	if c.WorkerLoadFresh > 0 {
		return c.WorkerLoadFresh
	}
	return DefaultWorkerLoadFresh
}

func (c *Config) restartBackoff() (lo, hi time.Duration) {
	lo, hi = c.RestartBackoffMin, c.RestartBackoffMax
	if lo <= 0 {
		lo = 50 * time.Millisecond
	}
	if hi <= 0 {
		hi = 10 * time.Second
	}
	return lo, max(lo, hi)
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("relay: invalid config")

// Validate reports the first unusable field.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	if err := wire.ValidateName("domain", c.Domain); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := wire.ValidateName("dc", c.DC); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.Instance == "" {
		return bad("instance must not be empty")
	}
	cfg := c.CKF
	cfg.PublishEveryNEvents = 1
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if _, err := cfg.Format(); err != nil {
		return fmt.Errorf("%w: expected blocks: %w", ErrConfig, err)
	}
	switch {
	case c.PublishInterval <= 0:
		return bad("publish interval must be positive")
	case c.FlushEvents <= 0:
		return bad("flush events must be positive")
	case c.SnapshotInterval <= 0:
		return bad("snapshot interval must be positive")
	case c.CheckpointInterval < 0:
		return bad("checkpoint interval must not be negative (0 disables checkpoints)")
	case c.HeartbeatInterval <= 0:
		return bad("heartbeat interval must be positive")
	case c.LeaseTTL < 3*time.Millisecond:
		return bad("lease ttl %s is too short", c.LeaseTTL)
	case c.MaxTrackedBlocks != 0 && c.MaxTrackedBlocks < c.CKF.ExpectedBlocksPerDC:
		return bad("max tracked blocks %d is below the expected blocks %d", c.MaxTrackedBlocks, c.CKF.ExpectedBlocksPerDC)
	case c.Streams.EventMaxAge < 0 || c.Streams.EventMaxBytes < 0:
		return bad("input retention must not be negative")
	case c.Streams.EventMaxAge > 0 && c.CheckpointInterval > 0 && c.Streams.EventMaxAge < 2*c.CheckpointInterval:
		return bad("input max age %s is less than twice the checkpoint interval %s: a restart could find events already dropped", c.Streams.EventMaxAge, c.CheckpointInterval)
	case c.LoadInterval < 0 || c.WorkerLoadFresh < 0:
		return bad("load interval and worker load freshness must not be negative (0: the defaults)")
	case c.UploadMinRate < 0:
		return bad("upload min rate must not be negative (0: %d bytes/s)", DefaultUploadMinRate)
	case c.MaxDeltaImages <= 0 || c.MaxDeltaImages > wire.MaxDeltaImages:
		return bad("max delta images must be within 1..%d", wire.MaxDeltaImages)
	}
	if err := c.Streams.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.KvRelay != nil {
		if err := c.KvRelay.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if c.MaxDeltaImages > cbi1.MaxDeltaImages {
			return bad("max delta images %d exceeds a CBI1 frame (%d)", c.MaxDeltaImages, cbi1.MaxDeltaImages)
		}
	}
	return nil
}

func (c *Config) tracer() trace.Tracer {
	tp := c.Tracer
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer("github.com/ckfrelay/ckfrelay/internal/relay")
}
