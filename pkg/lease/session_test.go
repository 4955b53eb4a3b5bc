package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// keepalives counts the running session keepalive goroutines.
func keepalives() int {
	return strings.Count(testenv.Goroutines(), "lease.(*Session).keepalive(")
}

// noKeepalive fails the test if a session keepalive goroutine is still
// running. Close and Orphan return once theirs has done its last deferred
// call, so it may still be listed for the instant it takes to return;
// like goleak, wait a little for that.
func noKeepalive(t *testing.T, after string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for keepalives() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("keepalive goroutine still running 5s after %s:\n%s", after, testenv.Goroutines())
		}
		time.Sleep(time.Millisecond)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not closed after 10s", what)
	}
}

// waitRenewedTo waits until the session's lease has been renewed to expire
// at want (the coordinator's clock + TTL).
func waitRenewedTo(t *testing.T, s *lease.Session, want time.Time) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if got := s.Lease().ExpiresAt(); !got.Equal(want) {
			return errors.New("expires " + got.String() + ", want " + want.String())
		}
		return nil
	})
}

func TestSessionKeepsTheLeaseAliveAndCloseHandsItToAStandbyAtOnce(t *testing.T) {
	ctx := testCtx(t)
	c, clk, _ := startCoordinator(t)
	const ttl = 10 * time.Second
	s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", ttl,
		lease.WithRenewInterval(time.Millisecond), lease.WithAcquireOptions(lease.WithProducer(7, 3)))
	if err != nil {
		t.Fatal(err)
	}
	l := s.Lease()
	if l.Epoch() != 1 || l.Owner() != "relay-1" || l.TTL() != ttl {
		t.Fatalf("lease = epoch %d owner %s ttl %s", l.Epoch(), l.Owner(), l.TTL())
	}
	if info, err := c.CurrentLease(ctx, domain, "dc-a"); err != nil || info.Incarnation != 7 || info.LayoutGeneration != 3 {
		t.Fatalf("stored lease = %+v, %v; want the producer identity", info, err)
	}
	// Past two TTLs of the coordinator's clock, nobody renewing by hand:
	// the session's renewals alone keep it held.
	for range 4 {
		clk.Advance(ttl / 2)
		waitRenewedTo(t, s, clk.Now().Add(ttl))
		if info, err := c.CurrentLease(ctx, domain, "dc-a"); err != nil || !info.ExpiresAt.After(clk.Now()) {
			t.Fatalf("stored lease %+v, %v; want live at %s", info, err, clk.Now())
		}
	}
	if s.Err() != nil || isClosed(s.Done()) || !l.Held() {
		t.Fatalf("renewed session: err %v done %v held %v", s.Err(), isClosed(s.Done()), l.Held())
	}
	if _, err := c.Acquire(ctx, domain, "dc-a", "relay-2", ttl); !errors.Is(err, lease.ErrLeaseHeld) {
		t.Fatalf("standby while the session holds the lease: %v, want ErrLeaseHeld", err)
	}

	if err := s.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	noKeepalive(t, "Close")
	if !isClosed(s.Done()) || !errors.Is(s.Err(), lease.ErrLeaseReleased) || l.Held() || l.Lost() {
		t.Fatalf("closed session: done %v err %v held %v", isClosed(s.Done()), s.Err(), l.Held())
	}
	if _, err := c.CurrentLease(ctx, domain, "dc-a"); !errors.Is(err, lease.ErrNoLease) {
		t.Fatalf("record after close: %v, want ErrNoLease", err)
	}
	// The standby takes over at once: no clock advance, the next epoch.
	l2, err := c.Acquire(ctx, domain, "dc-a", "relay-2", ttl)
	if err != nil {
		t.Fatalf("standby after close: %v", err)
	}
	if l2.Epoch() != 2 {
		t.Fatalf("standby epoch %d, want 2", l2.Epoch())
	}
	// Closing again, or orphaning after the close, changes nothing.
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
	s.Orphan()
	if !errors.Is(s.Err(), lease.ErrLeaseReleased) {
		t.Fatalf("err after orphaning a closed session: %v", s.Err())
	}
	if info, err := c.CurrentLease(ctx, domain, "dc-a"); err != nil || info.Owner != "relay-2" {
		t.Fatalf("standby's record = %+v, %v", info, err)
	}
}

