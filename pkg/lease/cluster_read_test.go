package lease_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// cluster is three embedded JetStream servers in one cluster. a and b
// route to each other directly; c reaches each of them through its own
// Link, so cutting c's links isolates c (a follower that keeps its store,
// and keeps answering direct gets from it, while a and b go on).
type cluster struct {
	a, b, c *server.Server
	links   [2]*testenv.Link // c→a, c→b
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	port := func() int { return testenv.FreePort(t) }
	pa, pb, pc := port(), port(), port()
	// Gossiped route URLs must lead nowhere, or a and b would reach c
	// directly, around the links: every server advertises a closed port.
	dead := fmt.Sprintf("127.0.0.1:%d", port())
	start := func(name string, clusterPort int, routes ...string) *server.Server {
		return testenv.StartCustomServer(t, name, func(opts *server.Options) {
			opts.Cluster = server.ClusterOpts{Name: "ckf", Host: "127.0.0.1", Port: clusterPort, Advertise: dead, PoolSize: -1}
			for _, r := range routes {
				opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats", Host: r})
			}
		})
	}
	cl := &cluster{}
	cl.a = start("a", pa, fmt.Sprintf("127.0.0.1:%d", pb))
	cl.b = start("b", pb, fmt.Sprintf("127.0.0.1:%d", pa))
	cl.links[0] = testenv.NewLink(t, fmt.Sprintf("127.0.0.1:%d", pa))
	cl.links[1] = testenv.NewLink(t, fmt.Sprintf("127.0.0.1:%d", pb))
	cl.c = start("c", pc, cl.links[0].Addr(), cl.links[1].Addr())
	cl.waitRoutes(t, 2, 2, 2)
	return cl
}

// waitRoutes waits until a, b and c count na, nb and nc route connections.
func (cl *cluster) waitRoutes(t *testing.T, na, nb, nc int) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if a, b, c := cl.a.NumRoutes(), cl.b.NumRoutes(), cl.c.NumRoutes(); a != na || b != nb || c != nc {
			return fmt.Errorf("routes a=%d b=%d c=%d, want %d %d %d", a, b, c, na, nb, nc)
		}
		return nil
	})
}

func connectJS(t *testing.T, s *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// A relay connected to a follower cut off from the cluster must not have
// its lease confirmed, nor read an old epoch counter, from that follower's
// store after the lease moved on the majority side: Verify, CurrentEpoch
// and CurrentLease read from the stream leader. (Direct gets, which any
// replica answers, said "still yours" here.)
func TestFencingReadsAreNotAnsweredByACutOffFollower(t *testing.T) {
	cl := startCluster(t)
	ctx := testCtx(t)
	ncA, jsA := connectJS(t, cl.a)
	_, jsC := connectJS(t, cl.c)

	var coordA *lease.Coordinator
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		// The meta group may still be electing its leader, and requests
		// get no answer until it has: each attempt has its own deadline.
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var err error
		coordA, err = lease.New(actx, jsA, lease.WithReplicas(3), lease.WithMemoryStorage())
		return err
	})
	clockA := newFakeClock()
	lease.SetClock(coordA, clockA.Now)
	coordC, err := lease.New(ctx, jsC)
	if err != nil {
		t.Fatal(err)
	}
	clockC := newFakeClock()
	lease.SetClock(coordC, clockC.Now)

	stream := "KV_" + lease.DefaultBucket
	// c must be a follower: a stream leader cut off keeps answering until
	// it steps down, which no read path can help.
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		st, err := jsA.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if l := info.Cluster.Leader; l == "" || l == "c" {
			if l == "c" {
				_, _ = ncA.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, time.Second)
			}
			return fmt.Errorf("stream leader %q, want a or b", l)
		}
		return nil
	})

	held, err := coordC.Acquire(ctx, domain, "dc-a", "relay-1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	stC, err := jsC.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	subject := "$KV." + lease.DefaultBucket + ".lease." + domain + ".dc-a"
	// c's replica has the record and c answers direct gets itself (a
	// follower subscribes once it is current, within a few seconds).
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if _, err := stC.GetLastMsgForSubject(ctx, subject); err != nil {
			return err
		}
		return localDirectGet(cl.c, "$JS.API.DIRECT.GET."+stream+"."+subject)
	})

	for _, l := range cl.links {
		l.Cut()
	}
	cl.waitRoutes(t, 1, 1, 0)
	// The lease moves on the majority side: its record is removed there
	// (as a release that c never replicates), and relay-2 takes the next
	// epoch. The TTL is an hour, so c's copy stays as it was.
	kvA, err := jsA.KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kvA.Delete(ctx, "lease."+domain+".dc-a"); err != nil {
		t.Fatal(err)
	}
	moved, err := coordA.Acquire(ctx, domain, "dc-a", "relay-2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// The premise: c answers direct gets from its store, one epoch behind.
	if m, err := stC.GetLastMsgForSubject(ctx, subject); err != nil {
		t.Fatalf("c stopped answering direct gets (%v): the test shows nothing", err)
	} else if want := fmt.Sprintf(`"epoch":%d`, held.Epoch()); !strings.Contains(string(m.Data), want) {
		t.Fatalf("c's direct get %s, want the stale record (%s)", m.Data, want)
	}

	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		t.Cleanup(cancel)
		return c
	}
	if err := held.Verify(short()); err == nil {
		t.Fatalf("Verify through the cut-off follower confirmed epoch %d; the lease is at epoch %d", held.Epoch(), moved.Epoch())
	}
	if e, err := coordC.CurrentEpoch(short(), domain, "dc-a"); err == nil && e != moved.Epoch() {
		t.Fatalf("CurrentEpoch through the cut-off follower = %d, the counter is at %d", e, moved.Epoch())
	}
	if li, err := coordC.CurrentLease(short(), domain, "dc-a"); err == nil && li.Epoch != moved.Epoch() {
		t.Fatalf("CurrentLease through the cut-off follower = epoch %d, the lease is at %d", li.Epoch, moved.Epoch())
	}

	// Healed, the same reads reach the leader and tell the truth (once the
	// cluster has settled: it may answer "temporarily unavailable" first).
	for _, l := range cl.links {
		l.Heal()
	}
	cl.waitRoutes(t, 2, 2, 2)
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if e, err := coordC.CurrentEpoch(short(), domain, "dc-a"); err != nil || e != moved.Epoch() {
			return fmt.Errorf("CurrentEpoch after the heal = %d, %v; want %d", e, err, moved.Epoch())
		}
		if err := held.Verify(short()); !errors.Is(err, lease.ErrLeaseLost) {
			return fmt.Errorf("Verify after the heal = %v, want ErrLeaseLost", err)
		}
		return nil
	})
}

