package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/internal/engine"
	"github.com/ckfrelay/ckfrelay/internal/engine/enginetest"
	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

const (
	domain    = "bt"
	dc        = "dc1"
	blockSize = 4
	settle    = 60 * time.Second
)

func logger(t testing.TB, proc string) zerolog.Logger {
	if os.Getenv("CKF_TEST_LOG") != "" {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel).With().Str("proc", proc).Logger()
	}
	return zerolog.Nop()
}

// stack is an embedded NATS server with a real relay and indexer.
type stack struct {
	srv *testenv.Server
	js  jetstream.JetStream
	ix  *indexer.Service
}

func newStack(t *testing.T) *stack {
	t.Helper()
	srv := testenv.StartServer(t)
	nc := srv.Connect(t)
	js := srv.JetStream(t)
	rc := relay.DefaultConfig(domain, dc)
	rc.Instance = "relay-1"
	rc.CKF = ckf.NewConfig(1 << 14)
	rc.PublishInterval = 2 * time.Millisecond
	rc.HeartbeatInterval = 25 * time.Millisecond
	rc.SnapshotInterval = time.Hour
	rc.LeaseTTL = 3 * time.Second
	rc.Streams = streams.Options{Memory: true}
	rc.Logger = logger(t, "relay")
	rc.Metrics = prometheus.NewRegistry()
	r, err := relay.New(nc, js, rc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Background(t, r.Run)
	pc := consumer.DefaultPoolConfig()
	pc.MaxDirtyToAppliedAge = time.Minute
	ix, err := indexer.New(nc, js, follow.Config{
		Domain:              domain,
		Pool:                pc,
		Logger:              logger(t, "indexer"),
		BootstrapBackoffMin: 10 * time.Millisecond,
		BootstrapBackoffMax: 200 * time.Millisecond,
		StatePollInterval:   20 * time.Millisecond,
		Streams:             streams.Options{Memory: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Background(t, ix.Run)
	return &stack{srv: srv, js: js, ix: ix}
}

// depth asks the indexer a tokens query, as an HTTP client would, and
// returns the depth of this DC's lane.
func (s *stack) depth(t testing.TB, tokens []uint32, lora string) (int, error) {
	req := map[string]any{"tokens": tokens, "block_size": blockSize}
	if lora != "" {
		req["lora_name"] = lora
	}
	body, _ := json.Marshal(req)
	q, err := api.DecodeMatchRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.ix.Match(q)
	if err != nil {
		return 0, err
	}
	for _, l := range resp.Lanes {
		if l.DC == dc {
			return int(l.Depth), nil
		}
	}
	return 0, errors.New("no lane for the DC yet")
}

// waitDepth waits until the query answers want.
func (s *stack) waitDepth(t testing.TB, tokens []uint32, lora string, want int) {
	t.Helper()
	testenv.Eventually(t, settle, 10*time.Millisecond, func() error {
		got, err := s.depth(t, tokens, lora)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("depth %d, want %d", got, want)
		}
		return nil
	})
}

func (s *stack) mustDepth(t testing.TB, tokens []uint32, lora string, want int) {
	t.Helper()
	got, err := s.depth(t, tokens, lora)
	if err != nil || got != want {
		t.Fatalf("depth %d (err %v), want %d", got, err, want)
	}
}

// runningBridge is a bridge with its own NATS connection, so a test can
// kill it (connection dropped, no final checkpoint) or stop it.
type runningBridge struct {
	*bridge.Bridge
	nc     *nats.Conn
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func (s *stack) startBridge(t *testing.T, engines []bridge.EngineSpec, mod func(*bridge.Config)) *runningBridge {
	t.Helper()
	nc := s.srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := bridge.Config{
		Domain: domain, DC: dc, Engines: engines, BlockSize: blockSize,
		Streams:      streams.Options{Memory: true},
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		ReplayIdleTimeout:  2 * time.Second,
		CheckpointInterval: 20 * time.Millisecond,
		Logger:             logger(t, "bridge"),
		Metrics:            reg,
	}
	if mod != nil {
		mod(&cfg)
	}
	b, err := bridge.New(cfg, js)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rb := &runningBridge{Bridge: b, nc: nc, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { rb.done <- b.Run(ctx) }()
	t.Cleanup(func() { rb.stop(t) })
	return rb
}

func (rb *runningBridge) stop(t testing.TB) {
	rb.cancel()
	select {
	case err, ok := <-rb.done:
		if ok && err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("bridge: %v", err)
		}
		if ok {
			close(rb.done)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("bridge did not stop; goroutines:\n%s", testenv.Goroutines())
	}
}

// kill drops the bridge's NATS connection first, so nothing in flight is
// acknowledged and no final resume point is written, then stops it.
func (rb *runningBridge) kill(t testing.TB) {
	rb.nc.Close()
	rb.stop(t)
}

// engine is engine i's status (zero until the bridge runs).
func (rb *runningBridge) engine(i int) bridge.EngineStatus {
	st := rb.Status()
	if i >= len(st.Engines) {
		return bridge.EngineStatus{}
	}
	return st.Engines[i]
}

// waitConnected waits until the bridge reports every engine connected
// and every engine sees the subscription (so no live batch is lost to
// ZMQ's slow-joiner window).
func (rb *runningBridge) waitConnected(t testing.TB, engines ...*enginetest.Engine) {
	t.Helper()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), settle)
		defer cancel()
		for _, e := range engines {
			if err := e.WaitSubscribed(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}()
	testenv.Eventually(t, settle, 5*time.Millisecond, func() error {
		st := rb.Status()
		if !st.Running {
			return errors.New("not running")
		}
		for _, e := range st.Engines {
			if !e.Connected {
				return fmt.Errorf("engine %s not connected", e.Endpoint)
			}
		}
		return nil
	})
}

func startEngine(t *testing.T, cfg enginetest.Config) *enginetest.Engine {
	t.Helper()
	e, err := enginetest.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func specFor(worker uint64, e *enginetest.Engine) bridge.EngineSpec {
	return bridge.EngineSpec{WorkerID: worker, Pub: e.PubEndpoint(), Replay: e.ReplayEndpoint()}
}

// request is one prompt's tokens and the engine hashes of its blocks.
type request struct {
	tokens []uint32
	hashes []uint64
}

func newRequest(rng *rand.Rand, blocks int) request {
	r := request{tokens: make([]uint32, blocks*blockSize), hashes: make([]uint64, blocks)}
	for i := range r.tokens {
		r.tokens[i] = rng.Uint32N(50000)
	}
	for i := range r.hashes {
		r.hashes[i] = rng.Uint64()
	}
	return r
}

// extend returns a request sharing the first `shared` blocks of r.
func (r request) extend(rng *rand.Rand, shared, more int) request {
	n := newRequest(rng, more)
	return request{
		tokens: append(append([]uint32(nil), r.tokens[:shared*blockSize]...), n.tokens...),
		hashes: append(append([]uint64(nil), r.hashes[:shared]...), n.hashes...),
	}
}

// store is the BlockStored of blocks [from, to) of r.
func (r request) store(from, to int) engine.Event {
	ev := engine.Event{Kind: engine.KindStored, BlockHashes: r.hashes[from:to],
		TokenIDs: r.tokens[from*blockSize : to*blockSize], BlockSize: blockSize, Medium: []byte("GPU")}
	if from > 0 {
		ev.HasParent, ev.Parent = true, r.hashes[from-1]
	}
	return ev
}

func publish(t testing.TB, e *enginetest.Engine, evs ...engine.Event) uint64 {
	t.Helper()
	seq, err := e.Publish(evs...)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// metric reads one series (name with its labels) from reg; absent series
// read 0.
func metric(reg prometheus.Gatherer, series string) float64 {
	v, _, err := promtest.Value(reg, series)
	if err != nil {
		panic(err)
	}
	return v
}