func TestSessionOrphanStopsRenewingAndLetsTheLeaseLapse(t *testing.T) {
	// Not parallel: noKeepalive counts every session's goroutine.
	ctx := testCtx(t)
	c, clk, srv := startCoordinator(t)
	standby, sclk := newCoordinator(t, srv.JetStream(t))
	const ttl = time.Second
	s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", ttl, lease.WithRenewInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(ttl / 2)
	waitRenewedTo(t, s, clk.Now().Add(ttl))
	s.Orphan()
	noKeepalive(t, "Orphan")
	e := asError(t, s.Err(), lease.ErrLeaseOrphaned)
	if e.Holder != "relay-1" || e.Epoch != 1 || !e.ExpiresAt.Equal(clk.Now().Add(ttl)) {
		t.Fatalf("orphaned error = %+v", e)
	}
	l := s.Lease()
	if !isClosed(s.Done()) || l.Held() || l.Lost() {
		t.Fatalf("orphaned lease: done %v held %v lost %v", isClosed(s.Done()), l.Held(), l.Lost())
	}
	if err := l.Renew(ctx); !errors.Is(err, lease.ErrLeaseOrphaned) {
		t.Fatalf("renew after orphan: %v", err)
	}

	// The record stays, and nothing renews it.
	before, err := c.CurrentLease(ctx, domain, "dc-a")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // 50 renew intervals
	after, err := c.CurrentLease(ctx, domain, "dc-a")
	if err != nil || after.Revision != before.Revision || !after.ExpiresAt.Equal(e.ExpiresAt) {
		t.Fatalf("record moved after orphan: %+v → %+v, %v", before, after, err)
	}
	// A standby waits for the server to expire it, as after a crash,
	// whatever its own clock says...
	sclk.Advance(time.Hour)
	_, err = standby.Acquire(ctx, domain, "dc-a", "relay-2", ttl)
	if held := asError(t, err, lease.ErrLeaseHeld); held.Holder != "relay-1" || held.Epoch != 1 {
		t.Fatalf("held error = %+v", held)
	}
	// ...and takes the next epoch once it lapsed.
	waitNoLease(t, standby, "dc-a", 5*time.Second)
	l2, err := standby.Acquire(ctx, domain, "dc-a", "relay-2", ttl)
	if err != nil || l2.Epoch() != 2 {
		t.Fatalf("standby after the lapse: %v, %v", l2, err)
	}
	// Closing the orphaned session releases nothing: the record is the
	// standby's now.
	if err := s.Close(ctx); err != nil {
		t.Fatalf("close after orphan: %v", err)
	}
	if !errors.Is(s.Err(), lease.ErrLeaseOrphaned) {
		t.Fatalf("err after close of an orphaned session: %v", s.Err())
	}
	if info, err := c.CurrentLease(ctx, domain, "dc-a"); err != nil || info.Owner != "relay-2" || info.Epoch != 2 {
		t.Fatalf("standby's record = %+v, %v", info, err)
	}
}

// Close after Orphan deletes nothing, even while the orphaned record is
// still live: an orphaned lease only lapses.
func TestOrphanedSessionIsNotReleasedByItsClose(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.Orphan()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := c.CurrentLease(ctx, domain, "dc-a"); err != nil || info.Owner != "relay-1" {
		t.Fatalf("orphaned record = %+v, %v; want it left to lapse", info, err)
	}
}

