package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

const (
	domain         = "e2e"
	expectedBlocks = 1 << 15
	settle         = 60 * time.Second
)

func logger(t testing.TB) zerolog.Logger {
	if os.Getenv("CKF_TEST_LOG") != "" {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	return zerolog.Nop()
}

// running is a background Run with an idempotent stop.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (r *running) stop(t testing.TB) {
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("did not stop within 15s; goroutines:\n%s", testenv.Goroutines())
		}
	})
}

func background(t testing.TB, run func(ctx context.Context) error) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

type relayProc struct {
	*relay.Relay
	*running
	reg *prometheus.Registry
}

func relayConfig(t testing.TB, dc, instance string, tp trace.TracerProvider) relay.Config {
	c := relay.DefaultConfig(domain, dc)
	c.Instance = instance
	c.CKF = ckf.NewConfig(expectedBlocks)
	c.PublishInterval = 2 * time.Millisecond
	c.HeartbeatInterval = 25 * time.Millisecond
	c.SnapshotInterval = time.Hour
	// Long enough that a starved -race run never loses a lease by accident;
	// stopping a relay releases its lease at once.
	c.LeaseTTL = 3 * time.Second
	c.Streams = streams.Options{Memory: true}
	c.Logger = logger(t).With().Str("proc", instance).Logger()
	c.Tracer = tp
	return c
}

