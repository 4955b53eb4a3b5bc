package indexer

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// kvSpec is the descriptor metadata the test relays publish.
var kvSpec = server.PoolSpec{Model: "llama", Namespace: "prod", Component: "backend", Endpoint: "generate", BlockSize: 64}

// kvRelayConfig is a fast relay of dc that also publishes over kvrelay.
func kvRelayConfig(dc, instance string, expected uint64) relay.Config {
	c := relay.DefaultConfig(testDomain, dc)
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
func startKvRelay(t testing.TB, e *env, cfg relay.Config, addr string) *runningRelay {
	t.Helper()
	nc := e.srv.Connect(t)
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
	testenv.WaitFor(t, waitTotal, "listen on "+addr, func() bool {
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
		case <-time.After(waitTotal):
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
		w.chains = append(w.chains, chain(seed*1000+uint64(i), 6))
		w.depth = append(w.depth, i%7)
	}
	return w
}

func (w *kvWorkload) publish(t testing.TB, js jetstream.JetStream, dc string) {
	t.Helper()
	subj, err := wire.WorkerEventsSubject(testDomain, dc, 1)
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
		if _, err := js.Publish(testCtx(t), subj, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
}

// exact reports the first chain whose depth on lane is not the exact one.
func (w *kvWorkload) exact(s *Service, lane int) error {
	for i, c := range w.chains {
		resp, err := s.Match(api.Query{Locals: c})
		if err != nil {
			return err
		}
		d, ok := laneDepth(resp, lane)
		if !ok || int(d.Depth) != w.depth[i] {
			return fmt.Errorf("chain %d: lane %d depth %d (present %t), exact %d", i, lane, d.Depth, ok, w.depth[i])
		}
	}
	return nil
}

func kvIndexerConfig(t testing.TB, addr string) Config {
	cfg := testConfig(t)
	cfg.KvRelay = KvRelayConfig{Sources: []KvRelaySource{{Name: "a-kv", Addr: addr}}, Model: "llama", BlockSize: 64, AcceptLegacy: true,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond, FrameTimeout: 3 * time.Second}
	return cfg
}

func laneByName(s *Service, name string) (api.LaneStatus, bool) {
	for _, l := range s.Lanes() {
		if l.DC == name {
			return l, true
		}
	}
	return api.LaneStatus{}, false
}

// The round trip: a real relay serves its pool over kvrelay, the indexer
// follows it as lane a-kv next to the same relay's NATS lane a, and both
// answer the exact depths with identical lanes; then the relay is killed,
// the standby takes over, and the kvrelay lane follows the new producer
// generation and settles exact again.
func TestKvRelayLaneRoundTripAndTakeover(t *testing.T) {
	e := newEnv(t)
	ra := startKvRelay(t, e, kvRelayConfig("a", "relay-a", 1<<12), "127.0.0.1:0")
	testenv.WaitFor(t, waitTotal, "relay active", func() bool { return ra.r.Status().State == relay.StateActive })
	standbyCfg := kvRelayConfig("a", "relay-a-standby", 1<<12)
	rb, err := relay.New(e.nc, e.js, standbyCfg)
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(context.Background())
	bdone := make(chan error, 1)
	go func() { bdone <- rb.Run(bctx) }()
	t.Cleanup(func() { bcancel(); <-bdone })

	s := startService(t, e.nc, e.js, kvIndexerConfig(t, ra.addr))
	w := newKvWorkload(1, 40)
	w.publish(t, e.js, "a")
	kvLaneIdx := ckf.LaneCount - 1
	var natsLane int
	testenv.WaitFor(t, waitTotal, "both lanes exact", func() bool {
		l, ok := laneByName(s.Service, "a")
		if !ok {
			return false
		}
		natsLane = l.Lane
		return w.exact(s.Service, l.Lane) == nil && w.exact(s.Service, kvLaneIdx) == nil
	})
	sameLanes(t, s.Service, natsLane, kvLaneIdx)
	kl, _ := laneByName(s.Service, "a-kv")
	if kl.Source != SourceKvRelay || kl.Address != ra.addr || kl.Producer == "" || kl.LastFrameAgeMs == nil || kl.State != PhaseActive || kl.Lane != kvLaneIdx {
		t.Fatalf("kvrelay lane row %+v", kl)
	}
	before := kl.Producer
	if nl, _ := laneByName(s.Service, "a"); nl.Source != SourceNATS {
		t.Fatalf("nats lane row %+v", nl)
	}

	// Kill the active relay; once its lease lapses the standby takes it
	// and serves on the same address (a VIP keeps it).
	addr := ra.addr
	ra.kill(t)
	testenv.WaitFor(t, waitTotal, "kvrelay lane invalidated", func() bool {
		return s.currentPool().Indexer().ReadyLanes()&(1<<kvLaneIdx) == 0
	})
	testenv.WaitFor(t, waitTotal, "standby active", func() bool { return rb.Status().State == relay.StateActive })
	rrb := &runningRelay{r: rb}
	rrb.serve(t, addr)
	t.Cleanup(func() { rrb.kill(t) })
	w2 := newKvWorkload(2, 40)
	w2.publish(t, e.js, "a")
	testenv.WaitFor(t, waitTotal, "exact again under the new generation", func() bool {
		l, ok := laneByName(s.Service, "a-kv")
		return ok && l.State == PhaseActive && l.Producer != before &&
			w.exact(s.Service, kvLaneIdx) == nil && w2.exact(s.Service, kvLaneIdx) == nil && w2.exact(s.Service, natsLane) == nil
	})
	sameLanes(t, s.Service, natsLane, kvLaneIdx)
	if n := s.kvMetrics.Faults("a-kv", client.ReasonUnavailable) + s.kvMetrics.Faults("a-kv", client.ReasonStreamEnd) +
		s.kvMetrics.Faults("a-kv", client.ReasonProducerChanged); n < 1 {
		t.Fatalf("the kill was not counted")
	}
}

// sameLanes checks two lanes hold the same words (once both settle).
func sameLanes(t *testing.T, s *Service, a, b int) {
	t.Helper()
	testenv.WaitFor(t, waitTotal, "identical lanes", func() bool {
		ix := s.currentPool().Indexer()
		return slices.Equal(ix.LaneWords(a, nil), ix.LaneWords(b, nil))
	})
}

// A pool of another CKF format than the table's is refused, counted, and
// /v1/lanes says why; the lane never becomes ready.
func TestKvRelayFormatMismatchIsRefusedVisibly(t *testing.T) {
	e := newEnv(t)
	ra := startKvRelay(t, e, kvRelayConfig("a", "relay-a", 1<<12), "127.0.0.1:0")
	testenv.WaitFor(t, waitTotal, "relay active", func() bool { return ra.r.Status().State == relay.StateActive })
	cfg := kvIndexerConfig(t, ra.addr)
	f, err := ckf.NewConfig(1 << 16).Format() // not the relay's bucket count
	if err != nil {
		t.Fatal(err)
	}
	cfg.Format = &f
	s := startService(t, e.nc, e.js, cfg)
	h := queryapi.Handler(s, s.APIMetrics(), s.Metrics())
	var row api.LaneStatus
	testenv.WaitFor(t, waitTotal, "refused in /v1/lanes", func() bool {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/lanes", nil))
		var body struct{ Lanes []api.LaneStatus }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v", rec.Body, err)
		}
		for _, r := range body.Lanes {
			if r.DC == "a-kv" {
				row = r
			}
		}
		return row.State == PhaseRefused && strings.Contains(row.LastFault, "differs from the table's") &&
			s.kvMetrics.Faults("a-kv", client.ReasonRefused) >= 1
	})
	if row.Source != SourceKvRelay || row.Address != ra.addr {
		t.Fatalf("row %+v", row)
	}
	if p := s.currentPool(); p != nil && p.Indexer().ReadyLanes()&(1<<row.Lane) != 0 {
		t.Fatal("refused lane ready")
	}
	if v, ok, _ := promtest.Value(s.Metrics(), MetricFaults+`{dc="a-kv",kind="wrong_format"}`); !ok || v < 1 {
		t.Fatalf("wrong_format not counted")
	}
}

// A lane map entry of the name a kvrelay source holds is refused (and so
// is one landing on its lane); the kvrelay lane keeps its place.
func TestKvRelayNameCollisionWithANATSLane(t *testing.T) {
	e := newEnv(t)
	r := newFakeRelay(t, e.js, testDomain, "a-kv", testBlocks)
	r.register()
	r.takeEpoch()
	s := startService(t, e.nc, e.js, kvIndexerConfig(t, "127.0.0.1:1"))
	testenv.WaitFor(t, waitTotal, "collision counted", func() bool {
		v, ok, _ := promtest.Value(s.Metrics(), MetricLaneMapRejected+`{entry="kvrelay"}`)
		return ok && v >= 1
	})
	rows := s.Lanes()
	if len(rows) != 1 || rows[0].Source != SourceKvRelay || rows[0].Lane != ckf.LaneCount-1 {
		t.Fatalf("lanes %+v", rows)
	}
}
