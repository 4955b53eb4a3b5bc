package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/testenv"
)

const domain = "prod"

// fakeClock is a settable clock shared by tests and coordinators.
type fakeClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration // added after every reading
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now
	c.now = c.now.Add(c.step)
	return now
}

// SetStep makes every later reading advance the clock by d afterwards.
func (c *fakeClock) SetStep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = d
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newCoordinator opens a coordinator on js with its own fake clock.
func newCoordinator(t *testing.T, js jetstream.JetStream) (*lease.Coordinator, *fakeClock) {
	t.Helper()
	c, err := lease.New(testCtx(t), js)
	if err != nil {
		t.Fatalf("lease.New: %v", err)
	}
	clk := newFakeClock()
	lease.SetClock(c, clk.Now)
	return c, clk
}

// hubCoordinator is a coordinator on the hub of tp that reaches the lease
// bucket of dc through that DC's JetStream domain. The leaf link may still
// be forming, so it retries lease.New until the bucket answers.
func hubCoordinator(t *testing.T, tp *testenv.Topology, dc string) *lease.Coordinator {
	t.Helper()
	js, err := jetstream.NewWithDomain(tp.Hub().Connect(t), dc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	var c *lease.Coordinator
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var err error
		c, err = lease.New(ctx, js)
		return err
	})
	return c
}

func startCoordinator(t *testing.T) (*lease.Coordinator, *fakeClock, *testenv.Server) {
	t.Helper()
	srv := testenv.StartServer(t)
	c, clk := newCoordinator(t, srv.JetStream(t))
	return c, clk, srv
}

func testPool(t *testing.T, dcName string) ckf.PoolID {
	t.Helper()
	d, err := ckf.DomainFromName(domain)
	if err != nil {
		t.Fatal(err)
	}
	return ckf.PoolID{Domain: d, Dc: ckf.DcIDFromName(dcName)}
}

func asError(t *testing.T, err error, kind lease.ErrorKind) *lease.Error {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("err = %v, want %v", err, kind)
	}
	var e *lease.Error
	if !errors.As(err, &e) {
		t.Fatalf("err %v is not a *lease.Error", err)
	}
	return e
}

func TestValidateName(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"dc-a", true},
		{"A_z-09", true},
		{strings.Repeat("x", lease.MaxNameLen), true},
		{strings.Repeat("x", lease.MaxNameLen+1), false},
		{"", false},
		{"dc.a", false},
		{"dc*", false},
		{">", false},
		{"dc a", false},
		{"dc/a", false},
		{"dé", false},
		// Each end of each accepted range, and the byte beside it.
		{"az", true}, {"AZ", true}, {"09", true},
		{"`", false}, {"{", false}, {"@", false}, {"[", false}, {"/", false}, {":", false},
	}
	for _, tc := range cases {
		err := lease.ValidateName(tc.name)
		if tc.ok && err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, lease.ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", tc.name, err)
		}
	}
}

func TestInvalidArguments(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	if _, err := c.Register(ctx, "bad.domain", "dc-a", testPool(t, "dc-a")); !errors.Is(err, lease.ErrInvalidName) {
		t.Errorf("Register bad domain: %v", err)
	}
	if _, err := c.Register(ctx, domain, "dc>", testPool(t, "dc-a")); !errors.Is(err, lease.ErrInvalidName) {
		t.Errorf("Register bad dc: %v", err)
	}
	if _, err := c.Acquire(ctx, domain, "dc-a", "", time.Second); !errors.Is(err, lease.ErrInvalidArgument) {
		t.Errorf("Acquire empty owner: %v", err)
	}
	if _, err := c.Acquire(ctx, domain, "dc-a", "r1", 0); !errors.Is(err, lease.ErrInvalidArgument) {
		t.Errorf("Acquire zero ttl: %v", err)
	}
	if _, err := c.Acquire(ctx, domain, "dc.a", "r1", time.Second); !errors.Is(err, lease.ErrInvalidName) {
		t.Errorf("Acquire bad dc: %v", err)
	}
	if err := c.RequestSnapshot(ctx, domain, "dc-a", ""); !errors.Is(err, lease.ErrInvalidArgument) {
		t.Errorf("RequestSnapshot empty requester: %v", err)
	}
	if _, err := c.WatchLaneMap(ctx, "a b"); !errors.Is(err, lease.ErrInvalidName) {
		t.Errorf("WatchLaneMap bad domain: %v", err)
	}
}