func TestSessionDoneClosesWhenANewerEpochFencesIt(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	c1, _ := newCoordinator(t, srv.JetStream(t))
	c2, _ := newCoordinator(t, srv.JetStream(t))
	kv, err := srv.JetStream(t).KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 10 * time.Second

	t.Run("another owner", func(t *testing.T) {
		s, err := c1.NewSession(ctx, domain, "dc-a", "relay-1", ttl, lease.WithRenewInterval(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		// An operator removes the live record and relay-2 takes the
		// lease: nobody's clock could have let it in.
		if err := kv.Delete(ctx, "lease."+domain+".dc-a"); err != nil {
			t.Fatal(err)
		}
		nl, err := c2.Acquire(ctx, domain, "dc-a", "relay-2", ttl)
		if err != nil {
			t.Fatal(err)
		}
		waitClosed(t, s.Done(), "session Done after a take-over")
		err = s.Err()
		if !errors.Is(err, lease.ErrLeaseLost) || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || !s.Lease().Lost() {
			t.Fatalf("fenced session err = %v, want ErrLeaseLost and ErrKeyRevisionMismatch", err)
		}
		noKeepalive(t, "the loss") // the goroutine ends by itself with the lease
		if err := s.Close(ctx); err != nil {
			t.Fatalf("close of a fenced session: %v", err)
		}
		if !errors.Is(s.Err(), lease.ErrLeaseLost) {
			t.Fatalf("close replaced the loss: %v", s.Err())
		}
		if info, err := c2.CurrentLease(ctx, domain, "dc-a"); err != nil || info.Owner != "relay-2" || info.Epoch != nl.Epoch() {
			t.Fatalf("new holder's record = %+v, %v", info, err)
		}
	})

	t.Run("same owner re-acquiring", func(t *testing.T) {
		s, err := c1.NewSession(ctx, domain, "dc-b", "relay-1", ttl, lease.WithRenewInterval(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		second, err := c1.Acquire(ctx, domain, "dc-b", "relay-1", ttl)
		if err != nil {
			t.Fatal(err)
		}
		waitClosed(t, s.Done(), "session Done after the same owner took a newer epoch")
		if !errors.Is(s.Err(), lease.ErrLeaseLost) {
			t.Fatalf("err = %v, want ErrLeaseLost", s.Err())
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		noKeepalive(t, "Close")
		if info, err := c1.CurrentLease(ctx, domain, "dc-b"); err != nil || info.Epoch != second.Epoch() {
			t.Fatalf("newer epoch's record = %+v, %v; the fenced session must not delete it", info, err)
		}
	})

	t.Run("found by Verify", func(t *testing.T) {
		s, err := c1.NewSession(ctx, domain, "dc-c", "relay-1", ttl) // renews every ttl/3: not in this test
		if err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, "lease."+domain+".dc-c"); err != nil {
			t.Fatal(err)
		}
		if _, err := c2.Acquire(ctx, domain, "dc-c", "relay-2", ttl); err != nil {
			t.Fatal(err)
		}
		if err := s.Lease().Verify(ctx); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("verify: %v", err)
		}
		waitClosed(t, s.Done(), "session Done after Verify found the loss")
		noKeepalive(t, "the loss")
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Renewals that fail for a transient reason keep the lease until it
// expires; a renewal hung on an unreachable server gives up at the expiry,
// and the lease ends right then, not one request timeout later.
func TestSessionHoldsThroughAnOutageUntilExpiryThenEnds(t *testing.T) {
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	lease.SetClock(c, time.Now) // one clock for the expiry and the renewal's deadline
	const ttl = time.Second
	s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", ttl, lease.WithRenewInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rev := s.Lease().Revision()
	testenv.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if s.Lease().Revision() == rev {
			return errors.New("no renewal yet")
		}
		return nil
	})
	srv.Shutdown()
	waitClosed(t, s.Done(), "session Done after the outage outlasted the TTL")
	ended, expires := time.Now(), s.Lease().ExpiresAt()
	if ended.Before(expires) {
		t.Fatalf("lease ended %s before its expiry by failed renewals: %v", expires.Sub(ended), s.Err())
	}
	// Without the bound, the hung renewal would wait for JetStream's
	// default request timeout (5 s) before the lease could end.
	if late := ended.Sub(expires); late > 2*time.Second {
		t.Fatalf("lease ended %s after its expiry", late)
	}
	if e := asError(t, s.Err(), lease.ErrLeaseLost); !strings.Contains(e.Detail, "expired") {
		t.Fatalf("lost for %q, want expiry", e.Detail)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("close of an expired session: %v", err)
	}
	noKeepalive(t, "Close")
}

func TestSessionCloseHonoursTheCallersDeadline(t *testing.T) {
	const ttl = time.Minute

	t.Run("shorter than a hung renewal", func(t *testing.T) {
		ctx := testCtx(t)
		c, _, srv := startCoordinator(t)
		// A renewal may wait until the expiry, a minute away: Close must
		// not wait for the one in flight.
		s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", ttl, lease.WithRenewInterval(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		time.Sleep(20 * time.Millisecond) // a renewal is now in flight
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = s.Close(cctx)
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("Close took %s with a 200ms deadline", took)
		}
		if err == nil {
			t.Fatal("Close with the server down reported a release")
		}
		noKeepalive(t, "Close")
		if !errors.Is(s.Err(), lease.ErrLeaseReleased) || !isClosed(s.Done()) {
			t.Fatalf("lease not ended locally: %v", s.Err())
		}
	})

	t.Run("none: the release timeout bounds the release", func(t *testing.T) {
		ctx := testCtx(t)
		c, _, srv := startCoordinator(t)
		s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", ttl,
			lease.WithRenewInterval(time.Millisecond), lease.WithReleaseTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		start := time.Now()
		// No deadline: without the default bound, the release would
		// wait for JetStream's own 5 s request timeout.
		if err := s.Close(context.Background()); err == nil {
			t.Fatal("Close with the server down reported a release")
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("Close took %s with a 100ms release timeout", took)
		}
		noKeepalive(t, "Close")
	})

	t.Run("longer than the release timeout", func(t *testing.T) {
		ctx := testCtx(t)
		srv := testenv.StartServer(t)
		nc := srv.Connect(t)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := newCoordinator(t, js)
		// No renewal in flight (the first is 20 s away): the release is
		// the request that has to wait out the outage.
		s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", ttl,
			lease.WithRenewInterval(20*time.Second), lease.WithReleaseTimeout(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		srv.Shutdown()
		// A request written before the client noticed the cut is lost
		// with the old connection; one written while it reconnects is
		// sent once it has.
		testenv.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			if st := nc.Status(); st != nats.RECONNECTING {
				return errors.New("client status " + st.String())
			}
			return nil
		})
		restarted := make(chan struct{})
		go func() {
			defer close(restarted)
			time.Sleep(500 * time.Millisecond) // ten release timeouts
			srv.Restart(t)
		}()
		// The caller allows 30 s: the release waits out the outage
		// instead of giving up after the 50 ms default.
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = s.Close(cctx)
		<-restarted
		if err != nil {
			t.Fatalf("Close within the caller's deadline: %v", err)
		}
		noKeepalive(t, "Close")
		var l2 *lease.Lease
		testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
			actx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			var err error
			l2, err = c.Acquire(actx, domain, "dc-a", "relay-2", ttl)
			return err
		})
		if l2.Epoch() != 2 {
			t.Fatalf("standby epoch %d, want 2", l2.Epoch())
		}
	})
}

