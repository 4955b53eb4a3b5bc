package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
)

// §8.2 scenarios 24/25 and §8.1 5 against the real server: nothing before
// the snapshot, then an exact mirror at every delta, heartbeats at the
// installed sequence.
func TestFollowerMirrorsThePoolExactly(t *testing.T) {
	pub := newTestPub()
	g := pub.setGen(t, testSpec, 11, 1024)
	addr, _ := serveReal(t, pub, nil)
	sink := newRecSink(t)
	f, m, _ := startFollower(t, addr, sink, nil)
	sink.waitFor(t, "install", func(s *recSink) bool { return s.ready })
	if sink.key != g.Key || sink.seq != 0 || sink.events[0].op != "admit" {
		t.Fatalf("installed %+v at %d, events %+v", sink.key, sink.seq, sink.events)
	}
	pub.Publish(cbi1.Image{Bucket: 0, Word: 0})
	pub.Publish(cbi1.Image{Bucket: 3, Word: 0x0001ABCD00001234}, cbi1.Image{Bucket: 1000, Word: 42})
	pub.Publish() // an empty delta is legal
	want, seq := pub.Lane()
	sink.waitFor(t, "deltas", func(s *recSink) bool { return s.seq == seq })
	sink.waitFor(t, "heartbeat", func(s *recSink) bool { return s.has("heartbeat", "") })
	sink.mu.Lock()
	if !slices.Equal(sink.words, want) {
		t.Errorf("mirror differs from the lane")
	}
	sink.mu.Unlock()
	if st := f.Status(); st.Phase != client.PhaseInstalled || st.Sequence != seq || st.LastFrame.IsZero() {
		t.Errorf("status %+v", st)
	}
	if n := m.Faults("dc-k", client.ReasonGap); n != 0 {
		t.Errorf("%v gap faults", n)
	}
}

// §8.1 3: a 1 048 576-bucket lane arrives in 2 chunks, then heartbeats.
func TestFollowerAssemblesAChunkedSnapshot(t *testing.T) {
	pub := newTestPub()
	pub.setGen(t, testSpec, 11, 1<<20)
	pub.Publish(cbi1.Image{Bucket: 0, Word: 11}, cbi1.Image{Bucket: 524289, Word: 22}, cbi1.Image{Bucket: 1<<20 - 1, Word: 33})
	addr, _ := serveReal(t, pub, nil)
	sink := newRecSink(t)
	startFollower(t, addr, sink, nil)
	sink.waitFor(t, "install and heartbeat", func(s *recSink) bool { return s.ready && s.has("heartbeat", "") })
	want, _ := pub.Lane()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.seq != 1 || !slices.Equal(sink.words, want) {
		t.Fatalf("installed at %d, equal %t", sink.seq, slices.Equal(sink.words, want))
	}
}

// §8.1 6 and §8.2 24 (a second session fences the first): a replacement
// generation invalidates the lane first, then installs B from sequence 0.
func TestFollowerFollowsAReplacementGeneration(t *testing.T) {
	pub := newTestPub()
	a := pub.setGen(t, testSpec, 11, 1024)
	addr, _ := serveReal(t, pub, nil)
	sink := newRecSink(t)
	startFollower(t, addr, sink, nil)
	sink.waitFor(t, "A installed", func(s *recSink) bool { return s.ready && s.key == a.Key })
	pub.Publish(cbi1.Image{Bucket: 5, Word: 5})
	sink.waitFor(t, "A delta", func(s *recSink) bool { return s.seq == 1 })
	b := pub.setGen(t, testSpec, 12, 1024)
	sink.waitFor(t, "B installed", func(s *recSink) bool { return s.ready && s.key == b.Key })
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.seq != 0 || slices.ContainsFunc(sink.words, func(w uint64) bool { return w != 0 }) {
		t.Fatalf("B at %d not empty", sink.seq)
	}
	// Between A's last frame and B's install the lane was invalidated.
	lastA, firstB := -1, -1
	for i, e := range sink.events {
		if e.key == a.Key && e.op != "admit" {
			lastA = i
		}
		if e.key == b.Key && e.op == "install" && firstB < 0 {
			firstB = i
		}
	}
	if !slices.ContainsFunc(sink.events[lastA+1:firstB], func(e event) bool { return e.op == "invalidate" }) {
		t.Fatalf("no invalidation between A and B: %+v", sink.events)
	}
}

