package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// leaseRecord is the stored producer lease of one pool. Its times are the
// holder's clock: information for operators (and the expiry that relays of
// before per-key TTLs still judge by), never a peer's decision.
type leaseRecord struct {
	Owner            string `json:"owner"`
	Incarnation      uint64 `json:"incarnation"`
	LayoutGeneration uint64 `json:"layout_generation"`
	Epoch            uint64 `json:"epoch"`
	AcquiredAt       int64  `json:"acquired_at"`
	ExpiresAt        int64  `json:"expires_at"`
}

// epochRecord is the stored epoch counter of one pool.
type epochRecord struct {
	Epoch uint64 `json:"epoch"`
}

func leaseKey(domain, dc string) string { return fmt.Sprintf(leaseKeyT, domain, dc) }
func epochKey(domain, dc string) string { return fmt.Sprintf(epochKeyT, domain, dc) }

// LeaseInfo is a read-only view of a pool's stored lease.
type LeaseInfo struct {
	Owner            string
	Incarnation      uint64
	LayoutGeneration uint64
	Epoch            uint64
	// AcquiredAt and ExpiresAt are the holder's clock when it acquired
	// and when it last renewed plus its TTL: information only, since
	// they say nothing about any other host's clock.
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// TTL is the server-enforced time to live of the stored revision
	// (whole seconds): the server removes the record TTL after it was
	// written. It is 0 for a record written without one, by a relay of
	// before per-key TTLs or by hand, which the server never expires.
	TTL      time.Duration
	Revision uint64
}

func (r leaseRecord) info(s stored) LeaseInfo {
	return LeaseInfo{
		Owner:            r.Owner,
		Incarnation:      r.Incarnation,
		LayoutGeneration: r.LayoutGeneration,
		Epoch:            r.Epoch,
		AcquiredAt:       time.Unix(0, r.AcquiredAt),
		ExpiresAt:        time.Unix(0, r.ExpiresAt),
		TTL:              s.ttl,
		Revision:         s.rev,
	}
}

// AcquireOption adds producer identity fields to an acquired lease.
type AcquireOption func(*leaseRecord)

// WithProducer records the producer incarnation and layout generation in the
// lease (default zero), so peers can see which producer generation holds it.
func WithProducer(incarnation, layoutGeneration uint64) AcquireOption {
	return func(r *leaseRecord) {
		r.Incarnation = incarnation
		r.LayoutGeneration = layoutGeneration
	}
}

