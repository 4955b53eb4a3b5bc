package follow

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// feed stores the first cut of every chain on a few workers, removes some
// tails, and publishes the deltas and a drain marker.
func feed(r *fakeRelay, w *workload, cut func(i int) int) {
	for i, c := range w.chains {
		worker := uint64(i % 3)
		n := cut(i)
		if n > 0 {
			r.apply(storeChain(worker, c, 0, n))
		}
	}
	r.drain()
}

func TestMatchEqualsProducerExactState(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(1, 40, 24)
	// Before the indexer starts: these reach it through the snapshot.
	feed(r, w, func(i int) int { return i % 12 })
	r.snapshot()
	s := startService(t, e.nc, e.js, testConfig(t))
	// After: these arrive as deltas, some removing earlier blocks.
	r.eventTime = time.Now()
	feed(r, w, func(i int) int { return 12 + i%13 })
	for i, c := range w.chains {
		if i%4 == 0 && i%12 > 2 {
			r.apply(removeChain(uint64(i%3), c, 2, i%12))
		}
	}
	r.drain()
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return checkDepths(s.Service, r, w) })

	if !s.Ready() {
		t.Fatal("Ready() = false with an active lane")
	}
	lane := strconv.Itoa(r.lane)
	if got := metricCount(s.reg, MetricDeltas, lane); got == 0 {
		t.Fatalf("deltas admitted = %d, want > 0", got)
	}
	if metricCount(s.reg, MetricEventToQueryable, lane) == 0 {
		t.Fatal("no event→queryable latency observed for deltas carrying the event time header")
	}
	if got := metricCount(s.reg, MetricBootstraps, strconv.Itoa(r.lane), "outcome", "installed"); got != 1 {
		t.Fatalf("bootstraps installed = %d, want 1", got)
	}
	// Every lane-map DC is reported, with its state and sequence.
	st, err := statusOf(s.Service, r.lane)
	if err != nil {
		t.Fatal(err)
	}
	if st.DC != "dc-a" || st.Pool != r.pool.String() || st.InstalledSequence != r.pub.LastSequence() {
		t.Fatalf("lane status %+v", st)
	}
}

func TestNewDCBecomesQueryableWithoutRestart(t *testing.T) {
	e := newEnv(t)
	a := e.relay(t, "dc-a")
	wa := newWorkload(2, 10, 8)
	feed(a, wa, func(i int) int { return 1 + i%8 })
	s := startService(t, e.nc, e.js, testConfig(t))
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return checkDepths(s.Service, a, wa) })

	b := e.relay(t, "dc-b")
	if b.lane == a.lane {
		t.Fatalf("both DCs on lane %d", a.lane)
	}
	wb := newWorkload(3, 10, 8)
	feed(b, wb, func(i int) int { return 8 - i%8 })
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		if err := checkDepths(s.Service, b, wb); err != nil {
			return err
		}
		return checkDepths(s.Service, a, wa)
	})
	// A chain stored by both DCs: each lane answers its own depth.
	both := chain(99, 6)
	a.apply(storeChain(7, both, 0, 2))
	b.apply(storeChain(7, both, 0, 5))
	resp, err := s.Match(api.Query{Locals: both})
	for ; err == nil; resp, err = s.Match(api.Query{Locals: both}) {
		da, _ := laneDepth(resp, a.lane)
		db, _ := laneDepth(resp, b.lane)
		if da.Depth == 2 && db.Depth == 5 {
			break
		}
		time.Sleep(waitInterval)
	}
	if err != nil {
		t.Fatal(err)
	}
	if resp.Best == nil || resp.Best.DC != "dc-b" || resp.Best.Depth != 5 {
		t.Fatalf("best = %+v, want dc-b depth 5", resp.Best)
	}
}

