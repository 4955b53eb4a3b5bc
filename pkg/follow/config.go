package follow

import (
	"math/bits"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/lanerules"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/retry"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Defaults of zero Config fields.
const (
	DefaultBootstrapBackoffMin = 50 * time.Millisecond
	DefaultBootstrapBackoffMax = 2 * time.Second
	// DefaultLaneStaleAfter is the default LaneStaleAfter (the binary's:
	// lanerules).
	DefaultLaneStaleAfter = lanerules.DefaultLaneStaleAfter
	// DefaultStatePollInterval is how often an active lane runner checks
	// the pool's admission state, in case a fault notification was dropped.
	DefaultStatePollInterval = 250 * time.Millisecond
	// DefaultPoolRebuildMin and DefaultPoolRebuildMax bound the spacing of
	// ingestion pool rebuilds after worker failures.
	DefaultPoolRebuildMin = time.Second
	DefaultPoolRebuildMax = 30 * time.Second
	// DefaultSnapshotFetchTimeout is the base deadline of one attempt to
	// read a snapshot body from the Object Store; each attempt also gets
	// SnapshotFetchBytesPerSecond's share of the body size on top.
	DefaultSnapshotFetchTimeout = lanerules.DefaultSnapshotFetchTimeout
	// DefaultSupersededFaultAfter is how long an active lane may drop
	// superseded traffic without seeing any of its installed epoch before
	// it reports a superseded_traffic fault and bootstraps again.
	DefaultSupersededFaultAfter = 5 * time.Second
	// DefaultStreamCheckInterval is how often the indexer checks that the
	// lane stream still exists and is the same incarnation.
	DefaultStreamCheckInterval = time.Second
	// DefaultSnapshotFetchAttempts is how many times a bootstrap tries a
	// snapshot body read that timed out before it records a lane fault.
	DefaultSnapshotFetchAttempts = 3
	// SnapshotFetchBytesPerSecond is the slowest body transfer rate a fetch
	// deadline allows for (4 MiB/s: a 32 MiB lane of 4M buckets gets 8s
	// more than the base).
	SnapshotFetchBytesPerSecond = 4 << 20
)

// Attachment is a feature served next to a service's lanes (see
// Config.Attach). Start and Stop are called once each, by Run.
type Attachment interface {
	Start() error
	Stop() error
}

// Config configures a Service. Zero fields take the documented defaults;
// Validate checks the config with those defaults applied.
type Config struct {
	// Domain is the indexer domain name (a lane-map / subject token).
	Domain string
	// ConsumerInstance is this process's consumer instance id; 0 picks a
	// random one.
	ConsumerInstance uint64
	// Format is the immutable CKF format of the indexer; nil learns it from
	// the first snapshot marker a lane reads. Lanes of another format are
	// refused (counted as wrong_format faults).
	Format *ckf.FormatIdentity
	// Pool configures the ingestion pool (zero value: consumer.DefaultPoolConfig).
	Pool consumer.PoolConfig
	// Search configures the prefix search (zero value: ckf.DefaultPrefixSearchConfig).
	Search ckf.PrefixSearchConfig
	// Logger receives structured logs (zero value: disabled).
	Logger zerolog.Logger
	// Tracer provides the lane_apply spans (nil: no-op).
	Tracer trace.TracerProvider
	// Metrics receives the indexer and API metrics (nil: a private
	// registry). One service per registry: a second registration fails New.
	Metrics *prometheus.Registry
	// Registerer, when set, receives the metrics instead of Metrics: a
	// process serving several domains registers each domain's service on
	// the process registry wrapped with a domain label (pkg/domains).
	Registerer prometheus.Registerer
	// ReserveTable, when set, is asked before the table of the first
	// ingestion pool is allocated (its bytes: 16 lanes × buckets × 8); an
	// error leaves the table unallocated and the lane that asked in
	// ErrLaneConfig, retried with backoff. A bound on the table memory of
	// a process serving several domains (pkg/domains).
	ReserveTable func(format ckf.FormatIdentity, bytes uint64) error
	// BootstrapBackoffMin and BootstrapBackoffMax bound the exponential
	// backoff between failed bootstraps of one lane (defaults 50ms and 2s).
	BootstrapBackoffMin time.Duration
	BootstrapBackoffMax time.Duration
	// StatePollInterval: see DefaultStatePollInterval.
	StatePollInterval time.Duration
	// PoolRebuildMin and PoolRebuildMax space the ingestion pool rebuilds
	// that follow worker failures: the first is immediate, each later one
	// waits an interval that starts at PoolRebuildMin and doubles up to
	// PoolRebuildMax while failures keep coming, and returns to
	// PoolRebuildMin once a pool has lasted PoolRebuildMax (defaults 1s
	// and 30s).
	PoolRebuildMin time.Duration
	PoolRebuildMax time.Duration
	// SnapshotFetchTimeout and SnapshotFetchAttempts bound the reads of a
	// snapshot body during a bootstrap: an attempt that times out (a slow
	// or stalled Object Store transfer) is retried on the same marker, and
	// only the last failure becomes a lane fault (defaults 10s and 3).
	// Without a deadline of its own, nats.go would give every read of the
	// body 5s, and one stall would cost the whole bootstrap.
	SnapshotFetchTimeout  time.Duration
	SnapshotFetchAttempts int
	// SupersededFaultAfter: see DefaultSupersededFaultAfter. A relay sends
	// a heartbeat or a drain marker every second, so a lane whose installed
	// epoch is alive never goes that long without current traffic; one that
	// does while older epochs keep arriving is following an epoch its
	// producer never used, and says so (lane fault, /v1/lanes, readiness)
	// instead of dropping the real traffic.
	SupersededFaultAfter time.Duration
	// StreamCheckInterval: see DefaultStreamCheckInterval. A deleted lane
	// stream is recreated at the next check; a recreated one (its
	// sequences restart) makes every lane bootstrap again.
	StreamCheckInterval time.Duration
	// Streams sizes the JetStream resources when this process creates them.
	Streams streams.Options
	// LeaseOptions tune the lease coordinator (bucket name, storage).
	LeaseOptions []lease.Option
	// LaneStaleAfter is the age of a lane's last relay message past which
	// its answers are marked stale (default DefaultLaneStaleAfter). The
	// relay sends a heartbeat every second by default, so a few missed
	// heartbeats mean the DC cannot reach the hub.
	LaneStaleAfter time.Duration
	// StaleLanes is what a stale lane does: StaleReport (the default)
	// keeps it in answers, marked and never best; StaleExclude leaves it
	// out of answers and of the ready set until it is fresh again.
	StaleLanes string
	// LoadMaxAge drops a lane's load older than this, by local receive
	// time (default DefaultLoadMaxAge): it then counts as missing.
	LoadMaxAge time.Duration
	// Route configures routes (route.go).
	Route RouteConfig
	// Attach, when set, adds what a service serves next to its lanes
	// (global-indexer's NATS micro endpoint, internal/indexer): New calls
	// it once with the service and the registerer of the service's
	// metrics; Run starts the attachment once its subscriptions are made
	// and stops it after the lane runners, before the pool closes. Left
	// nil (an in-process mirror), the service answers its own process
	// only.
	Attach func(s *Service, reg prometheus.Registerer) (Attachment, error)
	// KvRelay adds lanes followed over Dynamo's dynamo.kvrelay.v1 gRPC
	// protocol (kvrelay.go) to the table of the NATS lanes.
	KvRelay KvRelayConfig
	// Setup paces the retries of the start-up steps (ensure the lane
	// stream and snapshot store, open the lease bucket) while NATS or the
	// hub's JetStream is unreachable. The zero value uses retry's defaults.
	Setup retry.Policy
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Pool == (consumer.PoolConfig{}) {
		c.Pool = consumer.DefaultPoolConfig()
	}
	if c.Search == (ckf.PrefixSearchConfig{}) {
		c.Search = ckf.DefaultPrefixSearchConfig()
	}
	if c.BootstrapBackoffMin == 0 {
		c.BootstrapBackoffMin = DefaultBootstrapBackoffMin
	}
	if c.BootstrapBackoffMax == 0 {
		c.BootstrapBackoffMax = max(DefaultBootstrapBackoffMax, c.BootstrapBackoffMin)
	}
	if c.StatePollInterval == 0 {
		c.StatePollInterval = DefaultStatePollInterval
	}
	if c.PoolRebuildMin == 0 {
		c.PoolRebuildMin = DefaultPoolRebuildMin
	}
	if c.PoolRebuildMax == 0 {
		c.PoolRebuildMax = max(DefaultPoolRebuildMax, c.PoolRebuildMin)
	}
	if c.SnapshotFetchTimeout == 0 {
		c.SnapshotFetchTimeout = DefaultSnapshotFetchTimeout
	}
	if c.SnapshotFetchAttempts == 0 {
		c.SnapshotFetchAttempts = DefaultSnapshotFetchAttempts
	}
	if c.SupersededFaultAfter == 0 {
		c.SupersededFaultAfter = DefaultSupersededFaultAfter
	}
	if c.StreamCheckInterval == 0 {
		c.StreamCheckInterval = DefaultStreamCheckInterval
	}
	if c.LaneStaleAfter == 0 {
		c.LaneStaleAfter = DefaultLaneStaleAfter
	}
	if c.StaleLanes == "" {
		c.StaleLanes = StaleReport
	}
	if c.LoadMaxAge == 0 {
		c.LoadMaxAge = DefaultLoadMaxAge
	}
	if c.KvRelay.StaleAfter == 0 {
		c.KvRelay.StaleAfter = DefaultKvRelayStaleAfter
	}
	return c
}

// Validate checks the config (with defaults applied). Errors match
// ErrInvalidConfig and, where one exists, the underlying package's error.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := wire.ValidateName("domain", c.Domain); err != nil {
		return &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "domain", Err: err}
	}
	if err := c.Pool.Validate(); err != nil {
		return &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "pool", Err: err}
	}
	if err := c.Streams.Validate(); err != nil {
		return &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "streams", Err: err}
	}
	if err := c.Search.Validate(); err != nil {
		return &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "search", Err: err}
	}
	if c.BootstrapBackoffMin < 0 || c.BootstrapBackoffMax < c.BootstrapBackoffMin {
		return configError("bootstrap_backoff", "want 0 < min (%s) <= max (%s)", c.BootstrapBackoffMin, c.BootstrapBackoffMax)
	}
	if c.PoolRebuildMin < 0 || c.PoolRebuildMax < c.PoolRebuildMin {
		return configError("pool_rebuild", "want 0 < min (%s) <= max (%s)", c.PoolRebuildMin, c.PoolRebuildMax)
	}
	if c.SnapshotFetchTimeout < 0 {
		return configError("snapshot_fetch_timeout", "negative timeout %s", c.SnapshotFetchTimeout)
	}
	if c.SnapshotFetchAttempts < 0 {
		return configError("snapshot_fetch_attempts", "negative count %d", c.SnapshotFetchAttempts)
	}
	if c.StreamCheckInterval < 0 {
		return configError("stream_check_interval", "negative interval %s", c.StreamCheckInterval)
	}
	if c.SupersededFaultAfter < 0 {
		return configError("superseded_fault_after", "negative duration %s", c.SupersededFaultAfter)
	}
	if c.StatePollInterval < 0 {
		return configError("state_poll_interval", "negative interval %s", c.StatePollInterval)
	}
	if c.LaneStaleAfter < 0 {
		return configError("lane_stale_after", "negative duration %s", c.LaneStaleAfter)
	}
	if err := c.Route.validate(); err != nil {
		return err
	}
	if c.LoadMaxAge < 0 {
		return configError("load_max_age", "negative duration %s", c.LoadMaxAge)
	}
	if c.StaleLanes != StaleReport && c.StaleLanes != StaleExclude {
		return configError("stale_lanes", "%q: want %s or %s", c.StaleLanes, StaleReport, StaleExclude)
	}
	if c.Format != nil {
		if err := validateFormat(*c.Format); err != nil {
			return err
		}
	}
	return c.KvRelay.validate()
}

