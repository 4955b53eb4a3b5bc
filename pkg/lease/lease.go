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

// leaseRecord is the stored producer lease of one pool.
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
	AcquiredAt       time.Time
	ExpiresAt        time.Time
	Revision         uint64
}

func (r leaseRecord) info(rev uint64) LeaseInfo {
	return LeaseInfo{
		Owner:            r.Owner,
		Incarnation:      r.Incarnation,
		LayoutGeneration: r.LayoutGeneration,
		Epoch:            r.Epoch,
		AcquiredAt:       time.Unix(0, r.AcquiredAt),
		ExpiresAt:        time.Unix(0, r.ExpiresAt),
		Revision:         rev,
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
// ttl. It succeeds when no live lease exists (absent, released, or expired by
// the coordinator's clock) or when owner already holds it; in every case it
// takes a fresh epoch, strictly above every epoch ever handed out for the
// pool, so a re-acquire by the same owner also fences that owner's older
// Lease values. Fails with ErrInvalidName, ErrInvalidArgument, ErrLeaseHeld
// (carrying the holder, its epoch and expiry), ErrCorruptRecord,
// ErrEpochExhausted (the counter is at its maximum and never wraps) or
// ErrContention. The caller renews the returned lease itself (Renew);
// NewSession acquires one that keeps itself alive.
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
		data, leaseRev, present, err := c.latest(ctx, lk)
		if err != nil {
			return nil, err
		}
		var prev leaseRecord
		if present {
			if err := json.Unmarshal(data, &prev); err != nil {
				return nil, corrupt(domain, dc, lk, err)
			}
			expires := time.Unix(0, prev.ExpiresAt)
			if prev.Owner != owner && c.now().Before(expires) {
				e := newError(ErrLeaseHeld, domain, dc, "")
				e.Holder, e.Epoch, e.ExpiresAt = prev.Owner, prev.Epoch, expires
				return nil, e
			}
		}

		epoch, ok, err := c.bumpEpoch(ctx, domain, dc, ek, prev.Epoch)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}

		now := c.now()
		rec := leaseRecord{Owner: owner, Epoch: epoch, AcquiredAt: now.UnixNano(), ExpiresAt: now.Add(ttl).UnixNano()}
		for _, opt := range opts {
			opt(&rec)
		}
		rev, err := c.casPut(ctx, lk, rec, leaseRev)
		if isConflict(err) {
			// Someone else wrote the lease since our read; our epoch is
			// burnt, which is harmless (epochs need only increase).
			continue
		}
		if err != nil {
			return nil, err
		}
		l := &Lease{
			c: c, domain: domain, dc: dc, key: lk, owner: owner, ttl: ttl, epoch: epoch,
			rec: rec, revision: rev, expiresAt: time.Unix(0, rec.ExpiresAt),
			done: make(chan struct{}),
		}
		l.expiresNano.Store(rec.ExpiresAt)
		return l, nil
	}
	return nil, contention(domain, dc, "acquire", c.set.casAttempts)
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

// CurrentLease returns the pool's stored lease, live or expired (compare
// ExpiresAt with your clock), as the bucket stream's leader has it. Fails
// with ErrNoLease when none is stored, ErrInvalidName or ErrCorruptRecord,
// or with the read error when no leader answers.
func (c *Coordinator) CurrentLease(ctx context.Context, domain, dc string) (LeaseInfo, error) {
	if err := validatePool(domain, dc); err != nil {
		return LeaseInfo{}, err
	}
	key := leaseKey(domain, dc)
	data, rev, present, err := c.leaderLatest(ctx, key)
	if err != nil {
		return LeaseInfo{}, err
	}
	if !present {
		return LeaseInfo{}, newError(ErrNoLease, domain, dc, "")
	}
	var rec leaseRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return LeaseInfo{}, corrupt(domain, dc, key, err)
	}
	return rec.info(rev), nil
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
	expiresAt time.Time
	err       error // why the lease ended; nil while held; written once, before done closes

	// expiresNano mirrors expiresAt for the lock-free Held check.
	expiresNano atomic.Int64

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

// ExpiresAt returns when the lease expires unless renewed.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Done is closed once the lease is no longer held: lost, released or
// orphaned.
func (l *Lease) Done() <-chan struct{} { return l.done }

// expiryDeadline is the wall-clock instant at which the lease expires by
// the coordinator's clock, for bounding a renewal: past it, a renewal can
// no longer keep the lease.
func (l *Lease) expiryDeadline() time.Time {
	return time.Now().Add(l.ExpiresAt().Sub(l.c.now()))
}

// Held reports whether the lease is still held and unexpired by the
// coordinator's clock. It takes no lock and does no I/O, so a publisher can
// check it before every message; an expiry it sees is recorded (Done closes)
// by the next Renew or Keepalive tick.
func (l *Lease) Held() bool {
	select {
	case <-l.done:
		return false
	default:
	}
	return l.c.now().UnixNano() < l.expiresNano.Load()
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
// confirm a lease that has moved) and confirms it is still this lease (same
// owner and epoch) and unexpired. A record that
// names another owner or epoch, an absent record or an expired one ends the
// lease (Done closes) and returns an error matching ErrLeaseLost; a read
// error is returned as is and leaves the lease held. Publishers call it
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
	if !l.c.now().Before(time.Unix(0, rec.ExpiresAt)) {
		return l.endLocked(l.lostError("expired", nil))
	}
	return nil
}

// Renew extends the lease by its TTL with a compare-and-set on the revision
// it holds. If the lease has expired by the coordinator's clock or the
// revision moved (another owner took over, or the key was removed), the
// lease is lost: Done closes and the error matches ErrLeaseLost (and, for a
// moved revision, jetstream.ErrKeyRevisionMismatch). Other errors are
// transient and leave the lease held until it expires. A write whose reply
// was lost counts as moved on the next Renew, which errs on the safe side.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	now := l.c.now()
	if !now.Before(l.expiresAt) {
		return l.endLocked(l.lostError("expired before renewal", nil))
	}
	rec := l.rec
	rec.ExpiresAt = now.Add(l.ttl).UnixNano()
	rev, err := l.c.casPut(ctx, l.key, rec, l.revision)
	if isConflict(err) {
		return l.endLocked(l.lostError("revision moved", err))
	}
	if err != nil {
		return err
	}
	l.rec, l.revision, l.expiresAt = rec, rev, time.Unix(0, rec.ExpiresAt)
	l.expiresNano.Store(rec.ExpiresAt)
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
// stored record then lapses at its expiry) and the error is returned.
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

// orphan ends the lease locally without touching its record, which then
// lapses at its expiry (Session.Orphan).
func (l *Lease) orphan() {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := newError(ErrLeaseOrphaned, l.domain, l.dc, fmt.Sprintf("epoch %d left by %s to lapse at its expiry", l.epoch, l.owner))
	e.Holder, e.Epoch, e.ExpiresAt = l.owner, l.epoch, l.expiresAt
	l.endLocked(e)
}
