package follow

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

const (
	testDomain   = "test"
	testBlocks   = 4096
	waitTotal    = 20 * time.Second
	waitInterval = 10 * time.Millisecond
)

// testConfig is a Config for tests: memory storage, fast backoff and a lag
// bound far above any scheduling delay of a loaded, race-enabled test
// machine, so only the injected faults retire lanes.
func testConfig(t testing.TB) Config {
	pc := consumer.DefaultPoolConfig()
	pc.MaxDirtyToAppliedAge = time.Minute
	logger := zerolog.Nop()
	if os.Getenv("CKF_TEST_LOG") != "" {
		logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	return Config{
		Domain:              testDomain,
		Pool:                pc,
		Logger:              logger,
		BootstrapBackoffMin: 10 * time.Millisecond,
		BootstrapBackoffMax: 100 * time.Millisecond,
		StatePollInterval:   20 * time.Millisecond,
		Streams:             streams.Options{Memory: true},
		LeaseOptions:        []lease.Option{lease.WithMemoryStorage()},
	}
}

// runningService is a Service running in the background; stop ends it and
// waits for Run to return.
type runningService struct {
	*Service
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// startService runs a Service; setup functions see it before Run (to set
// test hooks).
func startService(t testing.TB, nc *nats.Conn, js jetstream.JetStream, cfg Config, setup ...func(*Service)) *runningService {
	t.Helper()
	s, err := New(nc, js, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, f := range setup {
		f(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rs := &runningService{Service: s, cancel: cancel, done: make(chan error, 1)}
	go func() { rs.done <- s.Run(ctx) }()
	t.Cleanup(func() { rs.stop(t) })
	return rs
}

// stop cancels Run and waits for it; idempotent.
func (rs *runningService) stop(t testing.TB) {
	t.Helper()
	rs.once.Do(func() {
		rs.cancel()
		select {
		case err := <-rs.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitTotal):
			t.Fatalf("Run did not return after cancel; goroutines:\n%s", testenv.Goroutines())
		}
	})
}

// env is one server plus the connections a test needs.
type env struct {
	srv *testenv.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := testenv.StartServer(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, nc: nc, js: js}
}

// started relay: registered, holding an epoch, initial snapshot published.
func (e *env) relay(t testing.TB, dc string) *fakeRelay {
	t.Helper()
	r := newFakeRelay(t, e.js, testDomain, dc, testBlocks)
	r.register()
	r.takeEpoch()
	return r
}

// workload is a set of query chains with a pool's exact depths.
type workload struct {
	chains [][]ckf.LocalBlockHash
}

func newWorkload(seed uint64, n, length int) *workload {
	w := &workload{}
	for i := range n {
		w.chains = append(w.chains, chain(seed*1000+uint64(i), length))
	}
	return w
}

// checkDepths compares every chain's Match depth on lane with the relay's
// exact depth.
func checkDepths(s *Service, r *fakeRelay, w *workload) error {
	for i, c := range w.chains {
		resp, err := s.Match(api.Query{Locals: c})
		if err != nil {
			return fmt.Errorf("chain %d: %w", i, err)
		}
		want := r.exactDepth(c)
		got, ok := laneDepth(resp, r.lane)
		if !ok {
			return fmt.Errorf("chain %d: lane %d (%s) not in the answer (ready %016b)", i, r.lane, r.dc, resp.ReadyLanes)
		}
		if got.DC != r.dc || got.Pool != r.pool.String() {
			return fmt.Errorf("chain %d: lane %d names dc %q pool %q, want %q %q", i, r.lane, got.DC, got.Pool, r.dc, r.pool)
		}
		if got.Depth != want {
			return fmt.Errorf("chain %d: lane %d depth %d, exact %d", i, r.lane, got.Depth, want)
		}
	}
	return nil
}

func laneDepth(resp api.MatchResponse, lane int) (api.LaneDepth, bool) {
	return testenv.LaneDepth(resp, lane)
}

func statusOf(s *Service, lane int) (api.LaneStatus, error) {
	for _, l := range s.Lanes() {
		if l.Lane == lane {
			return l, nil
		}
	}
	return api.LaneStatus{}, fmt.Errorf("lane %d not reported", lane)
}

// waitInstalled waits until lane has installed (or admitted) seq.
func waitInstalled(t testing.TB, s *Service, lane int, epoch, seq uint64) {
	t.Helper()
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		st, err := statusOf(s, lane)
		if err != nil {
			return err
		}
		if st.State != PhaseActive || st.Epoch != epoch || st.InstalledSequence < seq {
			return fmt.Errorf("lane %d: %+v, want active epoch %d sequence >= %d", lane, st, epoch, seq)
		}
		// The installed sequence moves when a delta is admitted; its
		// worker applies it to the table afterwards.
		if p := s.currentPool(); p != nil {
			if ls, ok := p.LaneState(lane); ok && ls.OutstandingDeltas != 0 {
				return fmt.Errorf("lane %d: %d deltas admitted, not applied yet", lane, ls.OutstandingDeltas)
			}
		}
		return nil
	})
}

func isReady(s *Service, lane int) bool {
	p := s.currentPool()
	return p != nil && p.Indexer().ReadyLanes()&(1<<lane) != 0
}

func itoa(i int) string { return strconv.Itoa(i) }

// metricCount sums the series of metric name on lane (whatever its dc)
// that carry the extra label pairs kv.
func metricCount(g prometheus.Gatherer, name, lane string, kv ...string) uint64 {
	spec := name + `{lane="` + lane + `"`
	for i := 0; i+1 < len(kv); i += 2 {
		spec += `,` + kv[i] + `="` + kv[i+1] + `"`
	}
	return promtest.Count(g, spec+"}")
}
