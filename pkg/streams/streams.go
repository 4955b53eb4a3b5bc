// Package streams holds the JetStream resources relays and indexers share: the
// input event stream, the lane stream, the snapshot object store, and the
// OpenTelemetry carrier for NATS headers. Both sides call Ensure so either
// may start first.
package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Resource names.
const (
	// EventStream captures worker KV events on kvevents.> for every domain.
	EventStream = "KVEVENTS"
	// LaneStream carries every lane's snapshot markers, deltas, drain
	// markers and heartbeats on ckf.>.
	LaneStream = "CKF_LANES"
)

// Options sizes the streams.
type Options struct {
	// LaneMaxAge bounds lane stream retention; consumers that fall further
	// behind re-bootstrap from a newer snapshot (0 = 24h).
	LaneMaxAge time.Duration
	// LaneMaxBytes bounds lane stream size (0 = 1 GiB).
	LaneMaxBytes int64
	// EventMaxAge bounds the input stream (0 = unlimited: a relay rebuilds
	// its exact state from the whole input stream).
	EventMaxAge time.Duration
	// EventMaxBytes bounds the input stream's size (0 = unlimited); the
	// oldest events go first.
	EventMaxBytes int64
	// Memory selects memory storage (tests).
	Memory bool
	// Replicas is the replica count of every stream and bucket this
	// process creates (0 = 1; production runs 3 on a clustered JetStream).
	// Existing resources keep theirs.
	Replicas int
	// EventReplicas is the replica count of the input stream KVEVENTS
	// (0 = Replicas). The input lives in a DC's own domain, often one
	// leaf node, while the lanes live on the hub's cluster: one count for
	// both would ask a single-node leaf for R3, which it refuses.
	EventReplicas int
}

// ErrInvalidOptions is wrapped by every invalid Options error.
var ErrInvalidOptions = errors.New("jsx: invalid options")

// Validate reports an unusable field.
func (o Options) Validate() error {
	if o.Replicas < 0 || o.Replicas > MaxReplicas {
		return fmt.Errorf("%w: replicas %d, want 1..%d", ErrInvalidOptions, o.Replicas, MaxReplicas)
	}
	if o.EventReplicas < 0 || o.EventReplicas > MaxReplicas {
		return fmt.Errorf("%w: input stream replicas %d, want 1..%d", ErrInvalidOptions, o.EventReplicas, MaxReplicas)
	}
	return nil
}

// MaxReplicas is JetStream's largest replica count.
const MaxReplicas = 5

func (o Options) replicas() int { return max(o.Replicas, 1) }

func (o Options) eventReplicas() int {
	if o.EventReplicas > 0 {
		return o.EventReplicas
	}
	return o.replicas()
}

func (o Options) storage() jetstream.StorageType {
	if o.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// Resources are the handles Ensure returns.
type Resources struct {
	// Events is nil when only the lane side was ensured (EnsureLanes).
	Events    jetstream.Stream
	Lanes     jetstream.Stream
	Snapshots jetstream.ObjectStore
}

// Ensure creates (or finds) the input stream, the lane stream and the
// snapshot object store in one JetStream domain (a single site).
func Ensure(ctx context.Context, js jetstream.JetStream, o Options) (*Resources, error) {
	res, err := EnsureLanes(ctx, js, o)
	if err != nil {
		return nil, err
	}
	if res.Events, err = EnsureEvents(ctx, js, o); err != nil {
		return nil, err
	}
	return res, nil
}

// EnsureEvents creates (or finds) the input stream KVEVENTS. In a
// multi-DC deployment each DC's JetStream domain holds its own, so workers
// publish locally and a WAN cut loses nothing.
func EnsureEvents(ctx context.Context, js jetstream.JetStream, o Options) (jetstream.Stream, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        EventStream,
		Description: "ckfrelay worker KV events (Dynamo RouterEvent JSON)",
		Subjects:    []string{wire.WorkerEventsPrefix + ".>"},
		Storage:     o.storage(),
		Replicas:    o.eventReplicas(),
		MaxAge:      o.EventMaxAge,
		MaxBytes:    maxBytes(o.EventMaxBytes),
		Discard:     jetstream.DiscardOld,
	})
}

// EnsureLanes creates (or finds) the lane stream and the snapshot object
// store: the router site's side (Resources.Events stays nil).
func EnsureLanes(ctx context.Context, js jetstream.JetStream, o Options) (*Resources, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.LaneMaxAge == 0 {
		o.LaneMaxAge = 24 * time.Hour
	}
	if o.LaneMaxBytes == 0 {
		o.LaneMaxBytes = 1 << 30
	}
	lanes, err := ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        LaneStream,
		Description: "ckfrelay lanes: snapshot markers, deltas, drain markers, heartbeats",
		Subjects:    []string{wire.LaneSubjectPrefix + ".>"},
		Storage:     o.storage(),
		Replicas:    o.replicas(),
		MaxAge:      o.LaneMaxAge,
		MaxBytes:    o.LaneMaxBytes,
		Discard:     jetstream.DiscardOld,
		Duplicates:  2 * time.Minute,
		AllowDirect: true,
	})
	if err != nil {
		return nil, err
	}
	snaps, err := js.ObjectStore(ctx, wire.SnapshotBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		snaps, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      wire.SnapshotBucket,
			Description: "ckfrelay barrier snapshot bodies",
			Storage:     o.storage(),
			Replicas:    o.replicas(),
		})
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			snaps, err = js.ObjectStore(ctx, wire.SnapshotBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jsx: object store %s: %w", wire.SnapshotBucket, err)
	}
	return &Resources{Lanes: lanes, Snapshots: snaps}, nil
}

// maxBytes maps "unlimited" (0) to JetStream's -1.
func maxBytes(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, cfg.Name)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("jsx: stream %s: %w", cfg.Name, err)
	}
	s, err = js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		s, err = js.Stream(ctx, cfg.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("jsx: create stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// LastLaneSequence returns the stream sequence of the newest message on a
// lane (filter ckf.<domain>.<dc>.>), 0 when the lane is empty. A relay
// publishes with it as the expected last subject sequence so a zombie
// cannot interleave.
func LastLaneSequence(ctx context.Context, s jetstream.Stream, filter string) (uint64, error) {
	m, err := s.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("jsx: last message on %s: %w", filter, err)
	}
	return m.Sequence, nil
}
