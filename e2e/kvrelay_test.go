package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// A relay and an indexer that follows its pool over NATS and over
// dynamo.kvrelay.v1 at once (the relay's kvrelay server).

const (
	kvWait = 20 * time.Second
	kvPoll = 10 * time.Millisecond
)

var kvSpec = server.PoolSpec{Model: "llama", Namespace: "prod", Component: "backend", Endpoint: "generate", BlockSize: 64}

// kvRelayConfig is a fast relay of dc that also publishes over kvrelay.
func kvRelayConfig(dc, instance string, expected uint64) relay.Config {
	c := relay.DefaultConfig(domain, dc)
	c.Instance = instance
	c.CKF = ckf.NewConfig(expected)
	c.PublishInterval = 2 * time.Millisecond
	c.HeartbeatInterval = 20 * time.Millisecond
	c.LeaseTTL = 3 * time.Second
	c.Streams = streams.Options{Memory: true}
	spec := kvSpec
	c.KvRelay = &spec
	return c
}

// runningRelay is a relay on its own NATS connection and its kvrelay
// server.
type runningRelay struct {
	r      *relay.Relay
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
	srv    *server.Server
	served chan error
	addr   string
}

// startKvRelay runs a relay; its kvrelay server listens on addr
// ("127.0.0.1:0": any port).
func startKvRelay(t testing.TB, srv *testenv.Server, cfg relay.Config, addr string) *runningRelay {
	t.Helper()
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(nc, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rr := &runningRelay{r: r, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(ctx) }()
	rr.serve(t, addr)
	t.Cleanup(func() { rr.kill(t) })
	return rr
}

func (rr *runningRelay) serve(t testing.TB, addr string) {
	t.Helper()
	scfg := server.DefaultConfig()
	scfg.PoolHeartbeat, scfg.CatalogHeartbeat, scfg.ReadinessHeartbeat = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	srv, err := server.New(rr.r.Publication(), scfg)
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	testenv.WaitFor(t, kvWait, "listen on "+addr, func() bool {
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	rr.srv, rr.addr, rr.served = srv, ln.Addr().String(), make(chan error, 1)
	go func() { rr.served <- srv.Serve(ln) }()
}

// kill is kill -9: the relay's NATS connection closes under it (it can
// neither publish nor release its lease, which lapses after its TTL) and
// its kvrelay server is cut without grace (streams break mid-flight); the
// dead relay's goroutines are then stopped. Idempotent.
func (rr *runningRelay) kill(t testing.TB) {
	t.Helper()
	if rr.nc != nil {
		rr.nc.Close()
		rr.nc = nil
	}
	if rr.srv != nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rr.srv.Shutdown(ctx)
		<-rr.served
		rr.srv = nil
	}
	if rr.cancel != nil {
		rr.cancel()
		select {
		case <-rr.done:
		case <-time.After(kvWait):
			t.Errorf("relay did not stop")
		}
		rr.cancel = nil
	}
}

// kvWorkload stores, for chain i, its first i%7 blocks on worker 1 of dc,
// so the exact depth of a query of chain i is i%7.
type kvWorkload struct {
	chains [][]ckf.LocalBlockHash
	depth  []int
	event  uint64
}

func newKvWorkload(seed uint64, n int) *kvWorkload {
	w := &kvWorkload{}
	for i := range n {
		w.chains = append(w.chains, testenv.Chain(seed*1000+uint64(i), 6))
		w.depth = append(w.depth, i%7)
	}
	return w
}

func (w *kvWorkload) publish(t testing.TB, js jetstream.JetStream, dc string) {
	t.Helper()
	subj, err := wire.WorkerEventsSubject(domain, dc, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range w.chains {
		if w.depth[i] == 0 {
			continue
		}
		var blocks []string
		for _, h := range c[:w.depth[i]] {
			blocks = append(blocks, fmt.Sprintf(`{"block_hash":%d,"tokens_hash":%d}`, uint64(h), uint64(h)))
		}
		w.event++
		msg := fmt.Sprintf(`{"worker_id":1,"event":{"event_id":%d,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[%s]}}}}`, w.event, strings.Join(blocks, ","))
		if _, err := js.Publish(context.Background(), subj, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
}

// exact reports the first chain whose depth on lane is not the exact one.
func (w *kvWorkload) exact(s *indexerProc, lane int) error {
	for i, c := range w.chains {
		resp, err := s.Match(api.Query{Locals: c})
		if err != nil {
			return err
		}
		d, ok := testenv.LaneDepth(resp, lane)
		if !ok || int(d.Depth) != w.depth[i] {
			return fmt.Errorf("chain %d: lane %d depth %d (present %t), exact %d", i, lane, d.Depth, ok, w.depth[i])
		}
	}
	return nil
}

func kvIndexerConfig(t testing.TB, addr string) follow.Config {
	cfg := indexerConfig(t, nil)
	cfg.KvRelay = follow.KvRelayConfig{Sources: []follow.KvRelaySource{{Name: "a-kv", Addr: addr}}, Model: "llama", BlockSize: 64, AcceptLegacy: true,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond, FrameTimeout: 3 * time.Second}
	return cfg
}

// The lease bucket deleted and recreated by hand without per-key TTLs
// while a relay and an indexer run (the relay side is
// internal/relay's TestARelayRepairsALeaseBucketRecreatedWithoutPerKeyTTLs):
// the relay sets up again, which upgrades the bucket, registers its lane
// and takes an epoch of the restarted counter; the indexer follows it and
// answers the DC exactly, old and new blocks, without any restart.
func TestADCStaysAnsweredAfterItsLeaseBucketIsRecreatedWithoutTTLs(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	ra := startKvRelay(t, srv, kvRelayConfig("a", "relay-a", 1<<12), "127.0.0.1:0")
	testenv.WaitFor(t, kvWait, "relay active", func() bool { return ra.r.Status().State == relay.StateActive })
	s := startIndexer(t, nc, js, kvIndexerConfig(t, "127.0.0.1:1"))
	w := newKvWorkload(71, 24)
	w.publish(t, js, "a")
	testenv.Eventually(t, kvWait, kvPoll, func() error { return w.exact(s, 0) })

	ctx := context.Background()
	testenv.Eventually(t, kvWait, time.Millisecond, func() error {
		if err := js.DeleteKeyValue(ctx, wire.LeaseBucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return err
		}
		_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: wire.LeaseBucket, History: 5, Storage: jetstream.MemoryStorage})
		return err
	})
	more := newKvWorkload(72, 24)
	more.publish(t, js, "a")
	testenv.Eventually(t, 2*kvWait, kvPoll, func() error {
		st, err := js.Stream(ctx, "KV_"+wire.LeaseBucket)
		if err != nil {
			return err
		}
		if cfg := st.CachedInfo().Config; !cfg.AllowMsgTTL {
			return fmt.Errorf("lease bucket not upgraded")
		}
		if err := w.exact(s, 0); err != nil {
			return err
		}
		return more.exact(s, 0)
	})
}

// One real relay reaches the indexer over both source kinds: its NATS load
// windows on lane a, its kvrelay load streams on lane a-kv. Both carry the
// exact state's occupancy against the configured capacity; serving load
// arrives once every worker of the exact state reported it (over kvrelay
// only with both token gauges, as §6.4's pool view has no request counts).
// Before that, and after the reports go stale, the serving load is
// missing on both, never zero.
func TestLoadReachesTheIndexerOverNATSAndKvRelay(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := kvRelayConfig("a", "relay-a", 1<<12)
	cfg.KVCapacityBlocks = 1000
	cfg.LoadInterval = 50 * time.Millisecond
	cfg.WorkerLoadFresh = 2 * time.Second
	ra := startKvRelay(t, srv, cfg, "127.0.0.1:0")
	testenv.WaitFor(t, kvWait, "relay active", func() bool { return ra.r.Status().State == relay.StateActive })
	s := startIndexer(t, nc, js, kvIndexerConfig(t, ra.addr))
	w := newKvWorkload(3, 12)
	w.publish(t, js, "a")
	resident := uint64(0)
	for _, d := range w.depth {
		resident += uint64(d)
	}
	kvLane := ckf.LaneCount - 1
	var natsLane int
	testenv.WaitFor(t, kvWait, "occupancy on both lanes", func() bool {
		l, ok := laneOf(s, "a")
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
		subj, _ := wire.WorkerLoadSubject(domain, "a", 1)
		for seq := uint64(1); ; seq++ {
			rep := wire.WorkerLoad{WorkerID: 1, Sequence: seq, Time: time.Now(), Flags: wire.LoadRequests | wire.LoadPrefill | wire.LoadDecode,
				Serving: wire.ServingLoad{Running: 2, Waiting: 3, ActivePrefillTokens: 700, ActiveDecodeBlocks: 40}}
			b, _ := wire.AppendWorkerLoad(nil, &rep)
			_ = nc.Publish(subj, b)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	testenv.WaitFor(t, kvWait, "serving load on both lanes", func() bool {
		now := time.Now()
		n, k := s.LaneLoad(natsLane, now), s.LaneLoad(kvLane, now)
		return n.Flags.Has(wire.LoadServing) && n.Serving == (wire.ServingLoad{Running: 2, Waiting: 3, ActivePrefillTokens: 700, ActiveDecodeBlocks: 40}) &&
			k.Flags&wire.LoadServing == wire.LoadPrefill|wire.LoadDecode && k.Serving == (wire.ServingLoad{ActivePrefillTokens: 700, ActiveDecodeBlocks: 40}) &&
			n.Workers == 1 && k.Workers == 1 // the queue drains at one worker's rate on both
	})
	if n := promtest.Count(s.Metrics(), follow.MetricLoadWindows+`{lane="`+strconv.Itoa(kvLane)+`",source="kvrelay_serving",outcome="accepted"}`); n == 0 {
		t.Fatal("kvrelay serving windows not counted")
	}

	// The worker goes silent: past WorkerLoadFresh the relay stops sending
	// serving load, and both lanes report it missing (the KV part stays).
	close(stop)
	<-reported
	testenv.WaitFor(t, kvWait, "serving load missing on both lanes", func() bool {
		now := time.Now()
		n, k := s.LaneLoad(natsLane, now), s.LaneLoad(kvLane, now)
		return n.Flags == wire.LoadKV && k.Flags == wire.LoadKV
	})
	if n := promtest.Count(s.Metrics(), follow.MetricLoadWindows+`{lane="`+strconv.Itoa(kvLane)+`",source="kvrelay_serving",outcome="incomplete"}`); n == 0 {
		t.Fatal("incomplete kvrelay serving windows not counted")
	}
}

// BenchmarkEventToVisible measures, per stored event published on the
// relay's input, how long until a query sees it on the relay's NATS lane and
// on the same relay's kvrelay lane (one indexer follows both), and reports
// p50 and p99 of each and their ratio. Run:
//
//	go test -run '^$' -bench EventToVisible -benchtime 300x ./e2e
func BenchmarkEventToVisible(b *testing.B) {
	srv := testenv.StartServer(b)
	nc, js := srv.Connect(b), srv.JetStream(b)
	rr := startKvRelay(b, srv, kvRelayConfig("a", "relay-a", 1<<14), "127.0.0.1:0")
	testenv.WaitFor(b, kvWait, "relay active", func() bool { return rr.r.Status().State == relay.StateActive })
	s := startIndexer(b, nc, js, kvIndexerConfig(b, rr.addr))
	kvLane := ckf.LaneCount - 1
	natsLane := -1
	testenv.WaitFor(b, kvWait, "both lanes active", func() bool {
		l, ok := laneOf(s, "a")
		k, kok := laneOf(s, "a-kv")
		natsLane = l.Lane
		return ok && kok && l.State == follow.PhaseActive && k.State == follow.PhaseActive
	})
	subj, err := wire.WorkerEventsSubject(domain, "a", 1)
	if err != nil {
		b.Fatal(err)
	}
	var viaNATS, viaKv []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		h := testenv.Chain(uint64(900_000+i), 1)
		msg := fmt.Sprintf(`{"worker_id":1,"event":{"event_id":%d,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":%d,"tokens_hash":%d}]}}}}`, i+1, uint64(h[0]), uint64(h[0]))
		start := time.Now()
		if _, err := js.Publish(context.Background(), subj, []byte(msg)); err != nil {
			b.Fatal(err)
		}
		var tn, tk time.Duration
		for deadline := start.Add(kvWait); tn == 0 || tk == 0; {
			if time.Now().After(deadline) {
				b.Fatalf("event %d not visible (nats %s, kvrelay %s)", i, tn, tk)
			}
			resp, err := s.Match(api.Query{Locals: h})
			if err != nil {
				continue
			}
			now := time.Since(start)
			if d, ok := testenv.LaneDepth(resp, natsLane); ok && d.Depth == 1 && tn == 0 {
				tn = now
			}
			if d, ok := testenv.LaneDepth(resp, kvLane); ok && d.Depth == 1 && tk == 0 {
				tk = now
			}
			time.Sleep(20 * time.Microsecond)
		}
		viaNATS, viaKv = append(viaNATS, tn), append(viaKv, tk)
	}
	b.StopTimer()
	p := func(d []time.Duration, q float64) float64 {
		slices.Sort(d)
		return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds())
	}
	n50, n99, k50, k99 := p(viaNATS, .50), p(viaNATS, .99), p(viaKv, .50), p(viaKv, .99)
	b.ReportMetric(n50, "nats-p50-µs")
	b.ReportMetric(n99, "nats-p99-µs")
	b.ReportMetric(k50, "kvrelay-p50-µs")
	b.ReportMetric(k99, "kvrelay-p99-µs")
	b.ReportMetric(k50/max(n50, 1), "kvrelay/nats-p50")
	b.ReportMetric(k99/max(n99, 1), "kvrelay/nats-p99")
}
