package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Header names of KV markers, as written by nats.go and nats-server.
const (
	kvOperationHeader = "KV-Operation"
)

// Coordinator reads and writes lane maps, producer leases, epoch counters
// and snapshot requests in one JetStream KV bucket. Every write is a
// compare-and-set on the key's latest revision (delete and purge markers
// included), so concurrent coordinators in many processes never overwrite
// each other blindly. Safe for concurrent use.
//
// Lease liveness is judged by expires_at against the coordinator's clock, so
// relays and their peers need roughly synchronised clocks; the TTL should be
// much larger than the expected skew.
type Coordinator struct {
	kv      jetstream.KeyValue
	stream  jetstream.Stream // the bucket's backing stream, for marker-aware reads
	subjPre string           // "$KV.<bucket>."
	set     settings
	// leader sends the stream API requests that only the bucket stream's
	// leader answers (leaderLatest).
	leader leaderAPI

	// now is the clock for lease expiry; tests replace it (export_test.go).
	now func() time.Time
	// snapReqSeen, when set, is called by snapshot-request watchers after each
	// request is handled (tests use it to know the watcher caught up).
	snapReqSeen func(counter uint64)
}

// New opens the coordinator's bucket through js, creating it when missing.
// js may be bound to a JetStream domain (jetstream.NewWithDomain). The bucket
// must have no TTL, because epoch counters must never expire; an existing
// bucket with a TTL fails with ErrInvalidOption.
func New(ctx context.Context, js jetstream.JetStream, opts ...Option) (*Coordinator, error) {
	set := defaultSettings()
	for _, opt := range opts {
		if err := opt(&set); err != nil {
			return nil, err
		}
	}
	kv, err := openBucket(ctx, js, set)
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("lease: bucket %s status: %w", set.bucket, err)
	}
	if st.TTL() != 0 {
		return nil, newError(ErrInvalidOption, "", "", fmt.Sprintf("bucket %s has TTL %s; epoch counters must never expire", set.bucket, st.TTL()))
	}
	stream, err := js.Stream(ctx, "KV_"+set.bucket)
	if err != nil {
		return nil, fmt.Errorf("lease: bucket %s stream: %w", set.bucket, err)
	}
	return &Coordinator{
		kv:      kv,
		stream:  stream,
		subjPre: "$KV." + set.bucket + ".",
		set:     set,
		leader:  newLeaderAPI(js, "KV_"+set.bucket),
		now:     time.Now,
	}, nil
}

func openBucket(ctx context.Context, js jetstream.JetStream, set settings) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, set.bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("lease: open bucket %s: %w", set.bucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      set.bucket,
		Description: "ckfrelay lane maps, producer leases, epoch counters, snapshot requests",
		History:     set.history,
		Storage:     set.storage,
		Replicas:    set.replicas,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		// Another process created it first (possibly with other settings).
		kv, err = js.KeyValue(ctx, set.bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("lease: create bucket %s: %w", set.bucket, err)
	}
	return kv, nil
}

// Bucket returns the KV bucket name.
func (c *Coordinator) Bucket() string { return c.set.bucket }

// latest reads a key's newest message, markers included. present is false
// for a missing key and for a delete or purge marker; rev is the revision a
// compare-and-set must name (0 when the subject holds no message at all).
// Reading markers matters: Create would skip over a marker written after our
// read, letting a stale writer win.
//
// The bucket allows direct gets, which any replica answers from its own
// store: on a clustered bucket a lagging follower, or one cut off from the
// others, answers with an old value. latest is for reads that feed a
// compare-and-set, where an old value only costs a retry (the write names
// the revision read, and the leader refuses it), and for the lane map,
// which watchers correct. A read whose answer is acted on as it stands uses
// leaderLatest.
func (c *Coordinator) latest(ctx context.Context, key string) (value []byte, rev uint64, present bool, err error) {
	m, err := c.stream.GetLastMsgForSubject(ctx, c.subjPre+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("lease: read %s: %w", key, err)
	}
	value, present = kvValue(m.Header, m.Data)
	return value, m.Sequence, present, nil
}

// leaderLatest is latest answered by the stream leader: the fencing reads
// (Verify, CurrentEpoch, CurrentLease) must not take an old lease or epoch
// from a follower's store. Where no leader can be reached (a server cut
// off from the cluster) it fails instead of answering.
func (c *Coordinator) leaderLatest(ctx context.Context, key string) (value []byte, rev uint64, present bool, err error) {
	m, err := c.leader.lastMsg(ctx, c.subjPre+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("lease: read %s from the stream leader: %w", key, err)
	}
	value, present = kvValue(m.Header, m.Data)
	return value, m.Sequence, present, nil
}

// kvValue is a KV message's value, or present=false for a delete or purge
// marker.
func kvValue(h nats.Header, data []byte) (value []byte, present bool) {
	if isMarker(h.Get(kvOperationHeader), h.Get(jetstream.MarkerReasonHeader)) {
		return nil, false
	}
	return data, true
}

func isMarker(op, reason string) bool { return op != "" || reason != "" }

// casPut writes value if the key's latest revision is still rev. A lost race
// returns an error matching jetstream.ErrKeyRevisionMismatch.
func (c *Coordinator) casPut(ctx context.Context, key string, value any, rev uint64) (uint64, error) {
	data, err := json.Marshal(value)
	if err != nil {
		return 0, fmt.Errorf("lease: encode %s: %w", key, err)
	}
	newRev, err := c.kv.Update(ctx, key, data, rev)
	if err != nil {
		if isConflict(err) {
			return 0, err
		}
		return 0, fmt.Errorf("lease: write %s: %w", key, err)
	}
	return newRev, nil
}

// isConflict reports a compare-and-set loss. Update maps the server's
// wrong-last-sequence to ErrKeyRevisionMismatch; ErrKeyExists covers the
// same condition reported for revision 0.
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

func corrupt(domain, dc, key string, err error) *Error {
	e := newError(ErrCorruptRecord, domain, dc, "key "+key)
	e.Err = err
	return e
}

func contention(domain, dc, what string, attempts int) *Error {
	return newError(ErrContention, domain, dc, fmt.Sprintf("%s: gave up after %d compare-and-set attempts", what, attempts))
}