// validateFormat accepts the 1.4.0 format the wire carries.
func validateFormat(f ckf.FormatIdentity) error {
	switch {
	case f.FormatVersion != ckf.FormatVersion:
		return configError("format.format_version", "%d, want %d", f.FormatVersion, ckf.FormatVersion)
	case f.FingerprintBits != ckf.FingerprintBits:
		return configError("format.fingerprint_bits", "%d, want %d", f.FingerprintBits, ckf.FingerprintBits)
	case f.SlotsPerBucket != ckf.SlotsPerBucket:
		return configError("format.slots_per_bucket", "%d, want %d", f.SlotsPerBucket, ckf.SlotsPerBucket)
	case f.BucketCount < wire.MinBucketCount || f.BucketCount > wire.MaxBucketCount || bits.OnesCount64(f.BucketCount) != 1:
		return configError("format.bucket_count", "%d, want a power of two in %d..%d", f.BucketCount, wire.MinBucketCount, wire.MaxBucketCount)
	}
	return nil
}

// What a stale lane does (Config.StaleLanes).
const (
	StaleReport  = lanerules.StaleReport
	StaleExclude = lanerules.StaleExclude
)

// WithRules returns c following its lanes by r (zero fields of r take the
// global-indexer binary's defaults): the pool's size, apply-lag bound and
// control timeout, the format, staleness and the snapshot read deadline.
// The binary and pkg/client's Mirror both build their config this way.
func (c Config) WithRules(r lanerules.Rules) (Config, error) {
	if err := r.Validate(); err != nil {
		return c, &Error{Kind: ErrInvalidConfig, Lane: -1, Field: "rules", Err: err}
	}
	r = r.WithDefaults()
	f, _ := r.Format() // checked by Validate
	c.Pool = r.PoolConfig()
	c.Format = f
	c.LaneStaleAfter = r.LaneStaleAfter
	c.StaleLanes = r.StaleLanes
	c.SnapshotFetchTimeout = r.SnapshotFetchTimeout
	return c, nil
}