func TestMalformedMessagesAreCountedAndSkipped(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(4, 12, 10)
	feed(r, w, func(i int) int { return i % 10 })
	s := startService(t, e.nc, e.js, testConfig(t))
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())

	valid, err := wire.AppendDelta(nil, &r.lastDelta)
	if err != nil {
		t.Fatal(err)
	}
	foreign := r.lastDelta
	foreign.Identity.Pool.Dc = ckf.DcIDFromName("elsewhere")
	foreignData, err := wire.AppendDelta(nil, &foreign)
	if err != nil {
		t.Fatal(err)
	}
	r.inject(r.subj.Delta, []byte("not msgpack at all"))          // malformed
	r.inject(r.subj.Delta, valid[:len(valid)-3])                  // truncated
	r.inject(r.subj.Delta, append(append([]byte{}, valid...), 0)) // trailing bytes
	r.inject(r.subj.Drain, valid)                                 // a delta on the drain subject
	r.inject(r.subj.Delta, foreignData)                           // another pool's identity

	// The lane keeps following the producer.
	feed(r, w, func(i int) int { return 10 })
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return checkDepths(s.Service, r, w) })

	lane := strconv.Itoa(r.lane)
	for _, kind := range []string{"malformed", "truncated", "trailing_bytes", malformedSubject, malformedForeignPool} {
		if got := metricCount(s.reg, MetricMalformed, lane, "kind", kind); got != 1 {
			t.Errorf("malformed{%s} = %d, want 1", kind, got)
		}
	}
	if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed"); got != 1 {
		t.Fatalf("bootstraps = %d, want 1: a malformed message must not touch the lane", got)
	}
	if st, _ := statusOf(s.Service, r.lane); st.LastFault != "" {
		t.Fatalf("last fault %q, want none", st.LastFault)
	}
}

func TestGapRetiresOnlyThatLaneAndRecoversFromNewerSnapshot(t *testing.T) {
	e := newEnv(t)
	a := e.relay(t, "dc-a")
	b := e.relay(t, "dc-b")
	wa, wb := newWorkload(5, 10, 8), newWorkload(6, 10, 8)
	feed(a, wa, func(i int) int { return 1 + i%7 })
	feed(b, wb, func(i int) int { return 8 - i%7 })
	s := startService(t, e.nc, e.js, testConfig(t))
	waitInstalled(t, s.Service, a.lane, a.epoch(), a.pub.LastSequence())
	waitInstalled(t, s.Service, b.lane, b.epoch(), b.pub.LastSequence())
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return checkDepths(s.Service, b, wb) })

	requests, err := a.coord.WatchSnapshotRequests(testCtx(t), testDomain, a.dc)
	if err != nil {
		t.Fatal(err)
	}
	// Lane b must stay ready from here to the end.
	var bDropped atomic.Bool
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if !isReady(s.Service, b.lane) {
				bDropped.Store(true)
			}
			time.Sleep(time.Millisecond)
		}
	}()

	// A delta that skips a sequence: base = last+1.
	gap := a.lastDelta
	gap.BaseSequence = a.pub.LastSequence() + 1
	gap.Sequence = gap.BaseSequence + 1
	data, err := wire.AppendDelta(nil, &gap)
	if err != nil {
		t.Fatal(err)
	}
	a.inject(a.subj.Delta, data)
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		if isReady(s.Service, a.lane) {
			return errors.New("lane a still ready after the gap")
		}
		return nil
	})
	select {
	case <-requests:
	case <-time.After(waitTotal):
		t.Fatal("no snapshot request after the gap")
	}
	if got := metricCount(s.reg, MetricFaults, strconv.Itoa(a.lane), "kind", consumer.FaultBaseSequenceMismatch.String()); got == 0 {
		t.Fatal("gap fault not counted")
	}
	// The producer answers with a newer barrier snapshot.
	feed(a, wa, func(i int) int { return 8 })
	a.snapshot()
	feed(a, wa, func(i int) int { return 8 - i%3 })
	waitInstalled(t, s.Service, a.lane, a.epoch(), a.pub.LastSequence())
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return checkDepths(s.Service, a, wa) })

	close(stop)
	<-watched
	if bDropped.Load() {
		t.Fatal("lane b lost readiness while lane a recovered")
	}
	lb := strconv.Itoa(b.lane)
	if got := metricCount(s.reg, MetricBootstraps, lb, "outcome", "installed"); got != 1 {
		t.Fatalf("lane b bootstraps = %d, want 1", got)
	}
	if err := checkDepths(s.Service, b, wb); err != nil {
		t.Fatal(err)
	}
}