func TestSessionOrphanAbortsARenewalInFlight(t *testing.T) {
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	// A renewal may wait until the expiry, a minute away.
	s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", time.Minute, lease.WithRenewInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	time.Sleep(20 * time.Millisecond) // a renewal is now in flight
	orphaned := make(chan struct{})
	go func() {
		s.Orphan()
		close(orphaned)
	}()
	waitClosed(t, orphaned, "Orphan with a renewal hung on a stopped server")
	noKeepalive(t, "Orphan")
	if !errors.Is(s.Err(), lease.ErrLeaseOrphaned) {
		t.Fatalf("err = %v, want ErrLeaseOrphaned", s.Err())
	}
}

// Close and Orphan join the goroutine before they return, however often
// sessions come and go.
func TestSessionsLeaveNoGoroutine(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	for i := range 100 {
		s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", time.Minute, lease.WithRenewInterval(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			noKeepalive(t, "Close")
		} else {
			s.Orphan()
			noKeepalive(t, "Orphan")
		}
	}
}

// Before sessions, a renewal whose reply was lost (a timeout, though the
// server wrote it) left Release holding a stale revision: the delete was
// refused, Release reported success, and the record blocked the standby
// for a whole TTL.
func TestReleaseDeletesItsOwnRecordAtAMovedRevision(t *testing.T) {
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	kv, err := srv.JetStream(t).KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", time.Minute) // no renewal within the test
	if err != nil {
		t.Fatal(err)
	}
	// What the lost-reply renewal left behind: our record, at a revision
	// the lease never saw.
	key := "lease." + domain + ".dc-a"
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, e.Value()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := c.CurrentLease(ctx, domain, "dc-a"); !errors.Is(err, lease.ErrNoLease) {
		t.Fatalf("record after close: %v, want ErrNoLease", err)
	}
	l2, err := c.Acquire(ctx, domain, "dc-a", "relay-2", time.Minute)
	if err != nil || l2.Epoch() != 2 {
		t.Fatalf("standby after close: %v, %v; want epoch 2 at once", l2, err)
	}
}

// A released lease never deletes a record that is not its own, whatever
// moved the revision.
func TestReleaseLeavesAnotherEpochsRecord(t *testing.T) {
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	kv, err := srv.JetStream(t).KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := "lease." + domain + ".dc-a"
	first, err := c.Acquire(ctx, domain, "dc-a", "relay-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Acquire(ctx, domain, "dc-a", "relay-1", time.Minute) // same owner, newer epoch
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := c.CurrentLease(ctx, domain, "dc-a"); err != nil || info.Epoch != second.Epoch() {
		t.Fatalf("record after the older epoch's release = %+v, %v", info, err)
	}

	// A record removed by someone else leaves nothing to delete.
	third, err := c.Acquire(ctx, domain, "dc-a", "relay-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := third.Release(ctx); err != nil || !errors.Is(third.Err(), lease.ErrLeaseReleased) {
		t.Fatalf("release of a removed record: %v, %v", err, third.Err())
	}

	// A record that does not decode is not ours either.
	fourth, err := c.Acquire(ctx, domain, "dc-a", "relay-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, []byte("junk")); err != nil {
		t.Fatal(err)
	}
	if err := fourth.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, key); err != nil || string(e.Value()) != "junk" {
		t.Fatalf("undecodable record after release: %v", err)
	}
}