// Acquire takes the producer lease of pool (domain, dc) for owner, valid for
// ttl. It succeeds when no live lease exists or when owner already holds
// it; in every case it takes a fresh epoch, strictly above every epoch ever
// handed out for the pool, so a re-acquire by the same owner also fences
// that owner's older Lease values. Fails with ErrInvalidName,
// ErrInvalidArgument, ErrLeaseHeld (carrying the holder, its epoch and the
// expiry by its clock), ErrCorruptRecord, ErrEpochExhausted (the counter is
// at its maximum and never wraps) or ErrContention. The caller renews the
// returned lease itself (Renew); NewSession acquires one that keeps itself
// alive.
//
// Liveness is the server's: the record is written with a per-key TTL of ttl
// rounded up to whole seconds (at least the bucket's LimitMarkerTTL, the
// server raises it to that), and a record the server still stores is live,
// whatever its expires_at says against this host's clock. A lease is free
// when its key is absent or ends in a delete, purge or expiry marker. The
// one exception is a record stored without a TTL (written by a relay of
// before per-key TTLs, or by hand), which the server never expires: it is
// taken once this coordinator has seen it unchanged for ttl by its own
// clock, so a relay retrying Acquire every ttl/3 takes a dead holder's
// lease within about 1⅔ ttl of its last renewal, and a live holder, which
// rewrites its record at every renewal, never loses it to a standby with
// the same ttl.
//
// Order matters for fencing: the lease is read first, then the epoch counter
// is bumped, then the lease is written by compare-and-set on the revision
// read first. Any competitor that wrote the lease in between makes that
// write fail; any later writer bumps the counter after ours, so lease epochs
// only go up.
func (c *Coordinator) Acquire(ctx context.Context, domain, dc, owner string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	if err := validatePool(domain, dc); err != nil {
		return nil, err
	}
	if owner == "" {
		return nil, newError(ErrInvalidArgument, domain, dc, "empty owner")
	}
	if ttl <= 0 {
		return nil, newError(ErrInvalidArgument, domain, dc, fmt.Sprintf("ttl %s, want > 0", ttl))
	}
	lk, ek := leaseKey(domain, dc), epochKey(domain, dc)
	for range c.set.casAttempts {
		cur, err := c.read(ctx, lk)
		if err != nil {
			return nil, err
		}
		var prev leaseRecord
		if cur.present {
			if err := json.Unmarshal(cur.value, &prev); err != nil {
				return nil, corrupt(domain, dc, lk, err)
			}
			if prev.Owner != owner {
				if err := c.heldBy(domain, dc, lk, cur, prev, ttl); err != nil {
					return nil, err
				}
			}
		}

		epoch, ok, err := c.bumpEpoch(ctx, domain, dc, ek, prev.Epoch)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}

		// The holder's TTL runs from before the write is sent, so it ends
		// no later than the server's, which runs from when it is stored.
		start := c.now()
		rec := leaseRecord{Owner: owner, Epoch: epoch, AcquiredAt: start.UnixNano(), ExpiresAt: start.Add(ttl).UnixNano()}
		for _, opt := range opts {
			opt(&rec)
		}
		rev, err := c.casPublish(ctx, lk, rec, cur.rev, ttl, true)
		if isConflict(err) {
			// Someone else wrote the lease since our read; our epoch is
			// burnt, which is harmless (epochs need only increase).
			continue
		}
		if err != nil {
			return nil, err
		}
		c.forget(lk)
		l := &Lease{
			c: c, domain: domain, dc: dc, key: lk, owner: owner, ttl: ttl, epoch: epoch,
			base: start, done: make(chan struct{}),
		}
		l.renewedLocked(rec, rev, start)
		return l, nil
	}
	return nil, contention(domain, dc, "acquire", c.set.casAttempts)
}

// heldBy returns the ErrLeaseHeld that another owner's stored record
// stands for, or nil when that record no longer holds the lease: only a
// record the server never expires can be dead while stored (see Acquire).
func (c *Coordinator) heldBy(domain, dc, key string, cur stored, prev leaseRecord, ttl time.Duration) error {
	detail := ""
	if cur.ttl <= 0 {
		if c.unchangedFor(key, cur.rev, ttl) {
			return nil
		}
		detail = fmt.Sprintf("record has no server TTL; taken once unchanged for %s", ttl)
	}
	e := newError(ErrLeaseHeld, domain, dc, detail)
	e.Holder, e.Epoch, e.ExpiresAt = prev.Owner, prev.Epoch, time.Unix(0, prev.ExpiresAt)
	return e
}

// bumpEpoch increments the pool's epoch counter by compare-and-set and
// returns the new value; ok=false means a competitor bumped it first. floor
// is the epoch of the lease read before: the counter is never below it, but
// should an operator have removed the counter, the new epoch still exceeds
// the last lease.
func (c *Coordinator) bumpEpoch(ctx context.Context, domain, dc, key string, floor uint64) (epoch uint64, ok bool, err error) {
	data, rev, present, err := c.latest(ctx, key)
	if err != nil {
		return 0, false, err
	}
	var cur epochRecord
	if present {
		if err := json.Unmarshal(data, &cur); err != nil {
			return 0, false, corrupt(domain, dc, key, err)
		}
	}
	top := max(cur.Epoch, floor)
	if top == math.MaxUint64 {
		// Wrapping to 0 would hand out an epoch below every one consumers
		// have seen, and they would drop the pool's traffic as superseded.
		e := newError(ErrEpochExhausted, domain, dc, fmt.Sprintf("key %s holds %d; no higher epoch exists", key, top))
		e.Epoch = top
		return 0, false, e
	}
	next := top + 1
	if _, err := c.casPut(ctx, key, epochRecord{Epoch: next}, rev); err != nil {
		if isConflict(err) {
			return 0, false, nil
		}
		return 0, false, err
	}
	return next, true, nil
}