// localDirectGet reports (as an error) whether s lacks a subscriber of its
// own (not one reached over a route) for the direct get subject.
func localDirectGet(s *server.Server, subject string) error {
	sz, err := s.Subsz(&server.SubszOptions{Subscriptions: true, Test: subject})
	if err != nil {
		return err
	}
	rz, err := s.Routez(nil)
	if err != nil {
		return err
	}
	routes := map[uint64]bool{}
	for _, r := range rz.Routes {
		routes[r.Rid] = true
	}
	for _, sub := range sz.Subs {
		// The JetStream API's own $JS.API.> handlers match too.
		if strings.HasPrefix(sub.Subject, "$JS.API.DIRECT.GET.") && !routes[sub.Cid] {
			return nil
		}
	}
	return fmt.Errorf("%s has no direct get subscriber of its own for %s (subscribers %+v, routes %v)", s.Name(), subject, sz.Subs, routes)
}

// The fencing reads go to the stream API's leader-answered message get,
// never to a direct get, and under the API prefix of the JetStream domain
// js is bound to: a relay on a leaf reads the hub's bucket (with the
// leaf's own prefix it would ask the leaf's JetStream, which has no such
// stream). A missing key is still a missing key.
func TestFencingReadsUseTheLeaderGetUnderTheDomainPrefix(t *testing.T) {
	tp := testenv.StartHubWithLeaves(t, "dc-a")
	ctx := testCtx(t)
	// The bucket lives on the hub.
	if _, err := lease.New(ctx, tp.Hub().JetStream(t), lease.WithMemoryStorage()); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.NewWithDomain(tp.Leaf(t, "dc-a").Connect(t), testenv.HubDomain)
	if err != nil {
		t.Fatal(err)
	}
	c, err := lease.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CurrentLease(ctx, domain, "dc-a"); !errors.Is(err, lease.ErrNoLease) {
		t.Fatalf("CurrentLease of a pool never leased = %v, want ErrNoLease", err)
	}
	held, err := c.Acquire(ctx, domain, "dc-a", "relay-1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	spy := tp.Hub().Connect(t) // sees the requests as the hub maps them
	sub, err := spy.SubscribeSync("$JS.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if e, err := c.CurrentEpoch(ctx, domain, "dc-a"); err != nil || e != held.Epoch() {
		t.Fatalf("CurrentEpoch = %d, %v; want %d", e, err, held.Epoch())
	}
	if li, err := c.CurrentLease(ctx, domain, "dc-a"); err != nil || li.Epoch != held.Epoch() || li.Owner != "relay-1" {
		t.Fatalf("CurrentLease = %+v, %v", li, err)
	}
	if err := held.Verify(ctx); err != nil {
		t.Fatalf("Verify = %v", err)
	}
	var gets int
	for {
		m, err := sub.NextMsg(200 * time.Millisecond)
		if errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.Contains(m.Subject, ".DIRECT.GET."):
			t.Errorf("fencing read sent as a direct get: %s", m.Subject)
		case strings.HasSuffix(m.Subject, ".API.STREAM.MSG.GET.KV_"+lease.DefaultBucket):
			gets++
		}
	}
	if gets != 3 {
		t.Fatalf("%d leader-answered gets, want 3 (CurrentEpoch, CurrentLease, Verify)", gets)
	}
}
