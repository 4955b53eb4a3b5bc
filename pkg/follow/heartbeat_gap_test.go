package follow

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// dropAfter deletes every lane message the relay published after stream
// sequence from, as DiscardOld retention (or a purge) does to an indexer
// that lagged or was cut off.
func (r *fakeRelay) dropAfter(t *testing.T, from uint64) {
	t.Helper()
	for seq := from + 1; seq <= r.lastLaneSeq; seq++ {
		if err := r.res.Lanes.DeleteMsg(testCtx(t), seq); err != nil {
			t.Fatalf("delete stream sequence %d: %v", seq, err)
		}
	}
	r.lastLaneSeq = from // the lane fence sees the last message left
}

// holdsGapScenario leaves the relay at lane sequence 1 holding locals to
// depth 4, with its only marker at sequence 0 and the delta and drain
// marker between them gone from the stream.
func holdsGapScenario(t *testing.T, r *fakeRelay) []ckf.LocalBlockHash {
	t.Helper()
	locals := chain(7, 4)
	markerAt := r.lastLaneSeq
	r.apply(storeChain(1, locals, 0, 4))
	r.drain()
	r.dropAfter(t, markerAt)
	if r.pub.LastSequence() != 1 || r.exactDepth(locals) != 4 {
		t.Fatalf("relay at sequence %d holding depth %d, want 1 and 4", r.pub.LastSequence(), r.exactDepth(locals))
	}
	return locals
}

// A heartbeat of the installed epoch at a sequence the lane never reached
// means the deltas between were lost: the lane must not answer, ready and
// fresh, from the older state. It leaves the ready set, counts the gap,
// asks for a snapshot and waits for one; the relay's next barrier brings
// it back with the whole chain.
func TestAHeartbeatAheadOfTheLaneTakesItOutUntilASnapshot(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	locals := holdsGapScenario(t, r)
	r.injectHeartbeat(r.epoch(), r.instance) // the idle relay says: sequence 1
	s := startService(t, e.nc, e.js, testConfig(t))
	lane := itoa(r.lane)

	waitAwaiting(t, s, r.lane)
	if got := metricCount(s.reg, MetricFaults, lane, "kind", faultHeartbeatGap); got != 1 {
		t.Fatalf("%d %s faults, want 1", got, faultHeartbeatGap)
	}
	installs := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed")

	// More heartbeats at the same sequence: still out, not bootstrapping
	// the same marker again, and never answering depth 0 as fresh.
	for range 3 {
		r.injectHeartbeat(r.epoch(), r.instance)
	}
	testenv.WaitFor(t, waitTotal, "the extra heartbeats consumed", func() bool {
		st, err := statusOf(s.Service, r.lane)
		return err == nil && st.StreamLag == 0
	})
	if resp, err := s.Match(api.Query{Locals: locals}); err == nil {
		if d, ok := laneDepth(resp, r.lane); ok {
			t.Fatalf("lane behind its relay answered %+v", d)
		}
	}
	if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed"); got != installs {
		t.Fatalf("%d installs while waiting for a snapshot, want %d", got, installs)
	}
	if got := metricCount(s.reg, MetricFaults, lane, "kind", faultHeartbeatGap); got != 1 {
		t.Fatalf("%d %s faults after repeated heartbeats, want 1 (one gap)", got, faultHeartbeatGap)
	}

	r.snapshot() // the relay answers the request: a barrier at sequence 1
	waitInstalled(t, s.Service, r.lane, r.epoch(), 1)
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		resp, err := s.Match(api.Query{Locals: locals})
		if err != nil {
			return err
		}
		if d, ok := laneDepth(resp, r.lane); !ok || d.Depth != 4 {
			return fmt.Errorf("lane answered %+v (present %t), want depth 4", d, ok)
		}
		return nil
	})
	r.injectHeartbeat(r.epoch(), r.instance) // now at the lane's sequence
	r.apply(storeChain(1, chain(8, 2), 0, 2))
	r.drain()
	waitInstalled(t, s.Service, r.lane, r.epoch(), 2)
	requireServing(t, s.Service, r.lane, r.epoch())
	if got := metricCount(s.reg, MetricFaults, lane, "kind", faultHeartbeatGap); got != 1 {
		t.Fatalf("%d %s faults after the snapshot, want 1", got, faultHeartbeatGap)
	}
}