// CurrentEpoch returns the highest epoch handed out for the pool, 0 when
// none, as the bucket stream's leader has it (never a follower's older
// copy). Fails with ErrInvalidName or ErrCorruptRecord, or with the read
// error when no leader answers.
func (c *Coordinator) CurrentEpoch(ctx context.Context, domain, dc string) (uint64, error) {
	if err := validatePool(domain, dc); err != nil {
		return 0, err
	}
	key := epochKey(domain, dc)
	data, _, present, err := c.leaderLatest(ctx, key)
	if err != nil || !present {
		return 0, err
	}
	var cur epochRecord
	if err := json.Unmarshal(data, &cur); err != nil {
		return 0, corrupt(domain, dc, key, err)
	}
	return cur.Epoch, nil
}

// CurrentLease returns the pool's stored lease. A record with a TTL is live
// while stored (the server removes it TTL after its last write); its
// ExpiresAt is the holder's clock, information only. Fails with ErrNoLease
// when none is stored (never acquired, released, or expired by the server),
// ErrInvalidName or ErrCorruptRecord, or with the read error when no stream
// leader answers (it reads from the leader: a follower's copy may be old).
func (c *Coordinator) CurrentLease(ctx context.Context, domain, dc string) (LeaseInfo, error) {
	if err := validatePool(domain, dc); err != nil {
		return LeaseInfo{}, err
	}
	key := leaseKey(domain, dc)
	cur, err := c.leaderRead(ctx, key)
	if err != nil {
		return LeaseInfo{}, err
	}
	if !cur.present {
		return LeaseInfo{}, newError(ErrNoLease, domain, dc, "")
	}
	var rec leaseRecord
	if err := json.Unmarshal(cur.value, &rec); err != nil {
		return LeaseInfo{}, corrupt(domain, dc, key, err)
	}
	return rec.info(cur), nil
}

// Lease is one held producer lease. Its epoch is the fencing token: stamp it
// into every published message, and stop publishing as soon as Done closes.
// Safe for concurrent use; Renew, Verify's decision, Keepalive's renewals and
// Release serialise on the lease. A Lease from Acquire is renewed only by
// its caller; one from NewSession is kept alive by its Session.
type Lease struct {
	c      *Coordinator
	domain string
	dc     string
	key    string
	owner  string
	ttl    time.Duration
	epoch  uint64

	mu        sync.Mutex // guards rec, revision, expiresAt and the writing of err; held across the KV write
	rec       leaseRecord
	revision  uint64
	expiresAt time.Time // start of the last successful write + ttl, by the holder's clock
	err       error     // why the lease ended; nil while held; written once, before done closes

	// The holder's own expiry, lock-free for Held: the lease is live while
	// c.now().Sub(base) < deadline. base is the start of the acquisition
	// and never changes; with time.Now both carry its monotonic reading,
	// so a step of the wall clock neither shortens nor stretches the lease.
	base     time.Time
	deadline atomic.Int64 // time.Duration since base

	done     chan struct{}
	doneOnce sync.Once
}

// Domain returns the pool's domain name.
func (l *Lease) Domain() string { return l.domain }

// Dc returns the pool's DC name.
func (l *Lease) Dc() string { return l.dc }

// Owner returns the relay instance holding the lease.
func (l *Lease) Owner() string { return l.owner }

// Epoch returns the lease's fencing epoch; it never changes for one Lease.
func (l *Lease) Epoch() uint64 { return l.epoch }

// TTL returns the lease's time to live per renewal.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Revision returns the KV revision of the lease's last successful write.
func (l *Lease) Revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.revision
}

// ExpiresAt returns when the lease expires unless renewed, by the holder's
// clock: the TTL after the start of its last successful write. The server
// removes the record no earlier (see Acquire).
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Done is closed once the lease is no longer held: lost, released or
// orphaned.
func (l *Lease) Done() <-chan struct{} { return l.done }

// expiryDeadline is the instant, by time.Now, at which the lease expires by
// the holder's clock (the coordinator's), for bounding a renewal: past it,
// a renewal can no longer keep the lease.
func (l *Lease) expiryDeadline() time.Time {
	return time.Now().Add(l.remaining(l.c.now()))
}

