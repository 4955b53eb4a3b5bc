package follow

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// lastMarker returns the newest snapshot marker on r's lane.
func (r *fakeRelay) lastMarker() wire.SnapshotMarker {
	r.t.Helper()
	raw, err := r.res.Lanes.GetLastMsgForSubject(testCtx(r.t), r.subj.Snapshot)
	if err != nil {
		r.t.Fatal(err)
	}
	m, err := wire.DecodeSnapshotMarker(raw.Data)
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// reEpoch returns a copy of m claiming epoch (and the identity a relay of
// that epoch would have), its body stored under that epoch's object name.
func (r *fakeRelay) reEpoch(m wire.SnapshotMarker, epoch uint64) wire.SnapshotMarker {
	r.t.Helper()
	ctx := testCtx(r.t)
	body, err := r.res.Snapshots.GetBytes(ctx, m.ObjectName)
	if err != nil {
		r.t.Fatal(err)
	}
	m.Lease.Epoch, m.Identity.ProducerIncarnation = epoch, epoch
	if m.ObjectName, err = wire.SnapshotObjectName(r.domain, r.dc, epoch, m.Sequence); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.res.Snapshots.PutBytes(ctx, m.ObjectName, body); err != nil {
		r.t.Fatal(err)
	}
	return m
}

// bump stores a fresh chain for a worker no workload uses and publishes
// its delta and drain marker: new traffic under the relay's epoch.
func (r *fakeRelay) bump() {
	r.t.Helper()
	r.bumps++
	r.apply(storeChain(99, chain(1<<40+r.bumps, 2), 0, 2))
	r.drain()
}

func (r *fakeRelay) injectMarker(m wire.SnapshotMarker) {
	r.t.Helper()
	b, err := wire.AppendSnapshotMarker(nil, &m)
	if err != nil {
		r.t.Fatal(err)
	}
	r.inject(r.subj.Snapshot, b)
}

// Before issue 6, a marker claiming epoch 9e18 took the lane over and the
// real relay's traffic was dropped as superseded.
func TestAForgedHigherEpochCannotTakeALaneOver(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(31, 12, 8)
	feed(r, w, func(i int) int { return 1 + i%4 })
	s := startService(t, e.nc, e.js, testConfig(t))
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())

	const forged = 9_000_000_000_000_000_000
	r.injectMarker(r.reEpoch(r.lastMarker(), forged))
	fd := r.lastDelta
	fd.Lease.Epoch, fd.Identity.ProducerIncarnation = forged, forged
	b, err := wire.AppendDelta(nil, &fd)
	if err != nil {
		t.Fatal(err)
	}
	r.inject(r.subj.Delta, b)
	// A heartbeat of a granted newer epoch retires the lane; a forged one
	// must not.
	hb := wire.Heartbeat{Identity: fd.Identity, Lease: fd.Lease, Sequence: fd.Sequence, RelayInstance: "forger", Time: time.Now()}
	if b, err = wire.AppendHeartbeat(nil, &hb); err != nil {
		t.Fatal(err)
	}
	r.inject(r.subj.Heartbeat, b)
	feed(r, w, func(i int) int { return 8 })
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
	lane := strconv.Itoa(r.lane)
	for _, kind := range []string{wire.KindSnapshotMarker.String(), wire.KindDelta.String(), wire.KindHeartbeat.String()} {
		if got := metricCount(s.reg, MetricUngrantedEpoch, lane, "kind", kind); got != 1 {
			t.Fatalf("ungranted %s = %d, want 1", kind, got)
		}
	}
	if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed"); got != 1 {
		t.Fatalf("bootstraps = %d: the forged epoch moved the lane", got)
	}

	// A restarted indexer finds the forged marker newest on the lane: it
	// refuses it, asks for a snapshot and installs the genuine one.
	s.stop(t)
	s2 := startService(t, e.nc, e.js, testConfig(t))
	testenv.WaitFor(t, waitTotal, "condition not met", func() bool { return metricCount(s2.reg, MetricSnapshotRequests, lane) > 0 })
	r.snapshot()
	waitInstalled(t, s2.Service, r.lane, r.epoch(), r.pub.LastSequence())
	if err := checkDepths(s2.Service, r, w); err != nil {
		t.Fatal(err)
	}
}

// The ordering race: the new epoch's marker reaches the indexer before it
// has looked at the moved counter. It re-reads the counter and switches.
func TestAGenuineNewEpochIsAcceptedBeforeTheIndexerSawTheCounterMove(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(32, 8, 6)
	feed(r, w, func(i int) int { return 3 })
	s := startService(t, e.nc, e.js, testConfig(t))
	old := r.epoch()
	waitInstalled(t, s.Service, r.lane, old, r.pub.LastSequence())
	r.takeEpoch()
	feed(r, w, func(i int) int { return 6 })
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	if got := metricCount(s.reg, MetricUngrantedEpoch, strconv.Itoa(r.lane), "kind", wire.KindSnapshotMarker.String()); got != 0 {
		t.Fatalf("a genuine epoch was refused %d times", got)
	}
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
}

