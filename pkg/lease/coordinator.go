package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Header names of KV markers, as written by nats.go and nats-server.
const (
	kvOperationHeader = "KV-Operation"
)

// expiryMarkerTTL is how long the server keeps the marker it leaves when a
// lease key expires (the bucket's LimitMarkerTTL). The server raises every
// per-message TTL in the stream to at least this value, so it must not
// exceed the shortest lease TTL; one second is the server's minimum.
const expiryMarkerTTL = time.Second

// Coordinator reads and writes lane maps, producer leases, epoch counters
// and snapshot requests in one JetStream KV bucket. Every write is a
// compare-and-set on the key's latest revision (delete and purge markers
// included), so concurrent coordinators in many processes never overwrite
// each other blindly. Safe for concurrent use.
//
// Lease liveness never compares two hosts' clocks. The server expires a
// lease key one TTL after its last write (a per-message TTL on the bucket's
// stream), so a standby takes a lease only once its record is absent or
// replaced by a marker; the holder stops at the same TTL after the start of
// its last successful write, by its own monotonic clock, which is never
// later than the server's expiry. Peers' clocks may disagree by any amount.
type Coordinator struct {
	kv      jetstream.KeyValue
	js      jetstream.JetStream
	stream  jetstream.Stream // the bucket's backing stream, for marker-aware reads
	subjPre string           // "$KV.<bucket>."
	putPre  string           // subject prefix of writes: subjPre, behind the JetStream domain's API prefix if any
	set     settings
	// leader sends the stream API requests that only the bucket stream's
	// leader answers (leaderLatest).
	leader leaderAPI

	// now is the clock of the holder's own expiry and of the wait for a
	// record written without a server TTL; tests replace it
	// (export_test.go). In production it is time.Now, whose monotonic
	// reading makes those durations immune to wall-clock steps.
	now func() time.Time

	mu        sync.Mutex          // guards sightings
	sightings map[string]sighting // records without a server TTL, by key: when this coordinator first saw their revision
	// snapReqSeen, when set, is called by snapshot-request watchers after each
	// request is handled (tests use it to know the watcher caught up).
	snapReqSeen func(counter uint64)
}

// New opens the coordinator's bucket through js, creating it when missing.
// js may be bound to a JetStream domain (jetstream.NewWithDomain) or an API
// prefix. The bucket must have no TTL, because epoch counters must never
// expire; an existing bucket with a TTL fails with ErrInvalidOption.
//
// Lease keys expire by per-key TTLs (nats-server 2.11 or later): a new bucket
// is created with them enabled (LimitMarkerTTL), and an existing bucket
// without them (created before, or by hand) is upgraded in place by one
// stream update that keeps everything else, its epoch counters included.
// That update needs permission for $JS.API.STREAM.UPDATE.KV_<bucket>; a
// server that ignores the setting fails with ErrInvalidOption.
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
	if err := enableKeyTTLs(ctx, js, stream, set.bucket); err != nil {
		return nil, err
	}
	subjPre := "$KV." + set.bucket + "."
	return &Coordinator{
		kv:        kv,
		js:        js,
		stream:    stream,
		subjPre:   subjPre,
		putPre:    writePrefix(js.Options()) + subjPre,
		set:       set,
		leader:    newLeaderAPI(js, "KV_"+set.bucket),
		now:       time.Now,
		sightings: map[string]sighting{},
	}, nil
}

