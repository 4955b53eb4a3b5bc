package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/natsembed"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/ctxwait"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// E2EConfig configures an end-to-end environment: one embedded nats-server
// (memory streams) carrying relays for DCs and one global indexer, like
// the e2e harness.
type E2EConfig struct {
	// Domain is the indexer domain (default "bench").
	Domain string
	// DCs names the data centers (default dc-a, dc-b).
	DCs []string
	// ExpectedBlocks sizes every relay's CKF (default 1<<15).
	ExpectedBlocks uint64
	// PublishInterval, when set, overrides the relays' shipped delta
	// cadence (relay.DefaultConfig, --publish-interval); the benchmark
	// measures the default.
	PublishInterval time.Duration
	// Seed makes the replayed routing reproducible.
	Seed uint64
	// StoreDir is the JetStream store; empty uses a fresh temporary
	// directory removed by Close.
	StoreDir string
	// Logger receives relay and indexer logs (zero value: disabled).
	Logger zerolog.Logger
	// Timeout bounds every wait for the pipeline (default 60s).
	Timeout time.Duration
	// Generator, when set, is the command line of an external load
	// generator (RunGenerator's process; the server's URL is appended):
	// the throughput pairs then publish from it, so this process's CPU
	// time holds the pipeline alone. Empty: publish in-process.
	Generator []string
}

func (c E2EConfig) withDefaults() E2EConfig {
	if c.Domain == "" {
		c.Domain = "bench"
	}
	if len(c.DCs) == 0 {
		c.DCs = []string{"dc-a", "dc-b"}
	}
	if c.ExpectedBlocks == 0 {
		c.ExpectedBlocks = 1 << 15
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	return c
}

// Names of the raw JetStream baseline's stream and subjects.
const (
	rawStream     = "BENCH_RAW"
	rawPrefix     = "benchraw"
	rawLatSubject = rawPrefix + ".latency"
	// probeWorker is the worker id of the latency probes' events; replayed
	// workers are numbered from 1000 (replay.WorkerID).
	probeWorker = 900
	probeBlocks = 4
)

// Env is a running embedded server and, once StartPipeline ran, the relays
// and the indexer. Methods must not be called concurrently.
type Env struct {
	cfg    E2EConfig
	dir    string
	ownDir bool
	srv    *server.Server
	// pub is the load generator's connection; relays, the indexer and the
	// raw consumer each get their own, as separate processes would.
	pub   *nats.Conn
	pubJS jetstream.JetStream
	gen   *extGenerator // nil: the throughput pairs publish in-process
	conns []*nats.Conn

	raw jetstream.Stream

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	runErr  error
	relays  []*relay.Relay
	ix      *indexer.Service
	rp      *replay.Replayer
	probeID uint64
}

// NewEnv starts the embedded server and connects the load generator.
func NewEnv(cfg E2EConfig) (*Env, error) {
	cfg = cfg.withDefaults()
	e := &Env{cfg: cfg, dir: cfg.StoreDir}
	if e.dir == "" {
		dir, err := os.MkdirTemp("", "ckf-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: store dir: %w", err)
		}
		e.dir, e.ownDir = dir, true
	}
	srv, err := natsembed.RunEmbedded(natsembed.EmbeddedOptions{Port: -1, StoreDir: e.dir, ReadyTimeout: 20 * time.Second})
	if err != nil {
		e.removeDir()
		return nil, err
	}
	e.srv = srv
	if len(cfg.Generator) > 0 {
		if e.gen, err = startGenerator(cfg.Generator, srv.ClientURL()); err != nil {
			e.Close()
			return nil, err
		}
	}
	if e.pub, err = e.connect("ckf-bench-publisher"); err != nil {
		e.Close()
		return nil, err
	}
	if e.pubJS, err = jetstream.New(e.pub, jetstream.WithPublishAsyncMaxPending(1024)); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Env) connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(e.srv.ClientURL(), nats.Name(name))
	if err != nil {
		return nil, fmt.Errorf("bench: connect %s: %w", name, err)
	}
	e.conns = append(e.conns, nc)
	return nc, nil
}

func (e *Env) removeDir() {
	if e.ownDir {
		_ = os.RemoveAll(e.dir)
	}
}