func TestNewOptions(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	js := srv.JetStream(t)
	for name, opt := range map[string]lease.Option{
		"history 0":     lease.WithHistory(0),
		"history 65":    lease.WithHistory(65),
		"replicas 0":    lease.WithReplicas(0),
		"cas 0":         lease.WithCASAttempts(0),
		"empty bucket":  lease.WithBucket(""),
		"replicas 6":    lease.WithReplicas(6),
		"negative hist": lease.WithHistory(-1),
	} {
		if _, err := lease.New(ctx, js, opt); !errors.Is(err, lease.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}

	c, err := lease.New(ctx, js, lease.WithBucket("custom"), lease.WithHistory(3), lease.WithMemoryStorage())
	if err != nil {
		t.Fatal(err)
	}
	if c.Bucket() != "custom" {
		t.Fatalf("bucket = %q", c.Bucket())
	}
	kv, err := js.KeyValue(ctx, "custom")
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 3 {
		t.Fatalf("history = %d, want 3", st.History())
	}
	// Opening again reuses the bucket.
	if _, err := lease.New(ctx, js, lease.WithBucket("custom")); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	// The ends of each range are accepted (an existing bucket keeps its
	// settings, so 5 replicas need no cluster here).
	for name, opt := range map[string]lease.Option{
		"history 1":  lease.WithHistory(1),
		"history 64": lease.WithHistory(64),
		"replicas 1": lease.WithReplicas(1),
		"replicas 5": lease.WithReplicas(5),
		"cas 1":      lease.WithCASAttempts(1),
	} {
		if _, err := lease.New(ctx, js, lease.WithBucket("custom"), opt); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// A bucket with a TTL would expire epoch counters.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "withttl", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.New(ctx, js, lease.WithBucket("withttl")); !errors.Is(err, lease.ErrInvalidOption) {
		t.Fatalf("bucket with TTL: err = %v, want ErrInvalidOption", err)
	}
}

func TestAcquireRenewRelease(t *testing.T) {
	ctx := testCtx(t)
	c, clk, srv := startCoordinator(t)
	const ttl = 10 * time.Second
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-1", ttl, lease.WithProducer(7, 3))
	if err != nil {
		t.Fatal(err)
	}
	if l.Epoch() != 1 || l.Owner() != "relay-1" || l.Domain() != domain || l.Dc() != "dc-a" || l.TTL() != ttl {
		t.Fatalf("lease = epoch %d owner %s %s/%s ttl %s", l.Epoch(), l.Owner(), l.Domain(), l.Dc(), l.TTL())
	}
	if !l.ExpiresAt().Equal(clk.Now().Add(ttl)) {
		t.Fatalf("expires %s, want now+ttl", l.ExpiresAt())
	}
	info, err := c.CurrentLease(ctx, domain, "dc-a")
	if err != nil {
		t.Fatal(err)
	}
	if info.Owner != "relay-1" || info.Epoch != 1 || info.Incarnation != 7 || info.LayoutGeneration != 3 || info.Revision != l.Revision() || info.TTL != ttl {
		t.Fatalf("stored lease = %+v", info)
	}

	rev := l.Revision()
	clk.Advance(ttl / 2)
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if l.Revision() <= rev || !l.ExpiresAt().Equal(clk.Now().Add(ttl)) {
		t.Fatalf("renew did not move revision/expiry: rev %d→%d expires %s", rev, l.Revision(), l.ExpiresAt())
	}
	if info, _ := c.CurrentLease(ctx, domain, "dc-a"); !info.ExpiresAt.Equal(l.ExpiresAt()) || info.Epoch != 1 || info.TTL != ttl {
		t.Fatalf("stored expiry %s epoch %d ttl %s, want %s epoch 1 ttl %s", info.ExpiresAt, info.Epoch, info.TTL, l.ExpiresAt(), ttl)
	}
	// Renewals keep the key's history (only an acquisition starts it
	// afresh), so an operator sees them.
	kv, err := srv.JetStream(t).KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := kv.History(ctx, "lease."+domain+".dc-a"); err != nil || len(h) != 2 {
		t.Fatalf("history after a renewal: %d revisions, %v; want 2", len(h), err)
	}
	select {
	case <-l.Done():
		t.Fatal("Done closed while held")
	default:
	}

	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done open after release")
	}
	if l.Held() || l.Lost() || !errors.Is(l.Err(), lease.ErrLeaseReleased) {
		t.Fatalf("after release: lost=%v err=%v", l.Lost(), l.Err())
	}
	if err := l.Renew(ctx); !errors.Is(err, lease.ErrLeaseReleased) {
		t.Fatalf("renew after release: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if _, err := c.CurrentLease(ctx, domain, "dc-a"); !errors.Is(err, lease.ErrNoLease) {
		t.Fatalf("lease after release: %v", err)
	}
	if e, err := c.CurrentEpoch(ctx, domain, "dc-a"); err != nil || e != 1 {
		t.Fatalf("epoch after release = %d, %v; want 1", e, err)
	}

	// Another owner may take it at once after a release, at a higher epoch.
	l2, err := c.Acquire(ctx, domain, "dc-a", "relay-2", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Epoch() != 2 {
		t.Fatalf("epoch after release = %d, want 2", l2.Epoch())
	}
}

func TestSecondOwnerRefusedWhileLive(t *testing.T) {
	ctx := testCtx(t)
	c, clk, _ := startCoordinator(t)
	const ttl = 10 * time.Second
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(ttl - time.Nanosecond) // the last live instant
	_, err = c.Acquire(ctx, domain, "dc-a", "relay-2", ttl)
	e := asError(t, err, lease.ErrLeaseHeld)
	if e.Holder != "relay-1" || e.Epoch != l.Epoch() || !e.ExpiresAt.Equal(l.ExpiresAt()) {
		t.Fatalf("held error = %+v", e)
	}
	if !strings.Contains(err.Error(), "relay-1") {
		t.Fatalf("message does not name the holder: %v", err)
	}
	// The refusal did not burn an epoch.
	if cur, _ := c.CurrentEpoch(ctx, domain, "dc-a"); cur != 1 {
		t.Fatalf("epoch = %d after refusal, want 1", cur)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("holder renew after refusal: %v", err)
	}
	// However far this coordinator's clock runs ahead, the stored record
	// is live until the server expires it.
	clk.Advance(24 * time.Hour)
	if _, err := c.Acquire(ctx, domain, "dc-a", "relay-2", ttl); !errors.Is(err, lease.ErrLeaseHeld) {
		t.Fatalf("standby a day ahead: %v, want ErrLeaseHeld", err)
	}
	// Other pools are independent.
	if _, err := c.Acquire(ctx, domain, "dc-b", "relay-2", ttl); err != nil {
		t.Fatalf("other pool: %v", err)
	}
}

// The holder's clock decides when the holder stops; only the server decides
// when a standby may take over.
func TestTakeoverAfterExpiry(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c, clk, srv := startCoordinator(t)
	standby, sclk := newCoordinator(t, srv.JetStream(t))
	const ttl = time.Second
	old, err := c.Acquire(ctx, domain, "dc-a", "relay-1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(ttl - time.Nanosecond)
	if !old.Held() {
		t.Fatal("Held false before expiry")
	}
	clk.Advance(time.Nanosecond) // the expiry is exclusive
	if old.Held() {
		t.Fatal("Held true at expiry")
	}
	// To the standby's clock the record's expires_at passed an hour ago,
	// but the server still stores it: not the standby's to take.
	sclk.Advance(time.Hour)
	if _, err := standby.Acquire(ctx, domain, "dc-a", "relay-2", ttl); !errors.Is(err, lease.ErrLeaseHeld) {
		t.Fatalf("standby before the server expired the record: %v, want ErrLeaseHeld", err)
	}
	waitNoLease(t, standby, "dc-a", 5*time.Second)
	nl, err := standby.Acquire(ctx, domain, "dc-a", "relay-2", ttl)
	if err != nil {
		t.Fatalf("take-over after expiry: %v", err)
	}
	if nl.Epoch() <= old.Epoch() {
		t.Fatalf("take-over epoch %d not above %d", nl.Epoch(), old.Epoch())
	}
	err = old.Renew(ctx)
	e := asError(t, err, lease.ErrLeaseLost)
	if e.Epoch != old.Epoch() || e.Holder != "relay-1" || !strings.Contains(e.Detail, "expired before renewal") {
		t.Fatalf("lost error = %+v", e)
	}
	select {
	case <-old.Done():
	default:
		t.Fatal("old lease Done still open")
	}
	if !old.Lost() {
		t.Fatal("old lease does not report Lost")
	}
	if err := nl.Renew(ctx); err != nil {
		t.Fatalf("new holder renew: %v", err)
	}
}

// waitNoLease waits until the server has removed the pool's lease record.
func waitNoLease(t *testing.T, c *lease.Coordinator, dc string, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, 5*time.Millisecond, func() error {
		info, err := c.CurrentLease(testCtx(t), domain, dc)
		if errors.Is(err, lease.ErrNoLease) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("record of %s at epoch %d still stored", info.Owner, info.Epoch)
	})
}

// A holder that stops renewing loses its key on the server, however live
// its own clock says it is: its next renewal loses the compare-and-set
// (to the expiry marker, or to a successor), and it stops there.
func TestRenewLosesCASAfterTheServerExpiredTheRecord(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	c1, _ := newCoordinator(t, srv.JetStream(t))
	c2, _ := newCoordinator(t, srv.JetStream(t))
	const ttl = time.Second
	old, err := c1.Acquire(ctx, domain, "dc-a", "relay-1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	oldB, err := c1.Acquire(ctx, domain, "dc-b", "relay-1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	waitNoLease(t, c2, "dc-a", 5*time.Second)
	waitNoLease(t, c2, "dc-b", 5*time.Second)
	if !old.Held() {
		t.Fatal("the holder's clock stood still, yet Held is false") // its clock is its own
	}
	// No successor on dc-b: the renewal meets the marker or nothing.
	if err := oldB.Renew(ctx); !errors.Is(err, lease.ErrLeaseLost) || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("renew after the server expired the record = %v, want ErrLeaseLost and ErrKeyRevisionMismatch", err)
	}
	nl, err := c2.Acquire(ctx, domain, "dc-a", "relay-2", ttl)
	if err != nil {
		t.Fatal(err)
	}
	err = old.Renew(ctx)
	if !errors.Is(err, lease.ErrLeaseLost) || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Fatalf("renew after take-over = %v, want ErrLeaseLost and ErrKeyRevisionMismatch", err)
	}
	if !old.Lost() || nl.Epoch() != old.Epoch()+1 {
		t.Fatalf("lost=%v epochs %d→%d", old.Lost(), old.Epoch(), nl.Epoch())
	}
	// Releasing the lost lease must not delete the new holder's record.
	if err := old.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := c2.CurrentLease(ctx, domain, "dc-a"); err != nil || info.Owner != "relay-2" {
		t.Fatalf("current lease = %+v, %v; want relay-2", info, err)
	}
}

func TestSameOwnerReacquireFencesOldLease(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	first, err := c.Acquire(ctx, domain, "dc-a", "relay-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Acquire(ctx, domain, "dc-a", "relay-1", time.Minute)
	if err != nil {
		t.Fatalf("same owner re-acquire: %v", err)
	}
	if second.Epoch() != first.Epoch()+1 {
		t.Fatalf("re-acquire epoch %d, want %d", second.Epoch(), first.Epoch()+1)
	}
	if err := first.Renew(ctx); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("old incarnation renew = %v, want ErrLeaseLost", err)
	}
	if err := second.Renew(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestEpochsIncreaseAfterLeaseKeyRemoved(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	kv, err := srv.JetStream(t).KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i, round := range []struct {
		ttl    time.Duration
		remove func() error
	}{
		{time.Minute, func() error { return kv.Purge(ctx, "lease."+domain+".dc-a") }},
		{time.Minute, func() error { return kv.Delete(ctx, "lease."+domain+".dc-a") }},
		{time.Minute, func() error {
			// Drop even the markers, as if the key had never existed.
			if err := kv.Purge(ctx, "lease."+domain+".dc-a"); err != nil {
				return err
			}
			return kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1))
		}},
		{time.Second, func() error { waitNoLease(t, c, "dc-a", 5*time.Second); return nil }}, // plain expiry
	} {
		l, err := c.Acquire(ctx, domain, "dc-a", fmt.Sprintf("relay-%d", i), round.ttl)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if l.Epoch() <= last {
			t.Fatalf("round %d: epoch %d not above %d", i, l.Epoch(), last)
		}
		last = l.Epoch()
		if err := round.remove(); err != nil {
			t.Fatalf("round %d remove: %v", i, err)
		}
	}
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-final", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Epoch() != last+1 {
		t.Fatalf("final epoch %d, want %d", l.Epoch(), last+1)
	}
	if cur, _ := c.CurrentEpoch(ctx, domain, "dc-a"); cur != l.Epoch() {
		t.Fatalf("counter %d, lease %d", cur, l.Epoch())
	}
}