func TestNewerEpochSwitchesAndDropsSupersededTraffic(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(7, 10, 8)
	feed(r, w, func(i int) int { return 2 + i%6 })
	s := startService(t, e.nc, e.js, testConfig(t))
	oldEpoch := r.epoch()
	waitInstalled(t, s.Service, r.lane, oldEpoch, r.pub.LastSequence())

	// A zombie delta of the old epoch that would wipe every touched bucket.
	zombie := r.lastDelta
	zombie.BaseSequence = r.pub.LastSequence()
	zombie.Sequence = zombie.BaseSequence + 1
	for i := range zombie.Images {
		zombie.Images[i].Value = 0
	}
	zdata, err := wire.AppendDelta(nil, &zombie)
	if err != nil {
		t.Fatal(err)
	}

	r.takeEpoch() // new lease epoch, new identity, barrier snapshot
	if r.epoch() <= oldEpoch {
		t.Fatalf("epoch %d not above %d", r.epoch(), oldEpoch)
	}
	feed(r, w, func(i int) int { return 8 })
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())

	r.inject(r.subj.Delta, zdata)
	feed(r, w, func(i int) int { return 8 })
	r.drain()
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		if got := metricCount(s.reg, MetricSuperseded, strconv.Itoa(r.lane), "kind", "delta"); got != 1 {
			return fmt.Errorf("superseded deltas = %d, want 1", got)
		}
		return nil
	})
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
	if got := metricCount(s.reg, MetricBootstraps, strconv.Itoa(r.lane), "outcome", "installed"); got != 2 {
		t.Fatalf("bootstraps = %d, want 2 (initial epoch, newer epoch)", got)
	}
}

func TestLaneApplySpanIsChildOfRelaySpan(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(testCtx(t)) })
	cfg := testConfig(t)
	cfg.Tracer = tp
	s := startService(t, e.nc, e.js, cfg)
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())

	ctx, parent := tp.Tracer("relay").Start(testCtx(t), "relay.publish")
	r.traceCtx = ctx
	c := chain(11, 3)
	r.apply(storeChain(1, c, 0, 3))
	parent.End()
	seq := int64(r.pub.LastSequence())

	var span sdktrace.ReadOnlySpan
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		for _, sp := range sr.Ended() {
			if sp.Name() == SpanLaneApply && hasAttr(sp.Attributes(), "sequence", attribute.Int64Value(seq)) {
				span = sp
				return nil
			}
		}
		return fmt.Errorf("no %s span for sequence %d among %d spans", SpanLaneApply, seq, len(sr.Ended()))
	})
	psc := parent.SpanContext()
	if span.SpanContext().TraceID() != psc.TraceID() {
		t.Fatalf("trace id %s, want the relay's %s", span.SpanContext().TraceID(), psc.TraceID())
	}
	if span.Parent().SpanID() != psc.SpanID() || !span.Parent().IsRemote() {
		t.Fatalf("parent %s (remote %v), want the relay span %s", span.Parent().SpanID(), span.Parent().IsRemote(), psc.SpanID())
	}
	for _, kv := range []attribute.KeyValue{
		attribute.Int("lane", r.lane), attribute.String("dc", "dc-a"), attribute.Int("images", len(r.lastDelta.Images)),
	} {
		if !hasAttr(span.Attributes(), kv.Key, kv.Value) {
			t.Errorf("span lacks %s=%v: %v", kv.Key, kv.Value.String(), span.Attributes())
		}
	}
}

func hasAttr(attrs []attribute.KeyValue, key attribute.Key, v attribute.Value) bool {
	for _, kv := range attrs {
		if kv.Key == key && kv.Value == v {
			return true
		}
	}
	return false
}

func TestRestartedIndexerCatchesUp(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(9, 12, 10)
	feed(r, w, func(i int) int { return i % 5 })
	s1 := startService(t, e.nc, e.js, testConfig(t))
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return checkDepths(s1.Service, r, w) })
	s1.stop(t)
	if s1.Ready() {
		t.Fatal("a stopped service still reports ready")
	}

	// While no indexer runs, the producer keeps going (deltas only).
	feed(r, w, func(i int) int { return 5 + i%6 })
	for i, c := range w.chains {
		if i%3 == 0 && i%5 > 1 {
			r.apply(removeChain(uint64(i%3), c, 1, i%5))
		}
	}
	r.drain()

	s2 := startService(t, e.nc, e.js, testConfig(t))
	if s2.ConsumerInstance() == s1.ConsumerInstance() {
		t.Fatal("two services drew the same random consumer instance")
	}
	waitInstalled(t, s2.Service, r.lane, r.epoch(), r.pub.LastSequence())
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return checkDepths(s2.Service, r, w) })
}