// A lane that lost deltas while a newer marker of its epoch already
// follows its installed one on the stream (an active lane skips forward
// snapshots) bootstraps from that marker as soon as a heartbeat shows the
// gap, without waiting for a request to be answered.
func TestAHeartbeatGapBootstrapsFromANewerMarkerOnTheLane(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(61, 4, 5)
	entered, hold := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	var once sync.Once
	s := startService(t, e.nc, e.js, testConfig(t), func(s *Service) {
		real := s.readObject
		s.readObject = func(ctx context.Context, store jetstream.ObjectStore, mk *wire.SnapshotMarker, f ckf.FormatIdentity) ([]uint64, error) {
			once.Do(func() { close(entered); <-hold }) // the first bootstrap reads marker 0 late
			return real(ctx, store, mk, f)
		}
	})
	t.Cleanup(release) // before the service stops, should the test fail early
	<-entered
	// While the lane fetches marker 0's body: deltas and a drain marker
	// that retention drops, a forward snapshot and a heartbeat.
	markerAt := r.lastLaneSeq
	feed(r, w, func(int) int { return 5 })
	r.dropAfter(t, markerAt)
	r.snapshot()
	r.injectHeartbeat(r.epoch(), r.instance)
	release()

	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	requireServing(t, s.Service, r.lane, r.epoch())
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
	lane := itoa(r.lane)
	if got := metricCount(s.reg, MetricFaults, lane, "kind", faultHeartbeatGap); got != 1 {
		t.Fatalf("%d %s faults, want 1", got, faultHeartbeatGap)
	}
	if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed"); got != 2 {
		t.Fatalf("%d installs, want 2 (marker 0, then the forward marker)", got)
	}
}

// A genuinely idle lane: every heartbeat says the sequence the lane
// reached, so it stays ready and fresh, with no fault, no snapshot request
// and no second install, over many heartbeats.
func TestAnIdleLaneWhoseHeartbeatsMatchStaysReadyAndFresh(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(62, 4, 6)
	feed(r, w, func(i int) int { return 3 + i%4 })
	clock := &skewedClock{}
	cfg := testConfig(t)
	cfg.LaneStaleAfter = 5 * cfg.StatePollInterval * 100 // far above any scheduling delay
	s := startService(t, e.nc, e.js, cfg, func(s *Service) { s.now = clock.now })
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	lane := itoa(r.lane)
	installs := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed")

	for range 20 {
		r.injectHeartbeat(r.epoch(), r.instance)
	}
	testenv.WaitFor(t, waitTotal, "the heartbeats consumed", func() bool {
		st, err := statusOf(s.Service, r.lane)
		return err == nil && st.StreamLag == 0
	})
	// The indexer's clock moves on by most of the staleness bound: the
	// last heartbeat keeps the lane fresh.
	clock.advance(cfg.LaneStaleAfter / 2)
	r.injectHeartbeat(r.epoch(), r.instance)
	clock.advance(-cfg.LaneStaleAfter / 2)
	testenv.WaitFor(t, waitTotal, "the last heartbeat consumed", func() bool {
		st, err := statusOf(s.Service, r.lane)
		return err == nil && st.StreamLag == 0
	})
	requireServing(t, s.Service, r.lane, r.epoch())
	st, _ := statusOf(s.Service, r.lane)
	if st.Stale || st.InstalledSequence != r.pub.LastSequence() {
		t.Fatalf("idle lane %+v, want fresh at sequence %d", st, r.pub.LastSequence())
	}
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
	if got := metricCount(s.reg, MetricFaults, lane); got != 0 {
		t.Fatalf("%d faults on an idle lane", got)
	}
	if got := metricCount(s.reg, MetricSnapshotRequests, lane); got != 0 {
		t.Fatalf("%d snapshot requests on an idle lane", got)
	}
	if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed"); got != installs {
		t.Fatalf("%d installs, want %d", got, installs)
	}
}