func TestEpochsSurviveServerRestart(t *testing.T) {
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	// The coordinator's connection reconnects; retry until it has, each
	// attempt with its own deadline (a request lost with the old connection
	// never gets a reply).
	var l2 *lease.Lease
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var err error
		l2, err = c.Acquire(ctx, domain, "dc-a", "relay-2", time.Minute)
		return err
	})
	if l2.Epoch() <= l.Epoch() {
		t.Fatalf("epoch after restart %d, want > %d", l2.Epoch(), l.Epoch())
	}
}

func TestKeepalive(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	c1, _ := newCoordinator(t, srv.JetStream(t))
	c2, _ := newCoordinator(t, srv.JetStream(t))
	const ttl = 10 * time.Second

	t.Run("renews until fenced", func(t *testing.T) {
		l, err := c1.Acquire(ctx, domain, "dc-a", "relay-1", ttl)
		if err != nil {
			t.Fatal(err)
		}
		res := make(chan error, 1)
		go func() { res <- l.Keepalive(ctx, 2*time.Millisecond) }()
		rev := l.Revision()
		testenv.Eventually(t, 10*time.Second, 2*time.Millisecond, func() error {
			if l.Revision() == rev {
				return errors.New("no renewal yet")
			}
			return nil
		})
		// The same relay re-acquiring from another process: a newer epoch.
		if _, err := c2.Acquire(ctx, domain, "dc-a", "relay-1", ttl); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done not closed after take-over")
		}
		if err := <-res; !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("keepalive returned %v, want ErrLeaseLost", err)
		}
	})

	t.Run("stops on release", func(t *testing.T) {
		l, err := c1.Acquire(ctx, domain, "dc-b", "relay-1", ttl)
		if err != nil {
			t.Fatal(err)
		}
		res := make(chan error, 1)
		go func() { res <- l.Keepalive(ctx, time.Hour) }()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-res; !errors.Is(err, lease.ErrLeaseReleased) {
			t.Fatalf("keepalive returned %v, want ErrLeaseReleased", err)
		}
	})

	t.Run("renews every ttl/3 by default", func(t *testing.T) {
		// The coordinator's clock stands still, so only the real-time
		// ticker decides: a 3 s TTL renews after 1 s, well within 5 s.
		l, err := c1.Acquire(ctx, domain, "dc-d", "relay-1", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		kctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		go func() { res <- l.Keepalive(kctx, 0) }()
		rev := l.Revision()
		testenv.Eventually(t, 5*time.Second, time.Millisecond, func() error {
			if l.Revision() == rev {
				return errors.New("no renewal yet")
			}
			return nil
		})
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Fatalf("keepalive returned %v", err)
		}
	})

	t.Run("stops on context", func(t *testing.T) {
		l, err := c1.Acquire(ctx, domain, "dc-c", "relay-1", ttl)
		if err != nil {
			t.Fatal(err)
		}
		kctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		go func() { res <- l.Keepalive(kctx, time.Hour) }()
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Fatalf("keepalive returned %v, want context.Canceled", err)
		}
		if l.Err() != nil {
			t.Fatalf("lease ended by cancelling keepalive: %v", l.Err())
		}
	})
}

