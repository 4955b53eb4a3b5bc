package indexer

import (
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// One real relay reaches the indexer over both source kinds: its NATS load
// windows on lane a, its kvrelay load streams on lane a-kv. Both carry the
// exact state's occupancy against the configured capacity; serving load
// arrives once every worker of the exact state reported it (over kvrelay
// only with both token gauges, as §6.4's pool view has no request counts).
// Before that, and after the reports go stale, the serving load is
// missing on both, never zero.
func TestLoadReachesTheIndexerOverNATSAndKvRelay(t *testing.T) {
	e := newEnv(t)
	cfg := kvRelayConfig("a", "relay-a", 1<<12)
	cfg.KVCapacityBlocks = 1000
	cfg.LoadInterval = 50 * time.Millisecond
	cfg.WorkerLoadFresh = 2 * time.Second
	ra := startKvRelay(t, e, cfg, "127.0.0.1:0")
	testenv.WaitFor(t, waitTotal, "relay active", func() bool { return ra.r.Status().State == relay.StateActive })
	s := startService(t, e.nc, e.js, kvIndexerConfig(t, ra.addr))
	w := newKvWorkload(3, 12)
	w.publish(t, e.js, "a")
	resident := uint64(0)
	for _, d := range w.depth {
		resident += uint64(d)
	}
	kvLane := ckf.LaneCount - 1
	var natsLane int
	testenv.WaitFor(t, waitTotal, "occupancy on both lanes", func() bool {
		l, ok := laneByName(s.Service, "a")
		if !ok {
			return false
		}
		natsLane = l.Lane
		now := time.Now()
		n, k := s.LaneLoad(natsLane, now), s.LaneLoad(kvLane, now)
		return n.Flags.Has(wire.LoadKV) && n.KVUsedBlocks == resident && n.KVCapacity == 1000 &&
			k.Flags.Has(wire.LoadKV) && k.KVUsedBlocks == resident && k.KVCapacity == 1000
	})
	now := time.Now()
	if n, k := s.LaneLoad(natsLane, now), s.LaneLoad(kvLane, now); n.Flags&wire.LoadServing != 0 || k.Flags&wire.LoadServing != 0 {
		t.Fatalf("serving load before any worker reported: nats %+v kvrelay %+v", n, k)
	}
	// Both say how many workers the occupancy covers (the NATS window its
	// KV workers, kvrelay its expected ranks): the queue's drain rate.
	if n, k := s.LaneLoad(natsLane, now), s.LaneLoad(kvLane, now); n.Workers != 1 || k.Workers != 1 {
		t.Fatalf("workers: nats %d kvrelay %d, want 1", n.Workers, k.Workers)
	}

	// Worker 1 (the only one of the exact state) reports every 100 ms.
	stop := make(chan struct{})
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		subj, _ := wire.WorkerLoadSubject(testDomain, "a", 1)
		for seq := uint64(1); ; seq++ {
			rep := wire.WorkerLoad{WorkerID: 1, Sequence: seq, Time: time.Now(), Flags: wire.LoadRequests | wire.LoadPrefill | wire.LoadDecode,
				Serving: wire.ServingLoad{Running: 2, Waiting: 3, ActivePrefillTokens: 700, ActiveDecodeBlocks: 40}}
			b, _ := wire.AppendWorkerLoad(nil, &rep)
			_ = e.nc.Publish(subj, b)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	testenv.WaitFor(t, waitTotal, "serving load on both lanes", func() bool {
		now := time.Now()
		n, k := s.LaneLoad(natsLane, now), s.LaneLoad(kvLane, now)
		return n.Flags.Has(wire.LoadServing) && n.Serving == (wire.ServingLoad{Running: 2, Waiting: 3, ActivePrefillTokens: 700, ActiveDecodeBlocks: 40}) &&
			k.Flags&wire.LoadServing == wire.LoadPrefill|wire.LoadDecode && k.Serving == (wire.ServingLoad{ActivePrefillTokens: 700, ActiveDecodeBlocks: 40}) &&
			n.Workers == 1 && k.Workers == 1 // the queue drains at one worker's rate on both
	})
	if n := metricCount(s.reg, MetricLoadWindows, itoa(kvLane), "source", "kvrelay_serving", "outcome", "accepted"); n == 0 {
		t.Fatal("kvrelay serving windows not counted")
	}

	// The worker goes silent: past WorkerLoadFresh the relay stops sending
	// serving load, and both lanes report it missing (the KV part stays).
	close(stop)
	<-reported
	testenv.WaitFor(t, waitTotal, "serving load missing on both lanes", func() bool {
		now := time.Now()
		n, k := s.LaneLoad(natsLane, now), s.LaneLoad(kvLane, now)
		return n.Flags == wire.LoadKV && k.Flags == wire.LoadKV
	})
	if n := metricCount(s.reg, MetricLoadWindows, itoa(kvLane), "source", "kvrelay_serving", "outcome", "incomplete"); n == 0 {
		t.Fatal("incomplete kvrelay serving windows not counted")
	}
}