// remaining is how long the lease is still live at now by the holder's
// clock; zero or less once it expired.
func (l *Lease) remaining(now time.Time) time.Duration {
	return time.Duration(l.deadline.Load()) - now.Sub(l.base)
}

// renewedLocked records a successful write of rec at rev, started at start
// by the coordinator's clock. l.mu must be held (or l not yet shared).
func (l *Lease) renewedLocked(rec leaseRecord, rev uint64, start time.Time) {
	l.rec, l.revision, l.expiresAt = rec, rev, start.Add(l.ttl)
	l.deadline.Store(int64(start.Sub(l.base) + l.ttl))
}

// Held reports whether the lease is still held and unexpired by the
// holder's own clock: less than its TTL since the start of its last
// successful write, which is never later than the server's expiry of the
// record. It takes no lock and does no I/O, so a publisher can check it
// before every message; an expiry it sees is recorded (Done closes) by the
// next Renew or Keepalive tick.
func (l *Lease) Held() bool {
	select {
	case <-l.done:
		return false
	default:
	}
	return l.remaining(l.c.now()) > 0
}

// Lost reports whether the lease was lost (taken over, expired or its
// revision moved), as opposed to held or released.
func (l *Lease) Lost() bool { return errors.Is(l.Err(), ErrLeaseLost) }

// Err returns nil while the lease is held, then, once Done has closed, an
// error matching ErrLeaseLost, ErrLeaseReleased or ErrLeaseOrphaned. It
// takes no lock, so it never waits for a renewal in flight, which holds the
// lease's lock for as long as the server takes.
func (l *Lease) Err() error {
	select {
	case <-l.done:
		// Set under l.mu before done was closed and never written again,
		// so the receive orders this read after the write.
		return l.err
	default:
		return nil
	}
}

// endLocked records why the lease ended and closes Done. l.mu must be held.
func (l *Lease) endLocked(err error) error {
	if l.err == nil {
		l.err = err
		l.doneOnce.Do(func() { close(l.done) })
	}
	return l.err
}

func (l *Lease) lostError(detail string, cause error) *Error {
	e := newError(ErrLeaseLost, l.domain, l.dc, detail)
	e.Holder, e.Epoch, e.ExpiresAt, e.Err = l.owner, l.epoch, l.expiresAt, cause
	return e
}

// Verify reads the pool's lease record from the bucket stream's leader (a
// follower's copy may be old: a follower cut off from the cluster would
// confirm a lease that has moved) and confirms it
// is still this lease (same owner and epoch) and that the lease is
// unexpired by the holder's clock. A record that names another owner or
// epoch, an absent record (released, removed, or expired by the server) or
// an expired lease ends the lease (Done closes) and returns an error
// matching ErrLeaseLost; a read error is returned as is and leaves the
// lease held. Publishers call it
// before acting on evidence that someone else wrote on their lane, to tell
// a successor (lease moved) from a stray writer (lease still ours).
func (l *Lease) Verify(ctx context.Context) error {
	data, _, present, err := l.c.leaderLatest(ctx, l.key)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if !present {
		return l.endLocked(l.lostError("lease record removed", nil))
	}
	var rec leaseRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return l.endLocked(l.lostError("lease record corrupt", err))
	}
	if rec.Owner != l.owner || rec.Epoch != l.epoch {
		return l.endLocked(l.lostError(fmt.Sprintf("lease now held by %s at epoch %d", rec.Owner, rec.Epoch), nil))
	}
	if l.remaining(l.c.now()) <= 0 {
		return l.endLocked(l.lostError("expired", nil))
	}
	return nil
}