func TestSnapshotRequestCoalescing(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	handled := make(chan uint64, 64)
	lease.SetSnapshotRequestHook(c, func(n uint64) { handled <- n })
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := c.WatchSnapshotRequests(wctx, domain, "dc-a")
	if err != nil {
		t.Fatal(err)
	}
	if cap(ch) != 1 {
		t.Fatalf("signal channel capacity %d, want 1", cap(ch))
	}
	// A request for another pool is not ours.
	if err := c.RequestSnapshot(ctx, domain, "dc-b", "consumer-1"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := c.RequestSnapshot(ctx, domain, "dc-a", fmt.Sprintf("consumer-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	waitHandled := func(want uint64) {
		t.Helper()
		for {
			select {
			case n := <-handled:
				if n == want {
					return
				}
				if n > want {
					t.Fatalf("handled counter %d beyond %d", n, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("watcher did not handle request %d", want)
			}
		}
	}
	waitHandled(10)
	if n := len(ch); n != 1 {
		t.Fatalf("pending signals = %d after 10 requests, want 1", n)
	}
	<-ch
	select {
	case <-ch:
		t.Fatal("second signal for one burst")
	default:
	}

	// A later request signals again.
	if err := c.RequestSnapshot(ctx, domain, "dc-a", "consumer-x"); err != nil {
		t.Fatal(err)
	}
	waitHandled(11)
	select {
	case <-ch:
	default:
		t.Fatal("no signal for a new request")
	}

	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("signal after cancel")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("channel not closed after cancel")
	}
}

func TestLeaseAcrossDomains(t *testing.T) {
	ctx := testCtx(t)
	tp := testenv.StartHubWithLeaves(t, "dc-a")
	// The DC relay uses its local JetStream; the hub reaches the same bucket
	// through the dc-a domain.
	local, clk := newCoordinator(t, tp.Leaf(t, "dc-a").JetStream(t))
	remote := hubCoordinator(t, tp, "dc-a")
	lease.SetClock(remote, clk.Now)
	l, err := local.Acquire(ctx, domain, "dc-a", "relay-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	info, err := remote.CurrentLease(ctx, domain, "dc-a")
	if err != nil || info.Owner != "relay-1" || info.Epoch != l.Epoch() {
		t.Fatalf("hub view = %+v, %v", info, err)
	}
	if _, err := remote.Acquire(ctx, domain, "dc-a", "relay-hub", time.Minute); !errors.Is(err, lease.ErrLeaseHeld) {
		t.Fatalf("hub acquire = %v, want ErrLeaseHeld", err)
	}
	if err := remote.RequestSnapshot(ctx, domain, "dc-a", "hub-consumer"); err != nil {
		t.Fatal(err)
	}
	if lane, err := remote.Register(ctx, domain, "dc-a", testPool(t, "dc-a")); err != nil || lane != 0 {
		t.Fatalf("hub register = %d, %v", lane, err)
	}
	m, err := local.LaneMap(ctx, domain)
	if err != nil || m.Occupied() != 1 {
		t.Fatalf("dc view of lane map = %+v, %v", m, err)
	}
}

// Keepalive rides out renewals that fail for a transient reason: it keeps
// the lease and renews again once the server is back.
func TestKeepaliveRetriesTransientFailures(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	c, _ := newCoordinator(t, srv.JetStream(t))
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- l.Keepalive(kctx, 5*time.Millisecond) }()
	srv.Shutdown()
	select {
	case err := <-res:
		t.Fatalf("keepalive ended on transient failures: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	srv.Restart(t)
	rev := l.Revision()
	testenv.Eventually(t, 20*time.Second, 5*time.Millisecond, func() error {
		if l.Revision() == rev {
			return errors.New("no renewal since the restart")
		}
		return nil
	})
	if l.Err() != nil {
		t.Fatalf("lease ended: %v", l.Err())
	}
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("keepalive returned %v", err)
	}
}
