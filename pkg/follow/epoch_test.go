package follow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// Tests of how a lane judges traffic of an epoch newer than its installed
// one (issue 19): against the lease a relay actually took, and without
// bootstrapping from the same marker over and over.

// identityAt is the producer identity a relay of epoch would publish under.
func (r *fakeRelay) identityAt(epoch uint64) ckf.ProducerIdentity {
	return ckf.ProducerIdentity{Pool: r.pool, ProducerIncarnation: epoch, LayoutGeneration: 1, Format: r.state.Format()}
}

// injectHeartbeat publishes one heartbeat claiming epoch, unfenced.
func (r *fakeRelay) injectHeartbeat(epoch uint64, instance string) {
	r.t.Helper()
	hb := wire.Heartbeat{Identity: r.identityAt(epoch), Lease: wire.WireLease{Epoch: epoch, Instance: instance},
		Sequence: r.pub.LastSequence(), RelayInstance: instance, Time: time.Now()}
	b, err := wire.AppendHeartbeat(nil, &hb)
	if err != nil {
		r.t.Fatal(err)
	}
	r.inject(r.subj.Heartbeat, b)
}

// injectJunk publishes a heartbeat, a delta (a copy of the last genuine
// one) and a drain marker claiming epoch, none of them fenced.
func (r *fakeRelay) injectJunk(epoch uint64) {
	r.t.Helper()
	r.injectHeartbeat(epoch, "junk")
	d := r.lastDelta
	d.Identity, d.Lease = r.identityAt(epoch), wire.WireLease{Epoch: epoch, Instance: "junk"}
	b, err := wire.AppendDelta(nil, &d)
	if err != nil {
		r.t.Fatal(err)
	}
	r.inject(r.subj.Delta, b)
	dm := wire.DrainMarker{Identity: d.Identity, Lease: d.Lease, ExpectedSequence: d.Sequence}
	if b, err = wire.AppendDrainMarker(nil, &dm); err != nil {
		r.t.Fatal(err)
	}
	r.inject(r.subj.Drain, b)
}

// setEpochCounter writes the pool's epoch counter behind the coordinator's
// back, leaving the lease record as it is.
func (r *fakeRelay) setEpochCounter(epoch uint64) {
	r.t.Helper()
	ctx := testCtx(r.t)
	kv, err := r.js.KeyValue(ctx, r.coord.Bucket())
	if err != nil {
		r.t.Fatal(err)
	}
	b, err := json.Marshal(map[string]uint64{"epoch": epoch})
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := kv.Put(ctx, fmt.Sprintf("epoch.%s.%s", r.domain, r.dc), b); err != nil {
		r.t.Fatal(err)
	}
}

// requireServing fails unless lane is active, ready and at epoch.
func requireServing(t *testing.T, s *Service, lane int, epoch uint64) {
	t.Helper()
	st, err := statusOf(s, lane)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != PhaseActive || st.Epoch != epoch || !isReady(s, lane) {
		t.Fatalf("lane %+v ready=%t, want active and ready at epoch %d", st, isReady(s, lane), epoch)
	}
}

// A lost acquire race leaves the epoch counter at E+1 while the lease
// record (and the relay) stay at E. A heartbeat, a delta and a drain
// marker claiming E+1 are refused as ungranted: the lane neither
// bootstraps nor leaves the ready set, and applies its relay's next
// traffic. Before the fix one such heartbeat kept the lane bootstrapping
// from E's marker hundreds of times a second, stuck behind its relay.
func TestTrafficAtABurntEpochIsNotATakeover(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(41, 8, 6)
	feed(r, w, func(i int) int { return 2 + i%4 })
	s := startService(t, e.nc, e.js, testConfig(t))
	cur := r.epoch()
	waitInstalled(t, s.Service, r.lane, cur, r.pub.LastSequence())

	r.setEpochCounter(cur + 1)
	if li, err := r.coord.CurrentLease(testCtx(t), r.domain, r.dc); err != nil || li.Epoch != cur {
		t.Fatalf("lease record %+v, %v: want epoch %d", li, err, cur)
	}
	lane := strconv.Itoa(r.lane)
	r.injectJunk(cur + 1)
	feed(r, w, func(i int) int { return 6 })
	waitInstalled(t, s.Service, r.lane, cur, r.pub.LastSequence())
	for _, k := range []wire.MessageKind{wire.KindHeartbeat, wire.KindDelta, wire.KindDrainMarker} {
		if got := metricCount(s.reg, MetricUngrantedEpoch, lane, "kind", k.String()); got != 1 {
			t.Errorf("ungranted %s = %d, want 1", k, got)
		}
	}
	requireServing(t, s.Service, r.lane, cur)
	if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed"); got != 1 {
		t.Fatalf("%d installs: the burnt epoch moved the lane", got)
	}
	if got := metricCount(s.reg, MetricFaults, lane, "kind", faultNewerEpoch); got != 0 {
		t.Fatalf("%d newer_epoch faults for a burnt epoch", got)
	}
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
}

