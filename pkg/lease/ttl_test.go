package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// Issue 15 part 5: lease liveness was judged by comparing the holder's
// expires_at with the standby's wall clock. These tests give the peers
// clocks that disagree by seconds and check that only the server's expiry
// of the key decides.

// holderAndSkewedStandby starts a server, a session of relay-1 holding
// dc-a's lease for ttl (renewed every 100ms, on the real clock), and a
// standby coordinator whose clock is off by skew.
func holderAndSkewedStandby(t *testing.T, ttl, skew time.Duration) (*lease.Session, *lease.Coordinator) {
	t.Helper()
	srv := testenv.StartServer(t)
	holder, _ := newCoordinator(t, srv.JetStream(t))
	lease.SetClock(holder, time.Now)
	standby, _ := newCoordinator(t, srv.JetStream(t))
	lease.SetClock(standby, skewed(skew))
	s, err := holder.NewSession(testCtx(t), domain, "dc-a", "relay-1", ttl, lease.WithRenewInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return s, standby
}

// skewed is the real clock shifted by d, monotonic reading included.
func skewed(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// leaseStream returns the bucket's backing stream, for raw reads.
func leaseStream(t *testing.T, js jetstream.JetStream, bucket string) jetstream.Stream {
	t.Helper()
	st, err := js.Stream(testCtx(t), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func streamConfig(t *testing.T, js jetstream.JetStream, bucket string) jetstream.StreamConfig {
	t.Helper()
	info, err := leaseStream(t, js, bucket).Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.Config
}

// Before, a standby whose clock ran 5 s fast took a live lease as soon as
// the holder's expires_at was behind its clock: split brain until fencing.
func TestAStandbyWhoseClockRunsFastDoesNotTakeOverALiveLease(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const ttl = time.Second
	s, standby := holderAndSkewedStandby(t, ttl, 5*time.Second)
	defer s.Close(ctx)
	rev := s.Lease().Revision()
	// Two TTLs of the server's time: without the renewals the record would
	// have expired twice over, and to the standby's clock every stored
	// expires_at is 4 s in the past.
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); {
		_, err := standby.Acquire(ctx, domain, "dc-a", "relay-2", ttl)
		e := asError(t, err, lease.ErrLeaseHeld)
		if e.Holder != "relay-1" || e.Epoch != 1 || e.Detail != "" {
			t.Fatalf("held error = %+v", e)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s.Err() != nil || !s.Lease().Held() || s.Lease().Revision() == rev {
		t.Fatalf("holder: err %v held %v revision %d (acquired at %d)", s.Err(), s.Lease().Held(), s.Lease().Revision(), rev)
	}
	if e, err := standby.CurrentEpoch(ctx, domain, "dc-a"); err != nil || e != 1 {
		t.Fatalf("epoch %d, %v: the refusals burnt epochs", e, err)
	}
}

// Before, a standby whose clock ran 5 s slow left a dead holder's lease
// alone for 5 s after it had expired.
func TestAStandbyWhoseClockRunsSlowTakesOverRightAfterTheServerExpiresTheLease(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const ttl = time.Second
	s, standby := holderAndSkewedStandby(t, ttl, -5*time.Second)
	rev := s.Lease().Revision()
	testenv.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if s.Lease().Revision() == rev {
			return errors.New("no renewal yet")
		}
		return nil
	})
	s.Orphan() // a crash: the record is left to the server
	// The holder's clock is the real one: its last write started a TTL
	// before this, and the server stored it no earlier.
	expiry := s.Lease().ExpiresAt()
	var took time.Time
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		l, err := standby.Acquire(ctx, domain, "dc-a", "relay-2", ttl)
		if err != nil {
			if !errors.Is(err, lease.ErrLeaseHeld) {
				t.Fatalf("standby: %v", err)
			}
			return err
		}
		took = time.Now()
		if l.Epoch() != 2 {
			t.Fatalf("standby epoch %d, want 2", l.Epoch())
		}
		return nil
	})
	if took.Before(expiry) {
		t.Fatalf("standby took the lease %s before the holder's TTL ran out", expiry.Sub(took))
	}
	// The server's expiry timer fires at the message's deadline (at the
	// soonest 250 ms after its previous run); a second is generous on a
	// loaded machine and far below the 5 s the slow clock used to cost.
	late := took.Sub(expiry)
	t.Logf("taken %s after the holder's TTL ran out", late)
	if late > time.Second {
		t.Fatalf("standby took the lease %s after the holder's TTL ran out", late)
	}
	s.Close(ctx)
}

// The lease key's expiry removes only the lease: the epoch counter and the
// lane map carry no TTL, and epochs go on above the expired one.
func TestEpochCountersAndLaneMapsSurviveALeaseExpiry(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	js := srv.JetStream(t)
	st := leaseStream(t, js, lease.DefaultBucket)
	if _, err := c.Register(ctx, domain, "dc-a", testPool(t, "dc-a")); err != nil {
		t.Fatal(err)
	}
	if err := c.RequestSnapshot(ctx, domain, "dc-a", "consumer-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, domain, "dc-a", "relay-1", time.Second); err != nil {
		t.Fatal(err)
	}
	lk := "$KV." + lease.DefaultBucket + ".lease." + domain + ".dc-a"
	m, err := st.GetLastMsgForSubject(ctx, lk)
	if err != nil || m.Header.Get(jetstream.MsgTTLHeader) != "1s" {
		t.Fatalf("lease record %v, %v; want Nats-TTL 1s", m, err)
	}
	waitNoLease(t, c, "dc-a", 5*time.Second)
	// What the server left: its expiry marker (which lapses in turn after
	// the bucket's LimitMarkerTTL), or nothing once that lapsed too.
	if m, err := st.GetLastMsgForSubject(ctx, lk); err == nil {
		if r := m.Header.Get(jetstream.MarkerReasonHeader); r != "MaxAge" {
			t.Fatalf("left on the lease key: %q with headers %v", m.Data, m.Header)
		}
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatal(err)
	}
	for _, key := range []string{"epoch." + domain + ".dc-a", "lanes." + domain, "snapreq." + domain + ".dc-a"} {
		m, err := st.GetLastMsgForSubject(ctx, "$KV."+lease.DefaultBucket+"."+key)
		if err != nil {
			t.Fatalf("%s after the lease expired: %v", key, err)
		}
		if v := m.Header.Get(jetstream.MsgTTLHeader); v != "" {
			t.Fatalf("%s written with Nats-TTL %q", key, v)
		}
	}
	if e, err := c.CurrentEpoch(ctx, domain, "dc-a"); err != nil || e != 1 {
		t.Fatalf("epoch after expiry = %d, %v; want 1", e, err)
	}
	if m, err := c.LaneMap(ctx, domain); err != nil || m.Occupied() != 1 {
		t.Fatalf("lane map after expiry = %+v, %v", m, err)
	}
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-2", time.Second)
	if err != nil || l.Epoch() != 2 {
		t.Fatalf("acquire after expiry: %v, %v; want epoch 2", l, err)
	}
}

// The server keeps TTLs in whole seconds and truncates finer ones, which
// would expire a record before its holder stops: they are rounded up.
func TestTheServerTTLIsTheLeaseTTLRoundedUpToWholeSeconds(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	for dc, tc := range map[string]struct{ ttl, want time.Duration }{
		"dc-a": {3 * time.Nanosecond, time.Second},
		"dc-b": {time.Second, time.Second},
		"dc-c": {1500 * time.Millisecond, 2 * time.Second},
		"dc-d": {time.Minute, time.Minute},
	} {
		l, err := c.Acquire(ctx, domain, dc, "relay-1", tc.ttl)
		if err != nil {
			t.Fatal(err)
		}
		if l.TTL() != tc.ttl {
			t.Errorf("%s: lease TTL %s, want %s as asked", dc, l.TTL(), tc.ttl)
		}
		info, err := c.CurrentLease(ctx, domain, dc)
		if err != nil || info.TTL != tc.want {
			t.Errorf("ttl %s: stored %+v, %v; want a server TTL of %s", tc.ttl, info, err, tc.want)
		}
	}
}

// A renewal whose reply arrives only once the lease has expired by the
// holder's clock may have been stored after the server expired the record
// before it, and the server's expiry marker would then remove it: the
// lease ends instead of living on a record that may be gone.
func TestARenewalAcknowledgedAfterTheLeaseExpiredEndsIt(t *testing.T) {
	ctx := testCtx(t)
	c, clk, _ := startCoordinator(t)
	const ttl = 10 * time.Second

	// Acknowledged at the last live instant: renewed.
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	clk.SetStep(ttl - time.Nanosecond) // the renewal's write takes that long
	err = l.Renew(ctx)
	clk.SetStep(0)
	if err != nil {
		t.Fatalf("renewal acknowledged 1ns before the expiry: %v", err)
	}

	// Acknowledged at the expiry: lost, though the write was stored.
	l, err = c.Acquire(ctx, domain, "dc-b", "relay-1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	rev := l.Revision()
	clk.SetStep(ttl)
	err = l.Renew(ctx)
	clk.SetStep(0)
	if e := asError(t, err, lease.ErrLeaseLost); !strings.Contains(e.Detail, "acknowledged after the lease expired") {
		t.Fatalf("lost for %q", e.Detail)
	}
	if !isClosed(l.Done()) || l.Held() || l.Revision() != rev {
		t.Fatalf("late renewal: done %v held %v revision %d→%d", isClosed(l.Done()), l.Held(), rev, l.Revision())
	}
	if info, err := c.CurrentLease(ctx, domain, "dc-b"); err != nil || info.Revision <= rev {
		t.Fatalf("record %+v, %v; want the late renewal's write stored (it lapses by its TTL)", info, err)
	}
}

// The holder judges its own expiry in Verify too, by its own clock.
func TestVerifyEndsALeaseExpiredByTheHoldersClock(t *testing.T) {
	ctx := testCtx(t)
	c, clk, _ := startCoordinator(t)
	const ttl = time.Minute
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(ttl - time.Nanosecond)
	if err := l.Verify(ctx); err != nil {
		t.Fatalf("verify at the last live instant: %v", err)
	}
	clk.Advance(time.Nanosecond)
	if e := asError(t, l.Verify(ctx), lease.ErrLeaseLost); e.Detail != "expired" {
		t.Fatalf("lost for %q, want expired", e.Detail)
	}
	// The record is still stored: the server's TTL runs from its own
	// store time, which the holder's clock never comes after.
	if info, err := c.CurrentLease(ctx, domain, "dc-a"); err != nil || info.Owner != "relay-1" {
		t.Fatalf("record %+v, %v", info, err)
	}
}

// oldBucket creates the lease bucket as New did before per-key TTLs.
func oldBucket(t *testing.T, js jetstream.JetStream, history uint8) jetstream.KeyValue {
	t.Helper()
	kv, err := js.CreateKeyValue(testCtx(t), jetstream.KeyValueConfig{
		Bucket:      lease.DefaultBucket,
		Description: "ckfrelay lane maps, producer leases, epoch counters, snapshot requests",
		History:     history,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// A bucket from before per-key TTLs is upgraded in place: its settings and
// its epoch counters stay, and a record its relays left without a server
// TTL is taken once it has stood unchanged for the TTL.
func TestABucketCreatedBeforePerKeyTTLsIsUpgradedInPlace(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	js := srv.JetStream(t)
	kv := oldBucket(t, js, 7)
	if cfg := streamConfig(t, js, lease.DefaultBucket); cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL != 0 {
		t.Fatalf("old bucket already has TTLs: %+v", cfg)
	}
	if _, err := kv.Put(ctx, "epoch."+domain+".dc-a", []byte(`{"epoch":41}`)); err != nil {
		t.Fatal(err)
	}
	// Left by a relay of before, whose clock ran a day fast: by the old
	// rule a standby waited a day.
	stale := []byte(`{"owner":"relay-old","epoch":41,"acquired_at":1,"expires_at":` +
		`9000000000000000000}`)
	if _, err := kv.Put(ctx, "lease."+domain+".dc-a", stale); err != nil {
		t.Fatal(err)
	}

	c, clk := newCoordinator(t, js)
	cfg := streamConfig(t, js, lease.DefaultBucket)
	if !cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL != time.Second {
		t.Fatalf("after New: allow_msg_ttl %v, marker TTL %s; want true, 1s", cfg.AllowMsgTTL, cfg.SubjectDeleteMarkerTTL)
	}
	if cfg.MaxMsgsPerSubject != 7 || cfg.MaxAge != 0 || !strings.HasPrefix(cfg.Description, "ckfrelay") {
		t.Fatalf("upgrade changed other settings: %+v", cfg)
	}
	if e, err := c.CurrentEpoch(ctx, domain, "dc-a"); err != nil || e != 41 {
		t.Fatalf("epoch after the upgrade = %d, %v; want 41", e, err)
	}
	info, err := c.CurrentLease(ctx, domain, "dc-a")
	if err != nil || info.TTL != 0 || info.Owner != "relay-old" {
		t.Fatalf("old record = %+v, %v; want it without a server TTL", info, err)
	}

	const ttl = time.Minute
	_, err = c.Acquire(ctx, domain, "dc-a", "relay-new", ttl)
	if e := asError(t, err, lease.ErrLeaseHeld); e.Holder != "relay-old" || !strings.Contains(e.Detail, "no server TTL") {
		t.Fatalf("held error = %+v", e)
	}
	clk.Advance(ttl - time.Nanosecond)
	if _, err := c.Acquire(ctx, domain, "dc-a", "relay-new", ttl); !errors.Is(err, lease.ErrLeaseHeld) {
		t.Fatalf("unchanged for 1ns less than the TTL: %v, want ErrLeaseHeld", err)
	}
	clk.Advance(time.Nanosecond)
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-new", ttl)
	if err != nil || l.Epoch() != 42 {
		t.Fatalf("take-over of the unchanged old record: %v, %v; want epoch 42", l, err)
	}
	if info, err := c.CurrentLease(ctx, domain, "dc-a"); err != nil || info.TTL != ttl {
		t.Fatalf("new record = %+v, %v; want a server TTL", info, err)
	}
	// The acquisition rolled the key up: no older revision is left to
	// resurface when this record expires.
	w, err := kv.History(ctx, "lease."+domain+".dc-a")
	if err != nil || len(w) != 1 {
		t.Fatalf("lease key history: %d revisions, %v; want only the new record", len(w), err)
	}

	// Opening again finds nothing to upgrade.
	before := streamConfig(t, js, lease.DefaultBucket)
	if _, err := lease.New(ctx, js); err != nil {
		t.Fatal(err)
	}
	if after := streamConfig(t, js, lease.DefaultBucket); after.SubjectDeleteMarkerTTL != before.SubjectDeleteMarkerTTL || !after.AllowMsgTTL {
		t.Fatalf("reopen changed the bucket: %+v → %+v", before, after)
	}
}

// A relay of before that is still alive rewrites its record every renewal:
// each rewrite starts the standby's wait again, so it never takes a live
// lease, and it takes a dead one a TTL after the last rewrite.
func TestARecordWithoutAServerTTLIsTakenOnlyOnceUnchangedForTheTTL(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	js := srv.JetStream(t)
	kv := oldBucket(t, js, 5)
	c, clk := newCoordinator(t, js)
	const ttl = 10 * time.Second
	key := "lease." + domain + ".dc-a"
	rec := []byte(`{"owner":"relay-old","epoch":3,"acquired_at":1,"expires_at":2}`) // by the old rule: long expired
	if _, err := kv.Put(ctx, key, rec); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Acquire(ctx, domain, "dc-a", "relay-new", ttl); !errors.Is(err, lease.ErrLeaseHeld) {
			t.Fatalf("standby: %v, want ErrLeaseHeld", err)
		}
		clk.Advance(ttl - time.Nanosecond)
		if _, err := kv.Put(ctx, key, rec); err != nil { // the old relay renews
			t.Fatal(err)
		}
	}
	if _, err := c.Acquire(ctx, domain, "dc-a", "relay-new", ttl); !errors.Is(err, lease.ErrLeaseHeld) {
		t.Fatalf("standby after a renewal: %v, want ErrLeaseHeld", err)
	}
	clk.Advance(ttl)
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-new", ttl)
	if err != nil || l.Epoch() != 4 {
		t.Fatalf("standby after the old relay stopped: %v, %v; want epoch 4", l, err)
	}
	// Its own record has a server TTL: the next standby does not wait on
	// any clock, however far it advances.
	other, oclk := newCoordinator(t, js)
	oclk.Advance(24 * time.Hour)
	for range 2 {
		if _, err := other.Acquire(ctx, domain, "dc-a", "relay-3", ttl); !errors.Is(err, lease.ErrLeaseHeld) {
			t.Fatalf("next standby: %v, want ErrLeaseHeld", err)
		}
		oclk.Advance(ttl)
	}
}

// What the server stores in Nats-TTL is read as the server reads it:
// whole seconds as well as a duration; "never" is no expiry, so such a
// record is judged like one without a TTL.
func TestStoredTTLHeadersAreReadAsTheServerReadsThem(t *testing.T) {
	ctx := testCtx(t)
	c, clk, srv := startCoordinator(t)
	js := srv.JetStream(t)
	put := func(dc, ttl string) {
		t.Helper()
		m := nats.NewMsg("$KV." + lease.DefaultBucket + ".lease." + domain + "." + dc)
		m.Data = []byte(`{"owner":"relay-old","epoch":1}`)
		m.Header.Set(jetstream.MsgTTLHeader, ttl)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	put("dc-a", "30")
	put("dc-b", "never")
	if info, err := c.CurrentLease(ctx, domain, "dc-a"); err != nil || info.TTL != 30*time.Second {
		t.Fatalf("whole seconds: %+v, %v", info, err)
	}
	if info, err := c.CurrentLease(ctx, domain, "dc-b"); err != nil || info.TTL != 0 {
		t.Fatalf("never: %+v, %v", info, err)
	}
	for _, dc := range []string{"dc-a", "dc-b"} {
		if _, err := c.Acquire(ctx, domain, dc, "relay-new", time.Minute); !errors.Is(err, lease.ErrLeaseHeld) {
			t.Fatalf("%s: %v, want ErrLeaseHeld", dc, err)
		}
	}
	clk.Advance(time.Minute)
	if _, err := c.Acquire(ctx, domain, "dc-a", "relay-new", time.Minute); !errors.Is(err, lease.ErrLeaseHeld) {
		t.Fatalf("a record with a server TTL taken by the clock: %v", err)
	}
	if _, err := c.Acquire(ctx, domain, "dc-b", "relay-new", time.Minute); err != nil {
		t.Fatalf("a never-expiring record unchanged for the TTL: %v", err)
	}
}

// An operator's own marker TTL is kept; a stream with message TTLs but no
// markers gets them; a bucket the server cannot give markers to is
// refused with the reason.
func TestTheUpgradeKeepsAnOperatorsMarkerTTLAndReportsARefusal(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	js := srv.JetStream(t)

	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "own-markers", LimitMarkerTTL: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.New(ctx, js, lease.WithBucket("own-markers")); err != nil {
		t.Fatal(err)
	}
	if cfg := streamConfig(t, js, "own-markers"); cfg.SubjectDeleteMarkerTTL != 3*time.Second {
		t.Fatalf("operator's marker TTL became %s", cfg.SubjectDeleteMarkerTTL)
	}

	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ttl-no-markers"}); err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig(t, js, "ttl-no-markers")
	cfg.AllowMsgTTL = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.New(ctx, js, lease.WithBucket("ttl-no-markers")); err != nil {
		t.Fatal(err)
	}
	if cfg := streamConfig(t, js, "ttl-no-markers"); !cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL != time.Second {
		t.Fatalf("after New: %v, %s; want markers of 1s", cfg.AllowMsgTTL, cfg.SubjectDeleteMarkerTTL)
	}

	// A mirror cannot leave markers of its own: the server refuses.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "origin"}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "mirror", Mirror: &jetstream.StreamSource{Name: "origin"}}); err != nil {
		t.Fatal(err)
	}
	_, err := lease.New(ctx, js, lease.WithBucket("mirror"))
	if err == nil || !strings.Contains(err.Error(), "enable per-key TTLs") || !strings.Contains(err.Error(), "STREAM.UPDATE.KV_mirror") {
		t.Fatalf("mirror bucket: %v, want the upgrade's refusal", err)
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("cause lost: %v", err)
	}
}

// Writes through a JetStream domain reach the bucket: the lease subjects
// carry the domain's API prefix, as nats.go's own KV writes do.
func TestLeasesAreWrittenThroughAJetStreamDomain(t *testing.T) {
	ctx := testCtx(t)
	tp := testenv.StartHubWithLeaves(t, "dc-a")
	local, _ := newCoordinator(t, tp.Leaf(t, "dc-a").JetStream(t))
	remote := hubCoordinator(t, tp, "dc-a")
	l, err := remote.Acquire(ctx, domain, "dc-a", "relay-hub", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := local.CurrentLease(ctx, domain, "dc-a")
	if err != nil || info.Owner != "relay-hub" || info.Revision != l.Revision() || info.TTL != time.Minute {
		t.Fatalf("dc view = %+v, %v", info, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := local.CurrentLease(ctx, domain, "dc-a"); !errors.Is(err, lease.ErrNoLease) {
		t.Fatalf("after release: %v", err)
	}
}