// Close stops the pipeline, the connections and the server, and returns
// the first error a relay or the indexer returned.
func (e *Env) Close() error {
	var err error
	if e.cancel != nil {
		e.cancel()
		done := make(chan struct{})
		go func() { e.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			err = errors.New("bench: pipeline did not stop within 15s")
		}
		e.cancel = nil
	}
	if e.gen != nil {
		if gerr := e.gen.close(); gerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: generator: %w", gerr))
		}
		e.gen = nil
	}
	for _, nc := range e.conns {
		nc.Close()
	}
	e.conns = nil
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		e.srv = nil
	}
	e.removeDir()
	return errors.Join(err, e.pipelineErr())
}

func (e *Env) pipelineErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runErr
}

func (e *Env) run(ctx context.Context, name string, fn func(context.Context) error) {
	e.wg.Go(func() {
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			e.mu.Lock()
			e.runErr = errors.Join(e.runErr, fmt.Errorf("bench: %s stopped: %w", name, err))
			e.mu.Unlock()
		}
	})
}

// StartPipeline starts one relay per DC and the indexer (configured like
// the e2e harness, with a 1ms publish interval by default) and waits until
// every relay is active and every lane is installed.
func (e *Env) StartPipeline(ctx context.Context) error {
	if e.cancel != nil {
		return errors.New("bench: pipeline already started")
	}
	rctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	streams := streams.Options{Memory: true}

	for _, dc := range e.cfg.DCs {
		c := relay.DefaultConfig(e.cfg.Domain, dc)
		c.Instance = "bench-relay-" + dc
		c.CKF = ckf.NewConfig(e.cfg.ExpectedBlocks)
		// A known capacity, so routes read real KV occupancy.
		c.KVCapacityBlocks = 4 * e.cfg.ExpectedBlocks
		// The shipped cadences (publish, heartbeat, snapshot, lease), so
		// the figures are the defaults' own.
		if e.cfg.PublishInterval > 0 {
			c.PublishInterval = e.cfg.PublishInterval
		}
		c.Streams = streams
		c.Logger = e.cfg.Logger.With().Str("proc", c.Instance).Logger()
		nc, err := e.connect(c.Instance)
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		r, err := relay.New(nc, js, c)
		if err != nil {
			return err
		}
		e.relays = append(e.relays, r)
		e.run(rctx, c.Instance, r.Run)
	}
	// The indexer starts once every relay published its first snapshot:
	// an indexer that finds a registered lane without a marker requests
	// snapshots, and repeated snapshots at one sequence reuse one object
	// name, which the relay's retention of two bodies then deletes.
	if err := e.waitFor(ctx, "relays active", func() bool {
		for _, r := range e.relays {
			if r.Status().State != relay.StateActive {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}
	pc := consumer.DefaultPoolConfig()
	// Far above any scheduling delay on a loaded machine: lag is measured,
	// not enforced, here.
	pc.MaxDirtyToAppliedAge = time.Minute
	nc, err := e.connect("ckf-bench-indexer")
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ix, err := indexer.New(nc, js, follow.Config{
		Domain:              e.cfg.Domain,
		Pool:                pc,
		Logger:              e.cfg.Logger.With().Str("proc", "indexer").Logger(),
		BootstrapBackoffMin: 10 * time.Millisecond,
		BootstrapBackoffMax: 200 * time.Millisecond,
		StatePollInterval:   20 * time.Millisecond,
		Streams:             streams,
	})
	if err != nil {
		return err
	}
	e.ix = ix
	e.run(rctx, "indexer", ix.Run)

	return e.waitFor(ctx, "relays active and lanes installed", func() bool {
		for i, r := range e.relays {
			st := r.Status()
			l, ok := e.lane(e.cfg.DCs[i])
			if st.State != relay.StateActive || !ok || l.State != follow.PhaseActive || l.Epoch != st.Epoch {
				return false
			}
		}
		return true
	})
}

// describe renders the relays' and lanes' state for a timeout error.
func (e *Env) describe() string {
	var sb strings.Builder
	for _, r := range e.relays {
		st := r.Status()
		fmt.Fprintf(&sb, "relay %s: %s epoch %d seq %d events %d; ", st.DC, st.State, st.Epoch, st.Sequence, st.Events)
	}
	if e.ix != nil {
		for _, l := range e.ix.Lanes() {
			fmt.Fprintf(&sb, "lane %d %s: %s epoch %d installed %d %s; ", l.Lane, l.DC, l.State, l.Epoch, l.InstalledSequence, l.LastFault)
		}
	}
	return strings.TrimSuffix(sb.String(), "; ")
}

func (e *Env) lane(dc string) (api.LaneStatus, bool) {
	for _, l := range e.ix.Lanes() {
		if l.DC == dc {
			return l, true
		}
	}
	return api.LaneStatus{}, false
}

// waitFor polls cond every 200µs until it holds, the pipeline fails, ctx
// ends or the configured timeout passes.
func (e *Env) waitFor(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(e.cfg.Timeout)
	for !cond() {
		if err := e.pipelineErr(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bench: waiting for %s: %w", what, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s not reached within %s (%s)", what, e.cfg.Timeout, e.describe())
		}
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}

// Batch is a slice of the replayed trace, encoded once so the pipeline and
// the raw baseline carry the same payloads.
type Batch struct {
	Msgs []BatchMsg
	// Events counts the router events over all messages; PerDC splits them.
	Events int
	PerDC  []int
	steps  []replay.Step
}

// BatchMsg is one worker message (a JSON array of router events).
type BatchMsg struct {
	Subject string
	Data    []byte
	DC      int
	Events  int
}

// Bytes is the total payload size.
func (b *Batch) Bytes() int {
	n := 0
	for _, m := range b.Msgs {
		n += len(m.Data)
	}
	return n
}

// NextBatch replays the next requests of the Mooncake trace (cycling
// through disjoint copies of it) over the configured DCs: 3 workers per
// DC, 384-block LRU caches, 70% prefix affinity, as the e2e tests do.
func (e *Env) NextBatch(requests int) (*Batch, error) {
	if e.rp == nil {
		reqs, err := replay.LoadEmbedded()
		if err != nil {
			return nil, err
		}
		rp, err := replay.New(replay.Config{DCs: e.cfg.DCs, WorkersPerDC: 3, CapacityBlocks: 384, Duplication: 1 << 10,
			Affinity: 0.7, Seed: e.cfg.Seed}, reqs)
		if err != nil {
			return nil, err
		}
		e.rp = rp
	}
	b := &Batch{PerDC: make([]int, len(e.cfg.DCs))}
	for range requests {
		st, ok := e.rp.Next()
		if !ok {
			return nil, errors.New("bench: replay exhausted")
		}
		b.steps = append(b.steps, st)
		if len(st.Events) == 0 {
			continue
		}
		data, err := json.Marshal(st.Events)
		if err != nil {
			return nil, err
		}
		subj, err := wire.WorkerEventsSubject(e.cfg.Domain, e.cfg.DCs[st.DC], st.Worker)
		if err != nil {
			return nil, err
		}
		b.Msgs = append(b.Msgs, BatchMsg{Subject: subj, Data: data, DC: st.DC, Events: len(st.Events)})
		b.Events += len(st.Events)
		b.PerDC[st.DC] += len(st.Events)
	}
	return b, nil
}

// Throughput is the outcome of one batch.
type Throughput struct {
	Events   int
	Messages int
	Bytes    int
	Elapsed  time.Duration
	// CPU is this process's CPU time over the timed part (set-up and
	// checks excluded).
	CPU time.Duration
	// LaneDeltas counts the deltas the relays published for the batch
	// (pipeline only): how many events one lane message carried.
	LaneDeltas int
	// GeneratorCPU is the external load generator's CPU time for the
	// batch (0 when it published in-process).
	GeneratorCPU time.Duration
}

// EventsPerSec is Events over Elapsed.
func (t Throughput) EventsPerSec() float64 {
	if t.Elapsed <= 0 {
		return 0
	}
	return float64(t.Events) / t.Elapsed.Seconds()
}

// prepare hands b to the external generator, if there is one, before
// the timed part of a run.
func (e *Env) prepare(b *Batch) error {
	if e.gen == nil {
		return nil
	}
	return e.gen.load(b)
}

// sendBatch publishes b (to the baseline's subjects when raw) and waits
// for every ack; it returns the external generator's CPU time (0 when the
// batch is published in-process).
func (e *Env) sendBatch(ctx context.Context, b *Batch, raw bool) (time.Duration, error) {
	if e.gen != nil {
		return e.gen.publish(raw)
	}
	subj := func(s string) string { return s }
	if raw {
		subj = rawSubject
	}
	return 0, publishBatch(ctx, e.pubJS, b.Msgs, subj, e.cfg.Timeout)
}

// publishAsync is PublishAsync that, when the 1024 outstanding
// publishes stall for longer than nats.go waits (a loaded machine), waits
// for the outstanding acks and tries again instead of failing the run.
func (e *Env) publishAsync(ctx context.Context, subj string, data []byte) (jetstream.PubAckFuture, error) {
	for {
		f, err := e.pubJS.PublishAsync(subj, data)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return f, err
		}
		select {
		case <-e.pubJS.PublishAsyncComplete():
		case <-time.After(e.cfg.Timeout):
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Events publishes b to the relays' input stream and measures the time
// until every event is applied by its relay and the indexer's lane has
// installed the relay's resulting sequence. It then checks, untimed, that
// no replayed request is answered below its exact depth.
func (e *Env) Events(ctx context.Context, b *Batch) (Throughput, error) {
	if e.ix == nil {
		return Throughput{}, errors.New("bench: pipeline not started")
	}
	base, baseSeq := make([]uint64, len(e.relays)), make([]uint64, len(e.relays))
	for i, r := range e.relays {
		st := r.Status()
		base[i], baseSeq[i] = st.Events, st.Sequence
	}
	if err := e.prepare(b); err != nil {
		return Throughput{}, err
	}
	start, cpu := time.Now(), processCPU()
	gcpu, err := e.sendBatch(ctx, b, false)
	if err != nil {
		return Throughput{}, err
	}
	targets := make([]relay.Status, len(e.relays))
	if err := e.waitFor(ctx, "relays applied the batch", func() bool {
		for i, r := range e.relays {
			st := r.Status()
			if st.Events-base[i] < uint64(b.PerDC[i]) {
				return false
			}
			targets[i] = st
		}
		return true
	}); err != nil {
		return Throughput{}, err
	}
	if err := e.waitFor(ctx, "indexer installed the relays' sequences", func() bool {
		for i, t := range targets {
			l, ok := e.lane(e.cfg.DCs[i])
			if !ok || l.State != follow.PhaseActive || l.Epoch < t.Epoch || (l.Epoch == t.Epoch && l.InstalledSequence < t.Sequence) {
				return false
			}
		}
		return true
	}); err != nil {
		return Throughput{}, err
	}
	res := Throughput{Events: b.Events, Messages: len(b.Msgs), Bytes: b.Bytes(), Elapsed: time.Since(start), CPU: processCPU() - cpu, GeneratorCPU: gcpu}
	for i, t := range targets {
		if t.Sequence >= baseSeq[i] { // one epoch throughout (a new epoch restarts at 0)
			res.LaneDeltas += int(t.Sequence - baseSeq[i])
		}
	}
	return res, e.verify(ctx, b)
}

// verify queries up to 256 of the batch's requests and fails if a DC's
// lane answers below the exact depth that DC holds (a false negative).
// Admitted deltas may still be in a worker's queue, so it retries.
func (e *Env) verify(ctx context.Context, b *Batch) error {
	stride := max(1, len(b.steps)/256)
	var last error
	err := e.waitFor(ctx, "no false negative", func() bool {
		last = nil
		for i := 0; i < len(b.steps); i += stride {
			st := b.steps[i]
			resp, err := e.ix.Match(api.Query{Locals: st.Locals})
			if err != nil {
				last = err
				return false
			}
			seqs := ckf.SequenceHashes(nil, st.Locals)
			for dc, name := range e.cfg.DCs {
				truth := e.rp.Depth(dc, seqs)
				found := false
				for _, l := range resp.Lanes {
					if l.DC == name {
						found = true
						if int(l.Depth) < truth {
							last = fmt.Errorf("request %d: %s answers %d, holds %d", st.Index, name, l.Depth, truth)
							return false
						}
					}
				}
				if !found {
					last = fmt.Errorf("request %d: no lane for %s", st.Index, name)
					return false
				}
			}
		}
		return true
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last: %w)", err, last)
	}
	return err
}

func rawSubject(s string) string { return rawPrefix + "." + s }

func (e *Env) rawStream(ctx context.Context) (jetstream.Stream, error) {
	if e.raw != nil {
		return e.raw, nil
	}
	s, err := e.pubJS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     rawStream,
		Subjects: []string{rawPrefix + ".>"},
		Storage:  jetstream.MemoryStorage,
		Discard:  jetstream.DiscardOld,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: raw stream: %w", err)
	}
	e.raw = s
	return s, nil
}

// rawConsumer is a pull consumer on its own connection, configured like a
// relay's input (ack none, 1024-message pulls), delivering only messages
// published after it was created. Every received message's arrival time
// is sent on at.
type rawConsumer struct {
	it   jetstream.MessagesContext
	at   chan time.Time
	done chan struct{}
}

func (e *Env) newRawConsumer(ctx context.Context, filter string, buffer int) (*rawConsumer, func(), error) {
	s, err := e.rawStream(ctx)
	if err != nil {
		return nil, nil, err
	}
	nc, err := e.connect("ckf-bench-raw-consumer")
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	rs, err := js.Stream(ctx, rawStream)
	if err != nil {
		return nil, nil, err
	}
	cons, err := rs.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject: filter,
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckNonePolicy,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("bench: raw consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return nil, nil, err
	}
	rc := &rawConsumer{it: it, at: make(chan time.Time, buffer), done: make(chan struct{})}
	go func() {
		defer close(rc.done)
		for {
			if _, err := it.Next(); err != nil {
				return
			}
			rc.at <- time.Now()
		}
	}()
	stop := func() {
		it.Stop()
		<-rc.done
		_ = rs.DeleteConsumer(context.WithoutCancel(ctx), cons.CachedInfo().Name)
		nc.Close()
		_ = s.Purge(context.WithoutCancel(ctx))
	}
	return rc, stop, nil
}

// RawEvents is the baseline of Events: the same payloads published to a
// plain stream and received by a pull consumer, timed until the last one
// arrives.
func (e *Env) RawEvents(ctx context.Context, b *Batch) (Throughput, error) {
	rc, stop, err := e.newRawConsumer(ctx, rawPrefix+".>", len(b.Msgs)+1)
	if err != nil {
		return Throughput{}, err
	}
	defer stop()
	if err := e.prepare(b); err != nil {
		return Throughput{}, err
	}
	start, cpu := time.Now(), processCPU()
	gcpu, err := e.sendBatch(ctx, b, true)
	if err != nil {
		return Throughput{}, err
	}
	var last time.Time
	timeout := time.After(e.cfg.Timeout)
	for range len(b.Msgs) {
		select {
		case last = <-rc.at:
		case <-timeout:
			return Throughput{}, fmt.Errorf("bench: raw consumer did not receive %d messages within %s", len(b.Msgs), e.cfg.Timeout)
		case <-ctx.Done():
			return Throughput{}, ctx.Err()
		}
	}
	return Throughput{Events: b.Events, Messages: len(b.Msgs), Bytes: b.Bytes(), Elapsed: last.Sub(start), CPU: processCPU() - cpu, GeneratorCPU: gcpu}, nil
}

// Latency summarises single-message latencies.
type Latency struct {
	Samples       []time.Duration // sorted
	P50, P99, Max time.Duration
	Mean          time.Duration
}

func summarize(s []time.Duration) Latency {
	slices.Sort(s)
	l := Latency{Samples: s}
	if len(s) == 0 {
		return l
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	l.Mean = sum / time.Duration(len(s))
	l.P50, l.P99, l.Max = quantile(s, 0.50), quantile(s, 0.99), s[len(s)-1]
	return l
}

// quantile is the nearest-rank quantile of sorted s.
func quantile(s []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Latency measures event→queryable: one stored event of fresh blocks at a
// time, on a probe worker of the first DC, timed from before its publish
// until the indexer answers the full prefix on that DC's lane (Match
// polled every 25µs by awaitProbe). Each probe's blocks are removed
// afterwards and the next probe waits gap, so the rate stays modest.
func (e *Env) Latency(ctx context.Context, samples int, gap time.Duration) (Latency, error) {
	if e.ix == nil {
		return Latency{}, errors.New("bench: pipeline not started")
	}
	dc := e.cfg.DCs[0]
	subj, err := wire.WorkerEventsSubject(e.cfg.Domain, dc, probeWorker)
	if err != nil {
		return Latency{}, err
	}
	out := make([]time.Duration, 0, samples)
	for range samples {
		locals, store, remove, err := e.probeEvents()
		if err != nil {
			return Latency{}, err
		}
		start := time.Now()
		f, err := e.publishProbe(ctx, subj, store)
		if err != nil {
			return Latency{}, err
		}
		lat, err := awaitProbe(ctx, start, e.cfg.Timeout, func() bool { return e.visible(locals, dc) }, e.pipelineErr)
		if err != nil {
			return Latency{}, fmt.Errorf("bench: pipeline probe: %w", err)
		}
		out = append(out, lat)
		if err := e.ackProbe(ctx, f); err != nil {
			return Latency{}, err
		}
		if _, err := e.pubJS.Publish(ctx, subj, remove); err != nil {
			return Latency{}, fmt.Errorf("bench: publish probe removal: %w", err)
		}
		if !ctxwait.Sleep(ctx, gap) {
			return Latency{}, ctx.Err()
		}
	}
	return summarize(out), nil
}

// probeEvents returns fresh local hashes and the JSON store and remove
// events of the probe worker holding them as one chain.
func (e *Env) probeEvents() (locals []ckf.LocalBlockHash, store, remove []byte, err error) {
	e.probeID++
	blocks := make([]routerevent.StoredBlock, probeBlocks)
	engine := make([]uint64, probeBlocks)
	locals = make([]ckf.LocalBlockHash, probeBlocks)
	for i := range probeBlocks {
		k := e.probeID*probeBlocks + uint64(i)
		locals[i] = ckf.LocalBlockHash(mix64(k ^ 0x6C6F63616C))
		engine[i] = mix64(k ^ 0x656E67696E65)
		blocks[i] = routerevent.StoredBlock{BlockHash: engine[i], TokensHash: uint64(locals[i])}
	}
	ev := []routerevent.RouterEvent{{WorkerID: probeWorker, Event: routerevent.KvCacheEvent{EventID: e.probeID * 2,
		Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{Blocks: blocks}}}}}
	if store, err = json.Marshal(ev); err != nil {
		return nil, nil, nil, err
	}
	ev[0].Event = routerevent.KvCacheEvent{EventID: e.probeID*2 + 1, Data: routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{BlockHashes: engine}}}
	if remove, err = json.Marshal(ev); err != nil {
		return nil, nil, nil, err
	}
	return locals, store, remove, nil
}

func (e *Env) visible(locals []ckf.LocalBlockHash, dc string) bool {
	resp, err := e.ix.Match(api.Query{Locals: locals})
	if err != nil {
		return false
	}
	for _, l := range resp.Lanes {
		if l.DC == dc && int(l.Depth) == len(locals) {
			return true
		}
	}
	return false
}

// RawLatency is the baseline of Latency: single messages published to a
// plain stream, timed from before the publish until a pull consumer on
// another connection has received them (polled like Latency's Match), at
// the same pace.
func (e *Env) RawLatency(ctx context.Context, samples int, gap time.Duration) (Latency, error) {
	rc, stop, err := e.newRawConsumer(ctx, rawLatSubject, 1)
	if err != nil {
		return Latency{}, err
	}
	defer stop()
	_, store, _, err := e.probeEvents()
	if err != nil {
		return Latency{}, err
	}
	out := make([]time.Duration, 0, samples)
	for range samples {
		start := time.Now()
		f, err := e.publishProbe(ctx, rawLatSubject, store)
		if err != nil {
			return Latency{}, err
		}
		lat, err := awaitProbe(ctx, start, e.cfg.Timeout, rc.received, nil)
		if err != nil {
			return Latency{}, fmt.Errorf("bench: raw probe: %w", err)
		}
		out = append(out, lat)
		if err := e.ackProbe(ctx, f); err != nil {
			return Latency{}, err
		}
		if !ctxwait.Sleep(ctx, gap) {
			return Latency{}, ctx.Err()
		}
	}
	return summarize(out), nil
}
