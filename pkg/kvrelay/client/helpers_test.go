package client_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server/servertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitTotal = 20 * time.Second

// testSpec is §8.2's consumer fixture shape: model llama, block 4.
var testSpec = server.PoolSpec{Model: "llama", Aliases: []string{"chat"}, Namespace: "prod", Component: "backend", Endpoint: "generate", BlockSize: 4,
	Roles: []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_AGGREGATED}}

// testPub is servertest's in-memory lane, with the fixture's generations.
type testPub struct{ *servertest.Pub }

func newTestPub() *testPub { return &testPub{servertest.NewPub()} }

// setGen publishes a new generation of buckets buckets at sequence 0 with
// an empty lane; the previous one's feeds end PUBLICATION_UNAVAILABLE.
func (p *testPub) setGen(t testing.TB, spec server.PoolSpec, incarnation uint64, buckets uint64) server.Generation {
	t.Helper()
	g, err := spec.Generation(7, incarnation, 13, ckf.NewFormatIdentity(42, buckets))
	if err != nil {
		t.Fatal(err)
	}
	p.SetGen(g, buckets)
	return g
}

// serve serves srv (a *server.Server or any registration) on loopback
// until the test ends and returns the address.
func serveReal(t *testing.T, pub server.Publication, mut func(*server.Config)) (string, *server.Server) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.PoolHeartbeat, cfg.CatalogHeartbeat, cfg.ReadinessHeartbeat = 20*time.Millisecond, 20*time.Millisecond, 20*time.Millisecond
	if mut != nil {
		mut(&cfg)
	}
	srv, addr := servertest.Serve(t, pub, cfg)
	return addr, srv
}

// serveFake serves a hand-written KvEventRelayServer.
func serveFake(t *testing.T, impl kvrelayv1.KvEventRelayServer) string {
	t.Helper()
	gs := grpc.NewServer(grpc.MaxSendMsgSize(64 << 20))
	kvrelayv1.RegisterKvEventRelayServer(gs, impl)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// event is one sink call.
type event struct {
	op     string // admit, install, apply, heartbeat, invalidate
	reason client.Reason
	seq    uint64
	key    kvrelay.ProducerKey
}

// recSink mirrors the lane and records every call. It fails the test when
// the Follower breaks the sink contract (an apply on an invalidated lane).
type recSink struct {
	t        *testing.T
	mu       sync.Mutex
	ready    bool
	words    []uint64
	seq      uint64
	key      kvrelay.ProducerKey
	admitErr error
	// admitErrs, while not empty, answer the next Admit calls in order
	// (before admitErr).
	admitErrs []error
	events    []event
	signal    chan struct{}
	busy      bool
}

func newRecSink(t *testing.T) *recSink { return &recSink{t: t, signal: make(chan struct{}, 1)} }

func (s *recSink) enter() {
	s.mu.Lock()
	if s.busy {
		s.t.Errorf("concurrent sink calls")
	}
	s.busy = true
}

func (s *recSink) leave(e event) {
	s.events = append(s.events, e)
	s.busy = false
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

func (s *recSink) Admit(sel client.Selection) error {
	s.enter()
	err := s.admitErr
	if len(s.admitErrs) > 0 {
		err, s.admitErrs = s.admitErrs[0], s.admitErrs[1:]
	}
	s.leave(event{op: "admit", key: sel.Key})
	return err
}

func (s *recSink) Install(snap client.Snapshot) error {
	s.enter()
	s.words, s.seq, s.ready, s.key = snap.Words, snap.Sequence, true, snap.Selection.Key
	s.leave(event{op: "install", seq: snap.Sequence, key: snap.Selection.Key})
	return nil
}

func (s *recSink) Apply(d client.Delta) error {
	s.enter()
	if !s.ready || d.BaseSequence != s.seq {
		s.t.Errorf("apply %d→%d on a lane ready=%t at %d", d.BaseSequence, d.Sequence, s.ready, s.seq)
	}
	if err := d.Images.ApplyTo(s.words); err != nil {
		s.t.Errorf("apply: %v", err)
	}
	s.seq = d.Sequence
	s.leave(event{op: "apply", seq: d.Sequence, key: d.Selection.Key})
	return nil
}

func (s *recSink) Heartbeat(seq uint64) error {
	s.enter()
	if !s.ready || seq != s.seq {
		s.t.Errorf("heartbeat %d on a lane ready=%t at %d", seq, s.ready, s.seq)
	}
	s.leave(event{op: "heartbeat", seq: seq})
	return nil
}

func (s *recSink) Invalidate(r client.Reason, _ string) {
	s.enter()
	s.ready = false
	s.leave(event{op: "invalidate", reason: r})
}

// waitFor waits until cond holds on the sink (under its lock).
func (s *recSink) waitFor(t *testing.T, what string, cond func(s *recSink) bool) {
	t.Helper()
	deadline := time.After(waitTotal)
	for {
		s.mu.Lock()
		ok := cond(s)
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-s.signal:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Fatalf("timed out waiting for %s; events %+v", what, s.events)
		}
	}
}

func (s *recSink) has(op string, reason client.Reason) bool {
	for _, e := range s.events {
		if e.op == op && (reason == "" || e.reason == reason) {
			return true
		}
	}
	return false
}

func (s *recSink) count(op string) int {
	n := 0
	for _, e := range s.events {
		if e.op == op {
			n++
		}
	}
	return n
}

// startFollower runs a follower of addr into sink until the test ends.
func startFollower(t *testing.T, addr string, sink client.LaneSink, mut func(*client.Config)) (*client.Follower, *client.Metrics, func()) {
	t.Helper()
	m, err := client.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := client.Config{Name: "dc-k", Addr: addr, Model: "llama", Sink: sink, Metrics: m,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, FrameTimeout: 5 * time.Second}
	if mut != nil {
		mut(&cfg)
	}
	f, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run: %v", err)
				}
			case <-time.After(waitTotal):
				t.Errorf("follower did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return f, m, stop
}
