package follow

import (
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// window is a load window of r's installed epoch.
func (r *fakeRelay) window(seq uint64, mut func(*wire.PoolLoad)) wire.PoolLoad {
	p := wire.PoolLoad{Identity: r.identity, Lease: r.wireLease(), WindowSequence: seq, Time: time.Now(), WindowMs: 1000,
		Flags: wire.LoadKV | wire.LoadRequests, KVUsedBlocks: 40, KVCapacityBlocks: 100, KVWorkers: 2,
		Serving: wire.ServingLoad{Running: 3, Waiting: 5}, ServingWorkers: 2, ServingTime: time.Now()}
	if mut != nil {
		mut(&p)
	}
	return p
}

// sendWindow publishes p on the pool's load subject (core NATS).
func (r *fakeRelay) sendWindow(e *env, p wire.PoolLoad) {
	r.t.Helper()
	b, err := wire.AppendPoolLoad(nil, &p)
	if err != nil {
		r.t.Fatal(err)
	}
	r.sendLoadBytes(e, b)
}

func (r *fakeRelay) sendLoadBytes(e *env, b []byte) {
	r.t.Helper()
	subj, _ := wire.PoolLoadSubject(testDomain, r.dc)
	if err := e.nc.Publish(subj, b); err != nil {
		r.t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		r.t.Fatal(err)
	}
}

func loadWindowCount(s *Service, lane int, outcome string) uint64 {
	return metricCount(s.reg, MetricLoadWindows, itoa(lane), "source", "nats", "outcome", outcome)
}

// A NATS load window reaches the lane only under the lane's installed
// identity and epoch and in window order; everything else is counted and
// dropped, and what was accepted stays. Load older than LoadMaxAge is
// dropped and counted, and then missing, never zero.
func TestNATSLoadWindowsAreFencedOrderedAndExpire(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	clock := &skewedClock{}
	cfg := testConfig(t)
	cfg.LoadMaxAge = 5 * time.Second
	s := startService(t, e.nc, e.js, cfg, func(s *Service) { s.now = clock.now })
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())

	r.sendWindow(e, r.window(2, nil))
	testenv.WaitFor(t, waitTotal, "window accepted", func() bool { return loadWindowCount(s.Service, r.lane, "accepted") == 1 })
	l := s.LaneLoad(r.lane, clock.now())
	if !l.Flags.Has(wire.LoadKV|wire.LoadRequests) || l.KVUsedBlocks != 40 || l.KVCapacity != 100 || l.Serving.Waiting != 5 {
		t.Fatalf("load %+v", l)
	}

	// Refused: an older window, another epoch (older, newer), another
	// identity at this epoch, another pool, bytes that do not decode.
	r.sendWindow(e, r.window(1, func(p *wire.PoolLoad) { p.Serving.Waiting = 99 }))
	r.sendWindow(e, r.window(3, func(p *wire.PoolLoad) { p.Lease.Epoch--; p.Identity.ProducerIncarnation-- }))
	r.sendWindow(e, r.window(3, func(p *wire.PoolLoad) { p.Lease.Epoch++; p.Identity.ProducerIncarnation++ }))
	r.sendWindow(e, r.window(3, func(p *wire.PoolLoad) { p.Identity.LayoutGeneration++ }))
	r.sendWindow(e, r.window(3, func(p *wire.PoolLoad) { p.Identity.Pool.Dc++ }))
	r.sendLoadBytes(e, []byte{0x93, 1, 5, 0})
	for outcome, n := range map[string]uint64{"out_of_order": 1, "superseded": 1, faultNewerEpoch: 1,
		malformedIdentity: 1, malformedForeignPool: 1, "malformed": 1} {
		testenv.WaitFor(t, waitTotal, outcome, func() bool { return loadWindowCount(s.Service, r.lane, outcome) == n })
	}
	if l := s.LaneLoad(r.lane, clock.now()); l.Serving.Waiting != 5 || l.KVUsedBlocks != 40 {
		t.Fatalf("a refused window changed the load: %+v", l)
	}

	// A later window that says serving load is unknown: the lane's serving
	// load is missing, not zero; its KV occupancy is still known.
	r.sendWindow(e, r.window(4, func(p *wire.PoolLoad) {
		p.Flags, p.Serving, p.ServingWorkers, p.ServingTime = wire.LoadKV, wire.ServingLoad{}, 0, time.Time{}
	}))
	testenv.WaitFor(t, waitTotal, "window 4", func() bool { return loadWindowCount(s.Service, r.lane, "accepted") == 2 })
	if l := s.LaneLoad(r.lane, clock.now()); l.Flags != wire.LoadKV {
		t.Fatalf("serving load after a window without it: %+v", l)
	}

	// Past LoadMaxAge the load is dropped (counted once) and missing.
	clock.advance(6 * time.Second)
	if l := s.LaneLoad(r.lane, clock.now()); l.Flags != 0 {
		t.Fatalf("expired load used: %+v", l)
	}
	s.LaneLoad(r.lane, clock.now())
	if n := metricCount(s.reg, MetricLoadExpired, itoa(r.lane), "part", "kv"); n != 1 {
		t.Fatalf("expired kv parts counted %d times, want 1", n)
	}
	// A window for a DC with no lane is counted as unmatched.
	other := &fakeRelay{t: t, dc: "dc-nowhere"}
	other.sendLoadBytes(e, []byte{0x90})
	testenv.WaitFor(t, waitTotal, "unmatched", func() bool {
		return metricCountPlain(s.Service, MetricLoadUnmatched+`{reason="unknown_dc"}`) == 1
	})
}

// A new epoch's install makes the previous epoch's load unusable: load is
// never carried over a takeover.
func TestLoadOfAnEarlierEpochIsNotUsedAfterATakeover(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	s := startService(t, e.nc, e.js, testConfig(t))
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	r.sendWindow(e, r.window(1, nil))
	testenv.WaitFor(t, waitTotal, "window accepted", func() bool { return loadWindowCount(s.Service, r.lane, "accepted") == 1 })
	r.takeEpoch()
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	if l := s.LaneLoad(r.lane, time.Now()); l.Flags != 0 {
		t.Fatalf("load of the earlier epoch used after the takeover: %+v", l)
	}
	r.sendWindow(e, r.window(1, nil))
	testenv.WaitFor(t, waitTotal, "the new epoch's window", func() bool { return s.LaneLoad(r.lane, time.Now()).Flags != 0 })
}

func metricCountPlain(s *Service, spec string) uint64 { return promtest.Count(s.reg, spec) }