func TestUnavailableWithoutLanes(t *testing.T) {
	e := newEnv(t)
	s := startService(t, e.nc, e.js, testConfig(t))
	if s.Ready() {
		t.Fatal("ready without lanes")
	}
	if _, err := s.Match(api.Query{Locals: chain(1, 2)}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("Match = %v, want api.ErrUnavailable", err)
	}
	if len(s.Lanes()) != 0 {
		t.Fatalf("lanes %+v, want none", s.Lanes())
	}
	// The background Run must have claimed the service first.
	testenv.WaitFor(t, waitTotal, "Run started", s.started.Load)
	if err := s.Run(testCtx(t)); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Run = %v, want ErrAlreadyRunning", err)
	}
}

// A lane registered before its relay published anything is waiting, not
// faulty: no fault counted or reported, then installed once the first
// marker appears.
func TestALaneWaitingForItsFirstMarkerIsNotAFault(t *testing.T) {
	e := newEnv(t)
	r := newFakeRelay(t, e.js, testDomain, "dc-a", testBlocks)
	r.register()
	s := startService(t, e.nc, e.js, testConfig(t))
	lane := strconv.Itoa(r.lane)
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "waiting"); got < 2 {
			return fmt.Errorf("waiting bootstraps %d, want a few", got)
		}
		return nil
	})
	if st, _ := statusOf(s.Service, r.lane); st.LastFault != "" || st.State == PhaseActive {
		t.Fatalf("lane %+v while no marker exists", st)
	}
	r.takeEpoch() // the first snapshot marker
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	if got := metricCount(s.reg, MetricFaults, lane, "kind", "no_snapshot"); got != 0 {
		t.Fatalf("no_snapshot faults = %d, want 0", got)
	}
	if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "failed"); got != 0 {
		t.Fatalf("failed bootstraps = %d, want 0", got)
	}
	if st, _ := statusOf(s.Service, r.lane); st.LastFault != "" {
		t.Fatalf("last fault %q after a clean start", st.LastFault)
	}
}

// TestGrantedNewerHeartbeatWithoutItsMarkerRetiresTheLane: a relay took a
// newer epoch whose marker the lane never saw, and, idle, sends only
// heartbeats. The lane must stop answering for the superseded epoch (fault
// newer_epoch, out of the ready set) and install the newer epoch once its
// snapshot marker arrives.
func TestGrantedNewerHeartbeatWithoutItsMarkerRetiresTheLane(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(9, 6, 6)
	feed(r, w, func(i int) int { return 2 + i%4 })
	s := startService(t, e.nc, e.js, testConfig(t))
	oldEpoch := r.epoch()
	waitInstalled(t, s.Service, r.lane, oldEpoch, r.pub.LastSequence())

	l, err := r.coord.Acquire(testCtx(t), r.domain, r.dc, r.instance, relayLeaseTTL)
	if err != nil {
		t.Fatal(err)
	}
	if l.Epoch() <= oldEpoch {
		t.Fatalf("epoch %d not above %d", l.Epoch(), oldEpoch)
	}
	newID := ckf.ProducerIdentity{Pool: r.pool, ProducerIncarnation: l.Epoch(), LayoutGeneration: 1, Format: r.state.Format()}
	hb := wire.Heartbeat{Identity: newID, Lease: wire.WireLease{Epoch: l.Epoch(), Instance: r.instance}, Sequence: r.pub.LastSequence(), RelayInstance: "relay-b", Time: time.Now()}
	data, err := wire.AppendHeartbeat(nil, &hb)
	if err != nil {
		t.Fatal(err)
	}
	r.inject(r.subj.Heartbeat, data)
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		st, err := statusOf(s.Service, r.lane)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(st.LastFault, "newer_epoch") || isReady(s.Service, r.lane) {
			return fmt.Errorf("lane %+v ready=%v, want out of the ready set with a newer_epoch fault", st, isReady(s.Service, r.lane))
		}
		return nil
	})

	// The newer epoch's relay publishes its barrier snapshot: the lane
	// installs it.
	r.lease = l
	r.identity = newID
	r.pub = producer.NewPublisher(r.identity, r.pub.LastSequence(), r)
	r.snapshot()
	waitInstalled(t, s.Service, r.lane, l.Epoch(), r.pub.LastSequence())
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
}
