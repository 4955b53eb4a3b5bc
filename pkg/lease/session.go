package lease

import (
	"cmp"
	"context"
	"fmt"
	"time"
)

// Session is a held producer lease that keeps itself alive, after etcd's
// concurrency.Session: NewSession acquires the lease and starts the one
// goroutine that renews it, and the session owns that goroutine until Close
// or Orphan has joined it.
//
// Concurrency contract: every method is safe for concurrent use. Close and
// Orphan may be called any number of times from any goroutine; the first
// of them decides whether the lease is released or left to lapse, and every
// call returns only after the keepalive goroutine has exited. A session
// whose lease ended on its own (lost, or released through Lease) stops its
// goroutine by itself; Close or Orphan still join it and must be called
// once the caller is done, as with any resource.
type Session struct {
	l        *Lease
	interval time.Duration // between renewals
	release  time.Duration // bound of Close's release when its context has none

	stop   context.CancelFunc // ends the keepalive goroutine, aborting its renewal in flight
	exited chan struct{}      // closed when the keepalive goroutine returned
}

// SessionOption tunes NewSession.
type SessionOption func(*sessionConfig)

type sessionConfig struct {
	interval time.Duration
	release  time.Duration
	acquire  []AcquireOption
}

// WithRenewInterval sets the time between renewals (default ttl/3). It must
// be shorter than the TTL, or the lease would lapse between two renewals;
// zero keeps the default.
func WithRenewInterval(d time.Duration) SessionOption {
	return func(c *sessionConfig) { c.interval = d }
}

// WithReleaseTimeout bounds the release by Close when the caller's context
// has no deadline (default: the renew interval; a release that cannot reach
// the server in that time is not worth more, the record lapses one TTL
// after the last renewal anyway). A deadline on Close's context replaces
// it, shorter or longer. Zero keeps the default.
func WithReleaseTimeout(d time.Duration) SessionOption {
	return func(c *sessionConfig) { c.release = d }
}

// WithAcquireOptions passes opts (e.g. WithProducer) to the acquisition.
func WithAcquireOptions(opts ...AcquireOption) SessionOption {
	return func(c *sessionConfig) { c.acquire = append(c.acquire, opts...) }
}

// NewSession acquires the producer lease of pool (domain, dc) for owner,
// valid for ttl, exactly as Acquire does (same errors, same fencing epoch),
// and starts its keepalive goroutine. ctx bounds the acquisition only: the
// session lives until Close, Orphan or the loss of the lease. Unusable
// timings fail with ErrInvalidArgument before anything is written.
//
// The goroutine renews every renew interval. Each renewal may take until
// the lease would expire (by the holder's own clock): a slow server is
// waited for while waiting can still help, and not a moment longer. A
// renewal that fails for another reason is retried at the next tick; one
// that finds the lease expired or fenced ends it (Done closes, Err matches
// ErrLeaseLost).
func (c *Coordinator) NewSession(ctx context.Context, domain, dc, owner string, ttl time.Duration, opts ...SessionOption) (*Session, error) {
	var cfg sessionConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	interval := cmp.Or(cfg.interval, ttl/3)
	if interval <= 0 || interval >= ttl {
		return nil, newError(ErrInvalidArgument, domain, dc, fmt.Sprintf("renew interval %s with ttl %s, want 0 < interval < ttl", interval, ttl))
	}
	if cfg.release < 0 {
		return nil, newError(ErrInvalidArgument, domain, dc, fmt.Sprintf("release timeout %s, want > 0", cfg.release))
	}
	l, err := c.Acquire(ctx, domain, dc, owner, ttl, cfg.acquire...)
	if err != nil {
		return nil, err
	}
	// The renewals must not end with ctx, which only bounds the
	// acquisition: the session is stopped by Close or Orphan.
	kctx, stop := context.WithCancel(context.Background())
	s := &Session{
		l: l, interval: interval, release: cmp.Or(cfg.release, interval),
		stop: stop, exited: make(chan struct{}),
	}
	go s.keepalive(kctx)
	return s, nil
}

// keepalive renews the lease every interval until the lease ends or ctx
// (the session's stop) does.
func (s *Session) keepalive(ctx context.Context) {
	defer close(s.exited)
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.l.done:
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithDeadline(ctx, s.l.expiryDeadline())
		// A loss ends the lease, which the select above sees; any other
		// error is transient and retried at the next tick, and a renewal
		// that timed out at the expiry finds the lease expired then.
		_ = s.l.Renew(rctx)
		cancel()
	}
}

// Lease returns the session's lease: its Epoch is the fencing token, Held
// the lock-free check before each publish, Verify the check against the
// stored record. Ending it through Lease.Release ends the session too.
func (s *Session) Lease() *Lease { return s.l }

// Done is closed once the session has ended: the lease was lost (a renewal
// found it expired or fenced by a newer epoch, or Verify did), closed or
// orphaned. It is the lease's Done.
func (s *Session) Done() <-chan struct{} { return s.l.done }

// Err returns nil while the session holds the lease, then why it ended: an
// error matching ErrLeaseLost, ErrLeaseReleased (Close) or ErrLeaseOrphaned
// (Orphan).
func (s *Session) Err() error { return s.l.Err() }

// Close stops the keepalive goroutine, waits for it and releases the lease,
// deleting its record so a standby can take over at once (see
// Lease.Release). A renewal in flight is aborted; should its write still
// reach the server, it does so before the release, which then deletes the
// renewed record. The release is bounded by ctx's deadline or, when ctx has
// none, by the release timeout. Pass context.WithoutCancel(parent) to
// release even while parent is being cancelled. An error means the record
// was not deleted: the lease still ends locally and its record lapses at
// its expiry. Closing a session that already ended returns nil.
func (s *Session) Close(ctx context.Context) error {
	s.join()
	rctx, cancel := withDefaultTimeout(ctx, s.release)
	defer cancel()
	return s.l.Release(rctx)
}

// Orphan stops renewing without releasing, as a crash would: the record
// stays until the server expires it, one TTL after its last write, and only
// then can a standby take over. A renewal in flight is aborted (should its
// write still reach the server, the record lapses one TTL after that). The lease ends locally at once (Done closes,
// Err matches ErrLeaseOrphaned, Held reports false), so its holder stops
// publishing. It returns after the keepalive goroutine has exited.
func (s *Session) Orphan() {
	s.join()
	s.l.orphan()
}

// join stops the keepalive goroutine, aborting its renewal in flight, and
// waits for it.
func (s *Session) join() {
	s.stop()
	<-s.exited
}

// withDefaultTimeout bounds ctx by d unless the caller already set a
// deadline, which then wins.
func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