// enableKeyTTLs upgrades the bucket's stream in place to honour per-message
// TTLs (AllowMsgTTL) and to leave a marker when a key expires
// (SubjectDeleteMarkerTTL, KeyValueConfig.LimitMarkerTTL), unless it does
// both already. Every other setting is kept as the stream has it, and no
// message is touched: epoch counters and lane maps stay without a TTL.
// Enabling per-message TTLs is one-way on the server, which suits us.
func enableKeyTTLs(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, bucket string) error {
	cfg := stream.CachedInfo().Config
	if cfg.AllowMsgTTL && cfg.SubjectDeleteMarkerTTL > 0 {
		return nil
	}
	// The server turns message TTLs on with a marker TTL, so a stream that
	// lacks either has no marker TTL of an operator's to keep: set ours.
	cfg.AllowMsgTTL, cfg.SubjectDeleteMarkerTTL = true, expiryMarkerTTL
	updated, err := js.UpdateStream(ctx, cfg)
	if err != nil {
		return fmt.Errorf("lease: bucket %s: enable per-key TTLs (stream update of %s; needs nats-server 2.11 or later and permission for $JS.API.STREAM.UPDATE.%s): %w",
			bucket, cfg.Name, cfg.Name, err)
	}
	if !updated.CachedInfo().Config.AllowMsgTTL {
		// A server before 2.11 drops the fields it does not know, and
		// would then store lease records that never expire.
		return newError(ErrInvalidOption, "", "", fmt.Sprintf("bucket %s: the server ignored allow_msg_ttl; lease keys need per-message TTLs (nats-server 2.11 or later)", bucket))
	}
	return nil
}