// Standbys race for the expired lease through pkg/lease against the real
// KV until one race leaves a burnt epoch above the winner's (the loser
// bumped the counter, then lost the lease write). The winner takes the
// lane over with its barrier snapshot; a junk heartbeat at the burnt epoch
// then changes nothing.
func TestAJunkHeartbeatAfterALostAcquireRaceChangesNothing(t *testing.T) {
	const ttl = 300 * time.Millisecond
	e := newEnv(t)
	r := newFakeRelay(t, e.js, testDomain, "dc-a", testBlocks)
	r.register()
	ctx := testCtx(t)
	held, err := r.coord.Acquire(ctx, r.domain, r.dc, r.instance, ttl)
	if err != nil {
		t.Fatal(err)
	}
	r.adopt(held)
	w := newWorkload(42, 8, 6)
	feed(r, w, func(i int) int { return 3 })
	s := startService(t, e.nc, e.js, testConfig(t))
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())

	const standbys = 4
	coords := make([]*lease.Coordinator, standbys)
	for i := range coords {
		// Each standby is its own process: own connection, own coordinator.
		c, err := lease.New(ctx, e.srv.JetStream(t), lease.WithMemoryStorage())
		if err != nil {
			t.Fatal(err)
		}
		coords[i] = c
	}
	var burnt uint64
	for round := 0; burnt == 0; round++ {
		if round == 30 {
			t.Fatal("30 acquire races left no burnt epoch above the winner's")
		}
		time.Sleep(time.Until(held.ExpiresAt()) + 20*time.Millisecond)
		// The server expires the record a little after the holder's own
		// expiry (liveness is the server's TTL): race again until it has.
		var winners []*lease.Lease
		for try := 0; len(winners) == 0; try++ {
			if try == 200 {
				t.Fatalf("round %d: the expired lease was never taken", round)
			}
			start := make(chan struct{})
			won := make([]*lease.Lease, standbys)
			errs := make([]error, standbys)
			var wg sync.WaitGroup
			for i, c := range coords {
				wg.Go(func() {
					<-start
					won[i], errs[i] = c.Acquire(ctx, r.domain, r.dc, fmt.Sprintf("standby-%d-%d", round, i), ttl)
				})
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				switch {
				case err == nil:
					winners = append(winners, won[i])
				case !errors.Is(err, lease.ErrLeaseHeld) && !errors.Is(err, lease.ErrContention):
					t.Fatalf("standby %d: %v", i, err)
				}
			}
			if len(winners) == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d standbys hold the lease", round, len(winners))
		}
		held = winners[0]
		counter, err := r.coord.CurrentEpoch(ctx, r.domain, r.dc)
		if err != nil {
			t.Fatal(err)
		}
		if li, err := r.coord.CurrentLease(ctx, r.domain, r.dc); err != nil || li.Epoch != held.Epoch() {
			t.Fatalf("lease record %+v, %v: want the winner's epoch %d", li, err, held.Epoch())
		}
		if counter > held.Epoch() {
			burnt = counter
			t.Logf("round %d: winner %s at epoch %d, counter %d", round, held.Owner(), held.Epoch(), counter)
		}
	}

	r.adopt(held) // the winner's barrier snapshot takes the lane over
	waitInstalled(t, s.Service, r.lane, held.Epoch(), r.pub.LastSequence())
	lane := strconv.Itoa(r.lane)
	installs := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed")
	r.injectHeartbeat(burnt, "junk")
	r.bump()
	waitInstalled(t, s.Service, r.lane, held.Epoch(), r.pub.LastSequence())
	if got := metricCount(s.reg, MetricUngrantedEpoch, lane, "kind", wire.KindHeartbeat.String()); got != 1 {
		t.Fatalf("ungranted heartbeats = %d, want 1 (burnt epoch %d, winner %d)", got, burnt, held.Epoch())
	}
	if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed"); got != installs {
		t.Fatalf("installs %d → %d after a heartbeat at the burnt epoch", installs, got)
	}
	requireServing(t, s.Service, r.lane, held.Epoch())
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
}