func startRelay(t testing.TB, nc *nats.Conn, js jetstream.JetStream, cfg relay.Config) *relayProc {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	r, err := relay.New(nc, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &relayProc{Relay: r, running: background(t, r.Run), reg: reg}
}

type indexerProc struct {
	*indexer.Service
	*running
}

func indexerConfig(t testing.TB, tp trace.TracerProvider) follow.Config {
	pc := consumer.DefaultPoolConfig()
	// Far above any scheduling delay of a loaded -race run: only injected
	// faults may retire lanes here.
	pc.MaxDirtyToAppliedAge = time.Minute
	return follow.Config{
		Domain:              domain,
		Pool:                pc,
		Logger:              logger(t).With().Str("proc", "indexer").Logger(),
		Tracer:              tp,
		BootstrapBackoffMin: 10 * time.Millisecond,
		BootstrapBackoffMax: 200 * time.Millisecond,
		StatePollInterval:   20 * time.Millisecond,
		Streams:             streams.Options{Memory: true},
		// Forty of the relays' 25 ms heartbeats.
		LaneStaleAfter: laneStaleAfter,
	}
}

// laneStaleAfter is the indexer's staleness bound in these tests.
const laneStaleAfter = time.Second

func startIndexer(t testing.TB, nc *nats.Conn, js jetstream.JetStream, cfg follow.Config) *indexerProc {
	t.Helper()
	s, err := indexer.New(nc, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &indexerProc{Service: s, running: background(t, s.Run)}
}

// hostProc is the global indexer as the binary runs it, one domain or
// many: the pkg/domains host, each domain's service with its NATS endpoint
// attached. pkg/client's Mirror runs the same host.
type hostProc struct {
	*domains.Registry
	*running
}

// startIndexerHost runs cfg's domain in the host; setup sees the domain's
// service before it runs (a test clock, say).
func startIndexerHost(t testing.TB, nc *nats.Conn, js jetstream.JetStream, cfg follow.Config, setup ...func(*follow.Service)) *hostProc {
	t.Helper()
	cfg.Attach = indexer.Attach
	reg, err := domains.New(nc, js, domains.Config{Base: cfg, Domains: []string{cfg.Domain}, Logger: cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	svc, ok := reg.Service(cfg.Domain)
	if !ok {
		t.Fatalf("the host follows no domain %q", cfg.Domain)
	}
	for _, f := range setup {
		f(svc)
	}
	return &hostProc{Registry: reg, running: background(t, reg.Run)}
}

// answerer is what the workload checks answers against: an indexer's
// service or its host.
type answerer interface {
	Match(q api.Query) (api.MatchResponse, error)
	Lanes() []api.LaneStatus
}

// workload is a replayed trace over named DCs with exact ground truth.
type workload struct {
	dcs   []string
	rp    *replay.Replayer
	steps []replay.Step
}

func newWorkload(t testing.TB, dcs []string, requests int, seed uint64) *workload {
	t.Helper()
	reqs, err := replay.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	rp, err := replay.New(replay.Config{DCs: dcs, WorkersPerDC: 3, CapacityBlocks: 384, Duplication: 1, Affinity: 0.7, Seed: seed}, reqs[:requests])
	if err != nil {
		t.Fatal(err)
	}
	return &workload{dcs: dcs, rp: rp}
}

// publish replays n more requests and publishes their events.
func (w *workload) publish(t testing.TB, js jetstream.JetStream, n int) {
	t.Helper()
	w.publishPerDC(t, func(string) jetstream.JetStream { return js }, n)
}

// publishPerDC is publish with each DC's events sent to that DC's own
// JetStream (its leaf server's domain), as workers do in a multi-DC site.
func (w *workload) publishPerDC(t testing.TB, jsOf func(dc string) jetstream.JetStream, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var futures []jetstream.PubAckFuture
	// A DC's first message goes out synchronously, retried until its input
	// stream exists (the relays create it in the background, slowly under
	// load). An async publish that finds no stream is retried later by the
	// client, behind messages published meanwhile: the stream would then
	// hold the events in another order than the ground truth replayed them,
	// and a removal overtaken by an earlier store leaves a lane below its
	// "exact" depth for good.
	streamUp := map[string]bool{}
	for range n {
		st, ok := w.rp.Next()
		if !ok {
			break
		}
		w.steps = append(w.steps, st)
		if len(st.Events) == 0 {
			continue
		}
		b, err := json.Marshal(st.Events)
		if err != nil {
			t.Fatal(err)
		}
		dc := w.dcs[st.DC]
		subj, _ := wire.WorkerEventsSubject(domain, dc, st.Worker)
		if !streamUp[dc] {
			publishWhenStored(t, ctx, jsOf(dc), subj, b)
			streamUp[dc] = true
			continue
		}
		f, err := jsOf(dc).PublishAsync(subj, b)
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal("no publish ack")
		}
	}
}

// publishWhenStored publishes one message synchronously, again while no
// stream answers (nothing was stored, so a retry cannot duplicate it).
func publishWhenStored(t testing.TB, ctx context.Context, js jetstream.JetStream, subj string, data []byte) {
	t.Helper()
	for {
		_, err := js.Publish(ctx, subj, data)
		if err == nil {
			return
		}
		if !errors.Is(err, jetstream.ErrNoStreamResponse) || ctx.Err() != nil {
			t.Fatalf("publish %s: %v", subj, err)
		}
	}
}

// check queries every replayed request and compares each lane's depth with
// the exact depth its DC holds. It returns an error while any lane is below
// the truth (a false negative) or missing, and the overestimate count.
func (w *workload) check(ix answerer, dcs ...string) (over int, err error) {
	if len(dcs) == 0 {
		dcs = w.dcs
	}
	under, missing := 0, 0
	for _, st := range w.steps {
		resp, err := ix.Match(api.Query{Locals: st.Locals})
		if err != nil {
			return 0, err
		}
		seqs := ckf.SequenceHashes(nil, st.Locals)
		for _, dc := range dcs {
			idx := indexOf(w.dcs, dc)
			truth := w.rp.Depth(idx, seqs)
			found := false
			for _, l := range resp.Lanes {
				if l.DC != dc {
					continue
				}
				found = true
				if int(l.Depth) < truth {
					under++
				} else if int(l.Depth) > truth {
					over++
				}
			}
			if !found {
				missing++
			}
		}
	}
	if under > 0 || missing > 0 {
		return over, fmt.Errorf("%d lane answers below the exact depth, %d lanes missing", under, missing)
	}
	return over, nil
}

// laneDepths is ix's answer for dc on each step published so far (-1 where
// dc's lane is not in the answer).
func (w *workload) laneDepths(t testing.TB, ix answerer, dc string) []int {
	t.Helper()
	out := make([]int, len(w.steps))
	for i, st := range w.steps {
		resp, err := ix.Match(api.Query{Locals: st.Locals})
		if err != nil {
			t.Fatalf("match step %d: %v", i, err)
		}
		out[i] = -1
		for _, l := range resp.Lanes {
			if l.DC == dc {
				out[i] = int(l.Depth)
			}
		}
	}
	return out
}

// withoutAges is testenv.WithoutAges.
func withoutAges(r api.MatchResponse) api.MatchResponse { return testenv.WithoutAges(r) }

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// converge waits until check passes and returns the overestimates.
func (w *workload) converge(t testing.TB, ix answerer, dcs ...string) int {
	t.Helper()
	return w.convergeWithin(t, ix, settle, dcs...)
}

// convergeWithin is converge with its own bound.
func (w *workload) convergeWithin(t testing.TB, ix answerer, within time.Duration, dcs ...string) int {
	t.Helper()
	var over int
	testenv.Eventually(t, within, 20*time.Millisecond, func() error {
		var err error
		over, err = w.check(ix, dcs...)
		return err
	})
	return over
}

func laneOf(ix answerer, dc string) (api.LaneStatus, bool) {
	for _, l := range ix.Lanes() {
		if l.DC == dc {
			return l, true
		}
	}
	return api.LaneStatus{}, false
}