// writePrefix returns what nats.go puts in front of the $KV subject of a
// write through js: the JetStream domain's or custom API prefix, which the
// server maps back onto $KV, or nothing for the default API. Lease writes
// are plain publishes (the KV API has no per-key TTL on Update), so they
// must address the key exactly as kv.Put would.
func writePrefix(o jetstream.JetStreamOptions) string {
	if o.Domain != "" {
		return "$JS." + o.Domain + ".API."
	}
	if o.APIPrefix == "" {
		return ""
	}
	if p := strings.TrimSuffix(o.APIPrefix, ".") + "."; p != jetstream.DefaultAPIPrefix {
		return p
	}
	return ""
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
		Bucket:         set.bucket,
		Description:    "ckfrelay lane maps, producer leases, epoch counters, snapshot requests",
		History:        set.history,
		Storage:        set.storage,
		Replicas:       set.replicas,
		LimitMarkerTTL: expiryMarkerTTL, // per-key TTLs, for lease keys only
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
// for a missing key and for a delete, purge or expiry marker; rev is the
// revision a compare-and-set must name (0 when the subject holds no message
// at all). Reading markers matters: Create would skip over a marker written
// after our read, letting a stale writer win.
//
// The bucket allows direct gets, which any replica answers from its own
// store: on a clustered bucket a lagging follower, or one cut off from the
// others, answers with an old value. latest is for reads that feed a
// compare-and-set, where an old value only costs a retry (the write names
// the revision read, and the leader refuses it), and for the lane map,
// which watchers correct. A read whose answer is acted on as it stands uses
// leaderRead.
func (c *Coordinator) latest(ctx context.Context, key string) (value []byte, rev uint64, present bool, err error) {
	s, err := c.read(ctx, key)
	return s.value, s.rev, s.present, err
}

// stored is a key's newest message as read.
type stored struct {
	value   []byte
	rev     uint64
	present bool
	// ttl is the server-enforced TTL of the message (its Nats-TTL header),
	// 0 when it has none: then the server never expires it.
	ttl time.Duration
}

// read is latest with the message's server TTL.
func (c *Coordinator) read(ctx context.Context, key string) (stored, error) {
	m, err := c.stream.GetLastMsgForSubject(ctx, c.subjPre+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return stored{}, nil
	}
	if err != nil {
		return stored{}, fmt.Errorf("lease: read %s: %w", key, err)
	}
	return storedOf(m.Header, m.Data, m.Sequence), nil
}

// leaderRead is read answered by the stream leader: the fencing reads
// (Verify, CurrentEpoch, CurrentLease) must not take an old lease or epoch
// from a follower's store. Where no leader can be reached (a server cut
// off from the cluster) it fails instead of answering.
func (c *Coordinator) leaderRead(ctx context.Context, key string) (stored, error) {
	m, err := c.leader.lastMsg(ctx, c.subjPre+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return stored{}, nil
	}
	if err != nil {
		return stored{}, fmt.Errorf("lease: read %s from the stream leader: %w", key, err)
	}
	return storedOf(m.Header, m.Data, m.Sequence), nil
}

// leaderLatest is leaderRead without the TTL.
func (c *Coordinator) leaderLatest(ctx context.Context, key string) (value []byte, rev uint64, present bool, err error) {
	s, err := c.leaderRead(ctx, key)
	return s.value, s.rev, s.present, err
}

// storedOf is a KV message as read: a delete, purge or expiry marker is
// not present (its revision still counts for a compare-and-set).
func storedOf(h nats.Header, data []byte, seq uint64) stored {
	if isMarker(h.Get(kvOperationHeader), h.Get(jetstream.MarkerReasonHeader)) {
		return stored{rev: seq}
	}
	return stored{value: data, rev: seq, present: true, ttl: parseTTL(h.Get(jetstream.MsgTTLHeader))}
}

func isMarker(op, reason string) bool { return op != "" || reason != "" }

// parseTTL reads a stored Nats-TTL header as the server does: a Go duration
// or whole seconds. Anything else ("never", nothing) is no expiry.
func parseTTL(v string) time.Duration {
	if d, err := time.ParseDuration(v); err == nil {
		return d
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second
	}
	return 0
}

// serverTTL is ttl as the server can enforce it: whole seconds, rounded up.
// The server truncates a finer TTL to seconds (and refuses one below a
// second), which would expire the record before its holder stops trusting
// it; rounding up keeps the server's expiry at or after the holder's.
func serverTTL(ttl time.Duration) time.Duration {
	s := ttl.Truncate(time.Second)
	if s < ttl {
		s += time.Second
	}
	return s
}

// casPublish writes value to key with a server-enforced TTL if the key's
// latest revision is still rev, as one JetStream publish carrying
// Nats-Expected-Last-Subject-Sequence and Nats-TTL: the KV API can set a
// key's TTL only on Create, whose fallback over a delete marker is not a
// compare-and-set on our read. rollup also purges the key's older
// revisions, so that no earlier record with a longer TTL can resurface when
// this one expires. A lost race returns an error matching
// jetstream.ErrKeyRevisionMismatch.
func (c *Coordinator) casPublish(ctx context.Context, key string, value any, rev uint64, ttl time.Duration, rollup bool) (uint64, error) {
	data, err := json.Marshal(value)
	if err != nil {
		return 0, fmt.Errorf("lease: encode %s: %w", key, err)
	}
	m := nats.NewMsg(c.putPre + key)
	m.Data = data
	if rollup {
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	}
	ack, err := c.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(serverTTL(ttl)))
	if isWrongLastSequence(err) {
		return 0, fmt.Errorf("lease: write %s: %w: %w", key, err, jetstream.ErrKeyRevisionMismatch)
	}
	if err != nil {
		return 0, fmt.Errorf("lease: write %s: %w", key, err)
	}
	return ack.Sequence, nil
}

// isWrongLastSequence reports the server's refusal of an expected last
// subject sequence: 10071, or 10164 from a replicated stream.
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// sighting is when a coordinator first saw a revision of a record written
// without a server TTL.
type sighting struct {
	rev   uint64
	since time.Time
}

// unchangedFor reports whether key has stood at rev for at least d since
// this coordinator first saw that revision, by its own clock, and records
// the sighting of a new revision. It judges records that the server never
// expires (written by relays of before per-key TTLs, or by hand) without
// comparing anyone else's clock: a live holder rewrites its record every
// renewal, a dead one leaves it as it was.
func (c *Coordinator) unchangedFor(key string, rev uint64, d time.Duration) bool {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sightings[key]
	if !ok || s.rev != rev {
		c.sightings[key] = sighting{rev: rev, since: now}
		return false
	}
	return now.Sub(s.since) >= d
}

// forget drops the sighting of key once its record was replaced.
func (c *Coordinator) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sightings, key)
}

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