// waitAwaiting waits until lane is out of the ready set, awaiting a
// snapshot, and has asked for one.
func waitAwaiting(t *testing.T, s *runningService, lane int) {
	t.Helper()
	l := strconv.Itoa(lane)
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		st, err := statusOf(s.Service, lane)
		if err != nil {
			return err
		}
		if st.State != PhaseAwaitingSnapshot || isReady(s.Service, lane) || metricCount(s.reg, MetricSnapshotRequests, l) == 0 {
			return fmt.Errorf("lane %+v ready=%t, %d snapshot requests: want awaiting_snapshot, not ready, asked",
				st, isReady(s.Service, lane), metricCount(s.reg, MetricSnapshotRequests, l))
		}
		return nil
	})
}

// A genuine takeover whose first heartbeat reaches the lane before its
// barrier snapshot: the epoch is the lease record's, so the installed one
// is superseded and the lane leaves the ready set. Its latest marker is
// the installed one, so it does not bootstrap (it would meet the same
// heartbeat again): it asks for a snapshot and waits, skipping and
// counting the epoch's traffic, then installs the marker when it comes.
func TestATakeoverWhoseHeartbeatPrecedesItsMarkerIsAcceptedWithoutLooping(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(43, 8, 6)
	feed(r, w, func(i int) int { return 1 + i%5 })
	s := startService(t, e.nc, e.js, testConfig(t))
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	lane := strconv.Itoa(r.lane)
	installs := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed")

	// relay-a hands over (a rolling restart): relay-b takes a new epoch.
	if err := r.lease.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	l, err := r.coord.Acquire(testCtx(t), r.domain, r.dc, "relay-b", relayLeaseTTL)
	if err != nil {
		t.Fatal(err)
	}
	r.injectHeartbeat(l.Epoch(), "relay-b")
	waitAwaiting(t, s, r.lane)
	// A second heartbeat a while later: still waiting, not bootstrapping.
	time.Sleep(300 * time.Millisecond)
	r.injectHeartbeat(l.Epoch(), "relay-b")
	testenv.WaitFor(t, waitTotal, "condition not met", func() bool {
		return metricCount(s.reg, MetricNewerEpochWithoutMarker, lane, "kind", wire.KindHeartbeat.String()) == 2
	})
	if st, _ := statusOf(s.Service, r.lane); st.State != PhaseAwaitingSnapshot || isReady(s.Service, r.lane) {
		t.Fatalf("lane %+v ready=%t after the second heartbeat", st, isReady(s.Service, r.lane))
	}
	if got := metricCount(s.reg, MetricBootstraps, lane); got != installs {
		t.Fatalf("%d bootstraps while waiting for the marker, want %d", got, installs)
	}
	if got := metricCount(s.reg, MetricUngrantedEpoch, lane); got != 0 {
		t.Fatalf("the genuine epoch was refused %d times", got)
	}

	r.adopt(l) // the barrier snapshot, after its heartbeats
	feed(r, w, func(i int) int { return 6 })
	waitInstalled(t, s.Service, r.lane, l.Epoch(), r.pub.LastSequence())
	requireServing(t, s.Service, r.lane, l.Epoch())
	if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed"); got != installs+1 {
		t.Fatalf("installs %d, want %d: one for the new epoch's marker", got, installs+1)
	}
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
}

// With no lease record (the relay released it) the counter is all a lane
// can judge a newer epoch by, burnt or not. A junk heartbeat at a burnt
// epoch then retires the lane, but it does not loop: it waits for a
// marker, asking for a snapshot, and installs the next relay's.
func TestAJunkHeartbeatWithoutALeaseRecordDoesNotLoopTheLane(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(44, 8, 6)
	feed(r, w, func(i int) int { return 2 })
	s := startService(t, e.nc, e.js, testConfig(t))
	cur := r.epoch()
	waitInstalled(t, s.Service, r.lane, cur, r.pub.LastSequence())
	lane := strconv.Itoa(r.lane)
	installs := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed")

	if err := r.lease.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	r.setEpochCounter(cur + 1)
	r.injectHeartbeat(cur+1, "junk")
	waitAwaiting(t, s, r.lane)
	time.Sleep(500 * time.Millisecond)
	if got := metricCount(s.reg, MetricBootstraps, lane); got != installs {
		t.Fatalf("%d bootstraps, want %d: the lane looped", got, installs)
	}
	if got := metricCount(s.reg, MetricNewerEpochWithoutMarker, lane, "kind", wire.KindHeartbeat.String()); got != 1 {
		t.Fatalf("newer epoch without marker = %d, want 1", got)
	}

	r.takeEpoch() // the next relay: a fresh epoch above the burnt one
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	requireServing(t, s.Service, r.lane, r.epoch())
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
}