// Renew extends the lease by its TTL: a compare-and-set publish on the
// revision it holds that sets the key's server TTL afresh. If the lease has
// expired by the holder's clock or the revision moved (another owner took
// over, or the key was removed or expired by the server), the lease is
// lost: Done closes and the error matches ErrLeaseLost (and, for a moved
// revision, jetstream.ErrKeyRevisionMismatch). So is a renewal whose reply
// came only once the lease had expired by the holder's clock: the record
// may have been written after the server expired the one before, and the
// expiry marker then removes it. Other errors are transient and leave the
// lease held until it expires. A write whose reply was lost counts as
// moved on the next Renew, which errs on the safe side.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	start := l.c.now()
	if l.remaining(start) <= 0 {
		return l.endLocked(l.lostError("expired before renewal", nil))
	}
	rec := l.rec
	rec.ExpiresAt = start.Add(l.ttl).UnixNano()
	rev, err := l.c.casPublish(ctx, l.key, rec, l.revision, l.ttl, false)
	if isConflict(err) {
		return l.endLocked(l.lostError("revision moved", err))
	}
	if err != nil {
		return err
	}
	// Acknowledged while the lease was live, the write was stored before
	// the server could expire the previous one (whose TTL ran from no
	// earlier than our previous start), so no expiry marker follows it.
	if l.remaining(l.c.now()) <= 0 {
		return l.endLocked(l.lostError("renewal acknowledged after the lease expired", nil))
	}
	l.renewedLocked(rec, rev, start)
	return nil
}

// Keepalive renews the lease every interval (ttl/3 when interval <= 0)
// until the lease ends or ctx does, and returns why: the lease's error
// (ErrLeaseLost, ErrLeaseReleased) or ctx.Err(). Transient renewal errors are
// retried at the next tick; they turn into ErrLeaseLost once the lease
// expires. Run it on its own goroutine; it owns no other goroutine.
//
// Deprecated: use Coordinator.NewSession, whose Session owns the keepalive
// goroutine: Session.Close stops it, waits for it and releases the lease,
// Session.Orphan stops it and lets the lease lapse.
func (l *Lease) Keepalive(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = l.ttl / 3
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.done:
			return l.Err()
		case <-tick.C:
			// A loss ends the lease, which the next select sees; any other
			// error is transient and retried at the next tick.
			_ = l.Renew(ctx)
		}
	}
}

// Release gives the lease up: it deletes the lease key if the stored record
// is still this lease's (the epoch counter stays), then closes Done, so a
// standby can take over at once. Releasing a lease that already ended, or
// whose record now belongs to another holder or epoch, only ends it locally
// and returns nil. On a transient error the lease still ends locally (the
// server then removes the stored record at its TTL) and the error is
// returned.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil
	}
	err := l.c.kv.Delete(ctx, l.key, jetstream.LastRevision(l.revision))
	if isConflict(err) {
		err = l.deleteIfOwnLocked(ctx)
	}
	l.endLocked(newError(ErrLeaseReleased, l.domain, l.dc, fmt.Sprintf("epoch %d released by %s", l.epoch, l.owner)))
	if err != nil {
		return fmt.Errorf("lease: release %s: %w", l.key, err)
	}
	return nil
}

// deleteIfOwnLocked deletes the lease record at its latest revision when it
// still names this lease's owner and epoch. The revision can move under a
// live lease: a renewal whose reply was lost (a timeout) may still have been
// written. Only this lease writes its epoch (every Acquire takes a fresh
// one), so such a record is ours to delete; anything else is left alone.
// l.mu must be held.
func (l *Lease) deleteIfOwnLocked(ctx context.Context) error {
	data, rev, present, err := l.c.latest(ctx, l.key)
	if err != nil || !present {
		return err
	}
	var rec leaseRecord
	if json.Unmarshal(data, &rec) != nil || rec.Owner != l.owner || rec.Epoch != l.epoch {
		return nil
	}
	err = l.c.kv.Delete(ctx, l.key, jetstream.LastRevision(rev))
	if isConflict(err) {
		return nil // written again since: by a successor, not by us
	}
	return err
}

// orphan ends the lease locally without touching its record, which the
// server then removes at its TTL (Session.Orphan).
func (l *Lease) orphan() {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := newError(ErrLeaseOrphaned, l.domain, l.dc, fmt.Sprintf("epoch %d left by %s to lapse at its expiry", l.epoch, l.owner))
	e.Holder, e.Epoch, e.ExpiresAt = l.owner, l.epoch, l.expiresAt
	l.endLocked(e)
}