// §8.1 7: with a pool stream limit of 1 held by someone else, the follower
// is refused RESOURCE_LIMIT, invalidates, backs off and gets the snapshot
// once the slot is free.
func TestFollowerRetriesAResourceLimit(t *testing.T) {
	pub := newTestPub()
	g := pub.setGen(t, testSpec, 11, 1024)
	addr, _ := serveReal(t, pub, func(c *server.Config) { c.MaxPoolStreams = 1 })
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	hog, err := kvrelayv1.NewKvEventRelayClient(conn).SubscribeKvPool(ctx, &kvrelayv1.SubscribeKvPoolRequest{
		SubscriberId: "hog", ExpectedProducer: g.Descriptor.Producer, ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hog.Recv(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var waits []time.Duration
	sink := newRecSink(t)
	startFollower(t, addr, sink, func(c *client.Config) {
		c.After = func(d time.Duration) <-chan time.Time {
			mu.Lock()
			waits = append(waits, d)
			mu.Unlock()
			return time.After(time.Millisecond)
		}
	})
	sink.waitFor(t, "refused", func(s *recSink) bool { return s.has("invalidate", client.ReasonResourceLimit) })
	if sink.ready {
		t.Fatal("ready while refused")
	}
	cancel() // free the slot
	sink.waitFor(t, "installed after the slot freed", func(s *recSink) bool { return s.ready })
	mu.Lock()
	defer mu.Unlock()
	if len(waits) == 0 {
		t.Fatal("no backoff")
	}
}

// The resubscribe schedule is §4.4's: 500 ms doubling to 30 s, equal
// jitter (here the jitter's top, so the waits are exact).
func TestFollowerBacksOffFrom500msTo30s(t *testing.T) {
	waits := make(chan time.Duration, 64)
	sink := newRecSink(t)
	_, _, stop := startFollower(t, "127.0.0.1:1", sink, func(c *client.Config) {
		c.BackoffMin, c.BackoffMax = 0, 0 // the defaults
		c.Rand = func(n int64) int64 { return n - 1 }
		c.After = func(d time.Duration) <-chan time.Time {
			waits <- d
			ch := make(chan time.Time, 1)
			ch <- time.Time{}
			return ch
		}
	})
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		select {
		case d := <-waits:
			if d != w {
				t.Fatalf("wait %d: %s, want %s", i, d, w)
			}
		case <-time.After(waitTotal):
			t.Fatal("no wait")
		}
	}
	stop()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if !sink.has("invalidate", client.ReasonUnavailable) || sink.has("install", "") {
		t.Fatalf("events %+v", sink.events)
	}
}

// Selection: the model must be registered (canonical id or alias) by the
// sole descriptor of an accepted role; the sink may refuse it.
func TestFollowerSelection(t *testing.T) {
	legacy := testSpec
	legacy.Roles = nil
	for _, tc := range []struct {
		name   string
		spec   server.PoolSpec
		model  string
		legacy bool
		refuse error
		want   client.Reason // "" : installs
	}{
		{name: "alias", spec: testSpec, model: "chat"},
		{name: "other model", spec: testSpec, model: "mistral", want: client.ReasonNoDescriptor},
		{name: "legacy refused by default", spec: legacy, model: "llama", want: client.ReasonNoDescriptor},
		{name: "legacy accepted", spec: legacy, model: "llama", legacy: true},
		{name: "sink refuses", spec: testSpec, model: "llama", refuse: fmt.Errorf("format: %w", client.ErrIncompatible), want: client.ReasonRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := newTestPub()
			pub.setGen(t, tc.spec, 11, 1024)
			addr, _ := serveReal(t, pub, nil)
			sink := newRecSink(t)
			sink.admitErr = tc.refuse
			f, m, _ := startFollower(t, addr, sink, func(c *client.Config) { c.Model, c.AcceptLegacy = tc.model, tc.legacy })
			if tc.want == "" {
				sink.waitFor(t, "install", func(s *recSink) bool { return s.ready })
				return
			}
			sink.waitFor(t, string(tc.want), func(s *recSink) bool { return s.has("invalidate", tc.want) })
			time.Sleep(100 * time.Millisecond) // catalog heartbeats (20 ms) must not recount it
			if n := m.Faults("dc-k", tc.want); n != 1 || sink.has("install", "") {
				t.Fatalf("%v faults, events %+v", n, sink.events)
			}
			if st := f.Status(); st.Phase != client.PhaseRefused || st.LastFault == "" {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// §4.4: a pool absent from the catalog drops the replica; when it comes
// back under a new producer it is followed again.
func TestFollowerDropsAWithdrawnPool(t *testing.T) {
	pub := newTestPub()
	pub.setGen(t, testSpec, 11, 1024)
	addr, _ := serveReal(t, pub, nil)
	sink := newRecSink(t)
	_, m, _ := startFollower(t, addr, sink, nil)
	sink.waitFor(t, "installed", func(s *recSink) bool { return s.ready })
	pub.Withdraw()
	sink.waitFor(t, "withdrawn", func(s *recSink) bool { return !s.ready && s.has("invalidate", client.ReasonWithdrawn) })
	b := pub.setGen(t, testSpec, 12, 1024)
	sink.waitFor(t, "back", func(s *recSink) bool { return s.ready && s.key == b.Key })
	if m.Faults("dc-k", client.ReasonWithdrawn) != 1 {
		t.Fatalf("withdrawals %v", m.Faults("dc-k", client.ReasonWithdrawn))
	}
}

// An Admit error that does not wrap ErrIncompatible is passing: the
// Follower counts it, invalidates, and asks again after backoff until the
// sink admits the pool, which is then followed. The backoff waits go
// through Config.After, which fires at once here.
func TestFollowerRetriesAPassingAdmitFailure(t *testing.T) {
	pub := newTestPub()
	g := pub.setGen(t, testSpec, 11, 1024)
	addr, _ := serveReal(t, pub, nil)
	sink := newRecSink(t)
	passing := errors.New("ingestion pool rebuilding")
	sink.admitErrs = []error{passing, passing, passing}
	var mu sync.Mutex
	var waits []time.Duration
	_, m, _ := startFollower(t, addr, sink, func(c *client.Config) {
		c.After = func(d time.Duration) <-chan time.Time {
			mu.Lock()
			waits = append(waits, d)
			mu.Unlock()
			ch := make(chan time.Time, 1)
			ch <- time.Time{}
			return ch
		}
	})
	sink.waitFor(t, "install after three failed admissions", func(s *recSink) bool { return s.ready && s.key == g.Key })
	sink.mu.Lock()
	admits, events := sink.count("admit"), slices.Clone(sink.events)
	sink.mu.Unlock()
	if admits != 4 || m.Faults("dc-k", client.ReasonAdmitFailed) != 3 || m.Faults("dc-k", client.ReasonRefused) != 0 {
		t.Fatalf("%d admits, %v admit_failed, %v refused; events %+v", admits, m.Faults("dc-k", client.ReasonAdmitFailed),
			m.Faults("dc-k", client.ReasonRefused), events)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) < 3 {
		t.Fatalf("waits %v: each failed admission backs off", waits)
	}
}

// A RetryHint in a passing Admit error retries as soon as it is ready,
// without waiting for the backoff (which never ends here).
func TestFollowerRetriesAdmitWhenTheSinksHintIsReady(t *testing.T) {
	pub := newTestPub()
	pub.setGen(t, testSpec, 11, 1024)
	addr, _ := serveReal(t, pub, nil)
	sink := newRecSink(t)
	ready := make(chan struct{})
	sink.admitErrs = []error{fmt.Errorf("admit: %w", &client.RetryHint{Ready: ready, Err: errors.New("worker down")})}
	_, m, _ := startFollower(t, addr, sink, func(c *client.Config) {
		c.After = func(time.Duration) <-chan time.Time { return make(chan time.Time) }
	})
	sink.waitFor(t, "a failed admission", func(s *recSink) bool { return s.has("invalidate", client.ReasonAdmitFailed) })
	sink.mu.Lock()
	installed := sink.has("install", "")
	sink.mu.Unlock()
	if installed {
		t.Fatal("installed before the hint was ready")
	}
	close(ready)
	sink.waitFor(t, "install once the hint is ready", func(s *recSink) bool { return s.ready })
	if n := m.Faults("dc-k", client.ReasonAdmitFailed); n != 1 {
		t.Fatalf("%v admit_failed, want 1", n)
	}
}