func TestNewSessionRefusesUnusableTimingsBeforeAcquiring(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	const ttl = time.Second
	for name, tc := range map[string]struct {
		ttl  time.Duration
		opts []lease.SessionOption
	}{
		"interval equal to the ttl":  {ttl, []lease.SessionOption{lease.WithRenewInterval(ttl)}},
		"interval beyond the ttl":    {ttl, []lease.SessionOption{lease.WithRenewInterval(2 * ttl)}},
		"negative interval":          {ttl, []lease.SessionOption{lease.WithRenewInterval(-time.Millisecond)}},
		"ttl too short for a third":  {2 * time.Nanosecond, nil},
		"zero ttl":                   {0, nil},
		"negative release timeout":   {ttl, []lease.SessionOption{lease.WithReleaseTimeout(-time.Millisecond)}},
		"negative timeout, interval": {ttl, []lease.SessionOption{lease.WithRenewInterval(time.Millisecond), lease.WithReleaseTimeout(-1)}},
	} {
		s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", tc.ttl, tc.opts...)
		if !errors.Is(err, lease.ErrInvalidArgument) || s != nil {
			t.Errorf("%s: %v, %v; want ErrInvalidArgument", name, s, err)
		}
	}
	if e, err := c.CurrentEpoch(ctx, domain, "dc-a"); err != nil || e != 0 {
		t.Fatalf("epoch %d, %v after refused sessions; want nothing acquired", e, err)
	}
	// The shortest usable interval is one below the TTL.
	s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", ttl, lease.WithRenewInterval(ttl-time.Nanosecond))
	if err != nil {
		t.Fatalf("interval ttl-1ns: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A 3 ns TTL has a 1 ns default interval: usable, if pointless.
	s, err = c.NewSession(ctx, domain, "dc-b", "relay-1", 3*time.Nanosecond)
	if err != nil {
		t.Fatalf("ttl 3ns: %v", err)
	}
	s.Orphan()
}

func TestNewSessionReportsAcquireErrors(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	if _, err := c.NewSession(ctx, domain, "dc.a", "relay-1", time.Minute); !errors.Is(err, lease.ErrInvalidName) {
		t.Fatalf("bad dc: %v", err)
	}
	holder, err := c.NewSession(ctx, domain, "dc-a", "relay-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	_, err = c.NewSession(ctx, domain, "dc-a", "relay-2", time.Minute)
	if e := asError(t, err, lease.ErrLeaseHeld); e.Holder != "relay-1" {
		t.Fatalf("held error = %+v", e)
	}
	if n := keepalives(); n != 1 {
		t.Fatalf("%d keepalive goroutines; a refused session must start none", n)
	}
	// The acquisition honours its context; the session does not keep it.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.NewSession(cctx, domain, "dc-b", "relay-1", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquisition: %v", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	s, err := c.NewSession(sctx, domain, "dc-c", "relay-1", time.Minute, lease.WithRenewInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	rev := s.Lease().Revision()
	testenv.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if s.Lease().Revision() == rev {
			return errors.New("no renewal after the acquisition's context ended")
		}
		return nil
	})
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// Before, Err and Lost took the lease's lock, which a renewal holds across
// its request: with the server unreachable, asking why a session ended (or
// whether it had) waited for the renewal, up to the lease's expiry.
func TestSessionErrDoesNotWaitForARenewalInFlight(t *testing.T) {
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	// A renewal may wait until the expiry, a minute away.
	s, err := c.NewSession(ctx, domain, "dc-a", "relay-1", time.Minute, lease.WithRenewInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Orphan()
	srv.Shutdown()
	time.Sleep(20 * time.Millisecond) // a renewal is now in flight
	answered := make(chan error, 1)
	go func() {
		_ = s.Lease().Lost()
		answered <- s.Err()
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("err = %v while held", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Err still waiting for the renewal in flight after 5s")
	}
}