// Before issue 6 a lane installed under an epoch its relay never used
// dropped the real traffic as superseded, stayed active and the indexer
// stayed ready.
func TestALaneDroppingSupersededTrafficReportsAFaultAndRecovers(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(33, 10, 8)
	feed(r, w, func(i int) int { return 2 })
	cfg := testConfig(t)
	cfg.SupersededFaultAfter = 300 * time.Millisecond
	s := startService(t, e.nc, e.js, cfg)
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())

	// Someone with write access to the lease bucket moves the counter and
	// publishes a marker under it: the lane follows the higher epoch.
	kv, err := e.js.KeyValue(testCtx(t), lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(t), "epoch."+testDomain+".dc-a", []byte(`{"epoch":100}`)); err != nil {
		t.Fatal(err)
	}
	r.injectMarker(r.reEpoch(r.lastMarker(), 100))
	waitInstalled(t, s.Service, r.lane, 100, 0)

	// The real relay goes on under its epoch: dropped, until the lane says so.
	lane := strconv.Itoa(r.lane)
	deadline := time.Now().Add(waitTotal)
	for metricCount(s.reg, MetricFaults, lane, "kind", faultSuperseded) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no superseded_traffic fault")
		}
		r.bump()
		time.Sleep(50 * time.Millisecond) // the relay's heartbeat pace
	}
	// /v1/lanes and readiness show it until the lane installs a live epoch.
	st, _ := statusOf(s.Service, r.lane)
	if !strings.Contains(st.LastFault, "superseded") || st.State == PhaseActive || s.Ready() {
		t.Fatalf("status %+v (ready %t) does not show the fault", st, s.Ready())
	}
	// The fault asked for a snapshot; the relay answers it and the lane
	// installs its real epoch again.
	testenv.WaitFor(t, waitTotal, "condition not met", func() bool { return metricCount(s.reg, MetricSnapshotRequests, lane) > 0 })
	r.snapshot()
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
}

// Before issue 6 the body named by a marker was read whole, from any
// bucket, before its size was checked.
func TestASnapshotBodyIsCheckedBeforeAnyByteIsRead(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(34, 8, 6)
	feed(r, w, func(i int) int { return 4 })
	ctx := testCtx(t)
	genuine := r.lastMarker()
	seq := genuine.Sequence + 1000
	name, _ := wire.SnapshotObjectName(testDomain, "dc-a", r.epoch(), seq)

	other, err := e.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "elsewhere", Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 3<<20)
	if _, err := other.PutBytes(ctx, name, big); err != nil {
		t.Fatal(err)
	}
	if _, err := r.res.Snapshots.PutBytes(ctx, name, big); err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int64
	count := func(s *Service) {
		real := s.readObject
		s.readObject = func(ctx context.Context, store jetstream.ObjectStore, mk *wire.SnapshotMarker, f ckf.FormatIdentity) ([]uint64, error) {
			reads.Add(1)
			return real(ctx, store, mk, f)
		}
	}
	for _, tc := range []struct {
		name string
		edit func(m *wire.SnapshotMarker)
	}{
		{"another bucket", func(m *wire.SnapshotMarker) { m.ObjectBucket, m.ObjectName = "elsewhere", name }},
		{"another pool's object", func(m *wire.SnapshotMarker) { m.ObjectName = "snap/" + testDomain + "/dc-b/1-1" }},
		{"stored object larger than the marker says", func(m *wire.SnapshotMarker) { m.Sequence, m.ObjectName = seq, name }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := genuine
			tc.edit(&m)
			r.injectMarker(m)
			reads.Store(0)
			s := startService(t, e.nc, e.js, testConfig(t), count)
			lane := strconv.Itoa(r.lane)
			testenv.Eventually(t, waitTotal, waitInterval, func() error {
				if got := metricCount(s.reg, MetricMalformed, lane, "kind", malformedObject); got == 0 {
					return fmt.Errorf("marker not refused")
				}
				return nil
			})
			if n := reads.Load(); n != 0 {
				t.Fatalf("%d body reads for a refused marker", n)
			}
			r.bump() // a new sequence: the same one's marker would be a duplicate
			r.snapshot()
			waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
			if err := checkDepths(s.Service, r, w); err != nil {
				t.Fatal(err)
			}
			s.stop(t)
		})
	}
}

// Before issue 6 a deleted lane stream was never recreated by the indexer,
// and a recreated one (its sequences restart at 1) left every lane's
// consumer waiting past the new stream's end.
func TestADeletedLaneStreamIsRecreatedAndLanesBootstrapAgain(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(35, 10, 8)
	feed(r, w, func(i int) int { return 3 })
	cfg := testConfig(t)
	cfg.StreamCheckInterval = 50 * time.Millisecond
	s := startService(t, e.nc, e.js, cfg)
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())

	ctx := testCtx(t)
	if err := e.js.DeleteStream(ctx, "CKF_LANES"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, waitTotal, "condition not met", func() bool { return promtest.Count(s.reg, MetricLaneStreamRecreated+`{outcome="created"}`) > 0 })
	if _, err := e.js.Stream(ctx, "CKF_LANES"); err != nil {
		t.Fatalf("lane stream not recreated: %v", err)
	}
	// The relay's next publish fails on the new stream: it takes a new
	// epoch and publishes its barrier snapshot there.
	r.lastLaneSeq = 0
	r.takeEpoch()
	feed(r, w, func(i int) int { return 8 })
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
	if got := metricCount(s.reg, MetricFaults, strconv.Itoa(r.lane), "kind", faultStreamReplaced); got == 0 {
		t.Fatal("the lane did not report the replaced stream")
	}
}
