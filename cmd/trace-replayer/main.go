// Command trace-replayer feeds relays with a real workload: it replays the
// Mooncake conversation trace over simulated workers in several DCs (each
// with an LRU KV cache), publishes their KV events on
// kvevents.<domain>.<dc>.<worker_id>, and checks the global indexer's
// answers against the exact per-DC ground truth, printing a live status.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/eventpub"
	"github.com/ckfrelay/ckfrelay/pkg/retry"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

func main() {
	cli.Main(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr) })
}

type options struct {
	natsURL     string
	security    cli.Security
	dcNatsURLs  string
	hashSpace   int
	queryVia    string
	domain      string
	dcs         string
	traceFile   string
	indexerURL  string
	speed       float64
	queryEvery  int
	status      time.Duration
	verify      bool
	verifyWait  time.Duration
	repeat      bool
	rcfg        replay.Config
	maxRequests int
	// relayMetrics are the relays' /metrics URLs whose refused events the
	// status line counts.
	relayMetrics []string

	// --engine vllm-zmq: fake vLLM engines instead of direct publishing.
	engineMode    string
	zmqHost       string
	zmqBasePort   int
	zmqEnginesDir string
	zmqFormat     string
	zmqWait       time.Duration
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{rcfg: replay.Config{WorkersPerDC: 4, CapacityBlocks: 4096, Duplication: 1, Affinity: 0.8, Seed: 1}}
	fs := flag.NewFlagSet("trace-replayer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cli.Usage(fs, "replays the Mooncake trace as simulated workers' KV events and checks the indexer's answers against the exact ground truth", nil)
	fs.StringVar(&o.natsURL, "nats-url", nats.DefaultURL, "NATS server URL")
	o.security.Register(fs)
	fs.StringVar(&o.dcNatsURLs, "dc-nats-urls", "", "per-DC NATS servers the DC's workers publish to, dc=url,... (e.g. dc-a=nats://nats-dc-a:4222); other DCs use --nats-url")
	fs.IntVar(&o.hashSpace, "hash-space", 0, "first hash space of the replay (runs with distinct values store distinct blocks)")
	fs.StringVar(&o.queryVia, "query-via", "http", "how verification queries reach the indexer: http (--indexer-url) or nats (request on ckfq.<domain>.match through --nats-url, served by every indexer replica's queue group)")
	fs.StringVar(&o.domain, "domain", "default", "indexer domain; a comma-separated list replays one model per domain, each request going to one of them by a hash of its first blocks (its conversation), each verified on its own")
	fs.StringVar(&o.dcs, "dcs", "dc-a,dc-b", "comma-separated DC names (each needs a relay-producer)")
	fs.StringVar(&o.traceFile, "trace", "", "trace JSONL (optionally gzip) file; empty uses the embedded Mooncake trace")
	fs.StringVar(&o.indexerURL, "indexer-url", "http://127.0.0.1:8080", "global-indexer HTTP API for verification queries (empty disables)")
	fs.Float64Var(&o.speed, "speed", 20, "replay speed relative to the trace timestamps (0 = as fast as possible)")
	fs.IntVar(&o.queryEvery, "query-every", 1, "query the indexer for every n-th request (0 disables)")
	fs.DurationVar(&o.status, "status-interval", time.Second, "status line period")
	fs.BoolVar(&o.verify, "verify", true, "after the replay, wait for the pipeline to settle and require no false negative")
	fs.DurationVar(&o.verifyWait, "verify-timeout", 60*time.Second, "how long the final verification may wait for the pipeline to settle")
	fs.BoolVar(&o.repeat, "repeat", false, "replay forever, each pass in a fresh hash space")
	fs.IntVar(&o.maxRequests, "max-requests", 0, "stop after this many requests (0 = the whole trace)")
	fs.Func("relay-metrics", "comma-separated /metrics URLs of the relays: the status line counts the events they refused (ckf_relay_refusals_total)", func(v string) error {
		for _, u := range strings.Split(v, ",") {
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				return fmt.Errorf("%q: want an http(s) URL", u)
			}
			o.relayMetrics = append(o.relayMetrics, u)
		}
		return nil
	})
	fs.IntVar(&o.rcfg.WorkersPerDC, "workers-per-dc", o.rcfg.WorkersPerDC, "simulated workers per DC")
	fs.IntVar(&o.rcfg.CapacityBlocks, "capacity-blocks", o.rcfg.CapacityBlocks, "KV cache capacity per worker, in blocks (LRU)")
	fs.IntVar(&o.rcfg.Duplication, "duplication", o.rcfg.Duplication, "replay the trace this many times in disjoint hash spaces")
	fs.Float64Var(&o.rcfg.Affinity, "affinity", o.rcfg.Affinity, "share of requests routed by prefix affinity")
	fs.Uint64Var(&o.rcfg.Seed, "seed", o.rcfg.Seed, "routing seed")
	fs.StringVar(&o.engineMode, "engine", engineDynamo, "how workers publish: dynamo (RouterEvent JSON straight to KVEVENTS) or vllm-zmq (a fake vLLM engine per worker, msgpack over ZMQ, for engine-bridge)")
	fs.StringVar(&o.zmqHost, "zmq-host", "127.0.0.1", "vllm-zmq: address the fake engines bind")
	fs.IntVar(&o.zmqBasePort, "zmq-base-port", 0, "vllm-zmq: first port (worker k: PUB base+2k, replay base+2k+1); 0 picks free ports")
	fs.StringVar(&o.zmqEnginesDir, "zmq-engines-dir", ".", "vllm-zmq: directory for the per-DC engines files (<dc>.engines) engine-bridge reads")
	fs.StringVar(&o.zmqFormat, "zmq-format", "map", "vllm-zmq: event encoding, map (vLLM ≥ 0.24) or array (older)")
	fs.DurationVar(&o.zmqWait, "zmq-wait", 60*time.Second, "vllm-zmq: how long to wait for a bridge to subscribe to every engine")
	if err := cli.Parse(fs, args, getenv); err != nil {
		return nil, err
	}
	for _, dc := range strings.Split(o.dcs, ",") {
		if err := wire.ValidateName("dc", dc); err != nil {
			return nil, err
		}
		o.rcfg.DCs = append(o.rcfg.DCs, dc)
	}
	for _, d := range strings.Split(o.domain, ",") {
		if err := wire.ValidateName("domain", d); err != nil {
			return nil, err
		}
	}
	if err := o.security.Validate(); err != nil {
		return nil, err
	}
	if _, err := dcURLs(o); err != nil {
		return nil, err
	}
	if o.queryVia != "http" && o.queryVia != "nats" {
		return nil, fmt.Errorf("--query-via %q: want http or nats", o.queryVia)
	}
	switch {
	case o.engineMode != engineDynamo && o.engineMode != engineVLLMZMQ:
		return nil, fmt.Errorf("--engine %q: want %s or %s", o.engineMode, engineDynamo, engineVLLMZMQ)
	case o.engineMode == engineVLLMZMQ && strings.Contains(o.domain, ","):
		return nil, fmt.Errorf("--engine %s replays one model: give one --domain", engineVLLMZMQ)
	case o.zmqFormat != "map" && o.zmqFormat != "array":
		return nil, fmt.Errorf("--zmq-format %q: want map or array", o.zmqFormat)
	case o.zmqBasePort < 0 || o.zmqBasePort > 65535:
		return nil, fmt.Errorf("--zmq-base-port %d out of range", o.zmqBasePort)
	}
	if o.speed < 0 || o.queryEvery < 0 || o.status <= 0 || o.maxRequests < 0 || o.hashSpace < 0 {
		return nil, errors.New("speed, query-every and max-requests must be ≥ 0 and status-interval > 0")
	}
	return o, o.rcfg.Validate()
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parse(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "trace-replayer: %v\n", err)
		return 2
	}
	err = replayTrace(ctx, o, stdout, stderr)
	if ctx.Err() != nil {
		// Interrupted, at any step: the errors of the steps it cut short
		// (context canceled) would only hide why.
		fmt.Fprintf(stderr, "trace-replayer: stopped before the end of the replay (%s)\n", cli.StopReason(ctx))
		return 130
	}
	if err != nil {
		fmt.Fprintf(stderr, "trace-replayer: %v\n", err)
		return 1
	}
	return 0
}

// dcURLs maps every DC to the NATS URL its workers publish to.
func dcURLs(o *options) (map[string]string, error) {
	m := make(map[string]string, len(o.rcfg.DCs))
	for _, dc := range o.rcfg.DCs {
		m[dc] = o.natsURL
	}
	if o.dcNatsURLs == "" {
		return m, nil
	}
	for _, kv := range strings.Split(o.dcNatsURLs, ",") {
		dc, url, ok := strings.Cut(kv, "=")
		if _, known := m[dc]; !ok || !known || url == "" {
			return nil, fmt.Errorf("--dc-nats-urls: %q is not dc=url for a DC of --dcs", kv)
		}
		m[dc] = url
	}
	return m, nil
}

// connect dials url with the --nats-* credentials, retrying in the
// background while the server is not up yet (any start order converges).
func connect(url string, o *options, log zerolog.Logger) (*nats.Conn, error) {
	nc, _, err := cli.Dial(url, "trace-replayer", o.security, log)
	return nc, err
}

// publishers connects to each DC's NATS server and ensures its input
// stream (retrying with backoff until that DC's JetStream answers), so the
// workers' events are stored in their own DC with JetStream acks.
func publishers(ctx context.Context, o *options, log zerolog.Logger) (map[string]*eventpub.Publisher, func(), error) {
	urls, err := dcURLs(o)
	if err != nil {
		return nil, nil, err
	}
	var conns []*nats.Conn
	closeAll := func() {
		for _, nc := range conns {
			nc.Close()
		}
	}
	byURL := map[string]*eventpub.Publisher{}
	out := map[string]*eventpub.Publisher{}
	for _, dc := range o.rcfg.DCs {
		url := urls[dc]
		if p, ok := byURL[url]; ok {
			out[dc] = p
			continue
		}
		nc, err := connect(url, o, log)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, nc)
		js, err := jetstream.New(nc)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		pol := retry.Policy{OnRetry: func(n int, err error, wait time.Duration) {
			fmt.Fprintf(os.Stderr, "trace-replayer: input stream at %s not ready (attempt %d: %v); retrying in %s\n", url, n, err, wait)
		}}
		if err := pol.Do(ctx, func(ctx context.Context) error {
			_, err := streams.EnsureEvents(ctx, js, streams.Options{})
			return err
		}); err != nil {
			closeAll()
			return nil, nil, err
		}
		// Acknowledged, de-duplicated publishing: an event sent while the
		// stream is unreachable is retried, not lost (pkg/eventpub).
		p, err := eventpub.New(js, eventpub.Config{})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		byURL[url], out[dc] = p, p
	}
	return out, closeAll, nil
}

func loadTrace(o *options) ([]replay.Request, error) {
	if o.traceFile == "" {
		return replay.LoadEmbedded()
	}
	f, err := os.Open(o.traceFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return replay.ReadTrace(f)
}

// stats are the live counters of one run.
type stats struct {
	start time.Time
	// refused is the relays' refused events (-1: not asked; -2: a relay
	// did not answer).
	refused            int64
	requests, events   int
	queries, unavail   int
	under, over, exact int
	bestAgree, bestN   int
	latencies          []time.Duration
}

func (s *stats) line(total int) string {
	el := time.Since(s.start).Seconds()
	p50, p99 := percentile(s.latencies, 0.5), percentile(s.latencies, 0.99)
	agree := 0.0
	if s.bestN > 0 {
		agree = 100 * float64(s.bestAgree) / float64(s.bestN)
	}
	line := fmt.Sprintf("t=%5.1fs requests=%d/%d events=%d (%.0f/s) | queries=%d p50=%s p99=%s unavailable=%d | lanes exact=%d over=%d under(lag)=%d best-DC agree=%.1f%%",
		el, s.requests, total, s.events, float64(s.events)/max(el, 1e-9), s.queries, p50, p99, s.unavail, s.exact, s.over, s.under, agree)
	switch {
	case s.refused >= 0:
		line += fmt.Sprintf(" | refused=%d", s.refused)
	case s.refused == -2:
		line += " | refused=?"
	}
	return line
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	c := slices.Clone(d)
	slices.Sort(c)
	return c[min(len(c)-1, int(q*float64(len(c))))].Round(time.Microsecond)
}

func replayTrace(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	reqs, err := loadTrace(o)
	if err != nil {
		return err
	}
	if o.maxRequests > 0 && o.maxRequests < len(reqs) {
		reqs = reqs[:o.maxRequests]
	}
	log := zerolog.New(cli.ConsoleWriter(stderr, time.TimeOnly)).With().Timestamp().Logger()
	pubs, closePubs, err := publishers(ctx, o, log)
	if err != nil {
		return err
	}
	defer closePubs()
	if models := strings.Split(o.domain, ","); len(models) > 1 {
		return replayModels(ctx, o, models, reqs, stdout, stderr)
	}
	q, closeQ, err := newQuerier(o, "", log)
	if err != nil {
		return err
	}
	defer closeQ()
	var fleet *zmqFleet
	if o.engineMode == engineVLLMZMQ {
		if fleet, err = startFleet(o, stdout); err != nil {
			return err
		}
		defer fleet.close()
		if err := fleet.waitSubscribed(ctx, o.zmqWait); err != nil {
			return err
		}
	}
	return passes(ctx, o, reqs, pubs, fleet, q, stdout)
}

// replayModels splits the trace over models by a hash of each request's
// first blocks (the turns of a conversation share them, so they go to one
// model) and replays each share concurrently as its own model: its own
// workers, ground truth, events on kvevents.<model>.<dc>.*, queries naming
// "model", and verification.
func replayModels(ctx context.Context, o *options, models []string, reqs []replay.Request, stdout, stderr io.Writer) error {
	shares := make([][]replay.Request, len(models))
	for _, r := range reqs {
		// The first blocks stand for the conversation: its turns share
		// them (and stay on one model) while a shared system prompt alone
		// does not pin every request to one model.
		var key uint64
		for _, h := range r.HashIDs[:min(len(r.HashIDs), conversationBlocks)] {
			key = modelHash(key ^ h)
		}
		m := int(key % uint64(len(models)))
		shares[m] = append(shares[m], r)
	}
	errs := make([]error, len(models))
	var wg sync.WaitGroup
	var outMu sync.Mutex // the models' lines share stdout
	// and their logs share one console writer, serialized: zerolog does
	// not order concurrent writes to an io.Writer.
	logw := zerolog.SyncWriter(cli.ConsoleWriter(stderr, time.TimeOnly))
	for i, model := range models {
		mo := *o
		mo.domain = model
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = replayShare(ctx, &mo, shares[i], &prefixWriter{mu: &outMu, w: stdout, prefix: "[" + model + "] "}, logw)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("model %s: %w", model, errs[i])
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// conversationBlocks is how many leading blocks of a request name its
// conversation when the trace is split over models.
const conversationBlocks = 4

// modelHash spreads trace hash ids (small consecutive integers) evenly
// over the models: the SplitMix64 finalizer.
func modelHash(x uint64) uint64 {
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// replayShare replays one model's share of the trace, logging to logw
// (a console writer that the models share).
func replayShare(ctx context.Context, o *options, reqs []replay.Request, stdout, logw io.Writer) error {
	if len(reqs) == 0 {
		fmt.Fprintln(stdout, "no request of the trace went to this model")
		return nil
	}
	log := zerolog.New(logw).With().Timestamp().Str("model", o.domain).Logger()
	pubs, closePubs, err := publishers(ctx, o, log)
	if err != nil {
		return err
	}
	defer closePubs()
	q, closeQ, err := newQuerier(o, o.domain, log)
	if err != nil {
		return err
	}
	defer closeQ()
	return passes(ctx, o, reqs, pubs, nil, q, stdout)
}

// prefixWriter prefixes every write (one status line each) with the model.
type prefixWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.w, p.prefix+string(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// newQuerier is the querier of the match checks (nil when there is no
// indexer to ask), with what closes its connection. model names the model
// a request asks about when the replayer feeds several.
func newQuerier(o *options, model string, log zerolog.Logger) (*querier, func(), error) {
	q := &querier{client: &http.Client{Timeout: 5 * time.Second}, url: o.indexerURL, model: model}
	switch {
	case o.queryVia == "nats":
		nc, err := connect(o.natsURL, o, log)
		if err != nil {
			return nil, nil, err
		}
		q.nc, q.subject = nc, indexer.MatchSubject(o.domain)
		return q, nc.Close, nil
	case o.indexerURL == "":
		return nil, func() {}, nil
	}
	return q, func() {}, nil
}

// passes replays reqs once, or with --repeat until ctx ends, each pass
// with the next seed in a fresh hash space.
func passes(ctx context.Context, o *options, reqs []replay.Request, pubs map[string]*eventpub.Publisher, fleet *zmqFleet, q *querier, stdout io.Writer) error {
	for pass := 0; ; pass++ {
		cfg := o.rcfg
		cfg.Seed += uint64(pass)
		rp, err := replay.New(cfg, reqs)
		if err != nil {
			return err
		}
		rp.SetHashSpace(o.hashSpace + pass*cfg.Duplication)
		if err := onePass(ctx, o, pubs, fleet, q, rp, stdout); err != nil {
			return err
		}
		if !o.repeat || ctx.Err() != nil {
			return nil
		}
	}
}

func onePass(ctx context.Context, o *options, pubs map[string]*eventpub.Publisher, fleet *zmqFleet, q *querier, rp *replay.Replayer, stdout io.Writer) error {
	st := &stats{start: time.Now(), refused: -1}
	hc := &http.Client{}
	refresh := func() {
		if len(o.relayMetrics) == 0 {
			return
		}
		st.refused = -2
		if n, ok := relayRefusals(ctx, hc, o.relayMetrics); ok {
			st.refused = int64(min(n, 1<<62))
		}
	}
	nextStatus := time.Now().Add(o.status)
	total := rp.Len()
	var t0 int64 = -1
	for {
		if ctx.Err() != nil {
			return nil
		}
		step, ok := rp.Next()
		if !ok {
			break
		}
		if o.speed > 0 {
			ts := rp.Timestamp(step.Index)
			if t0 < 0 {
				t0 = ts
			}
			due := st.start.Add(time.Duration(float64(ts-t0) * float64(time.Millisecond) / o.speed))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(d):
				}
			}
		}
		if step.Index == 0 && o.indexerURL != "" {
			exampleQuery(stdout, o.indexerURL, o.queryLocals(step.Locals))
		}
		// A router asks where the prefix lives before the request is served.
		if q != nil && o.queryEvery > 0 && step.Index%o.queryEvery == 0 {
			query(ctx, q, o, step, st)
		}
		if fleet != nil && len(step.Events) > 0 {
			n, err := fleet.publish(step)
			if err != nil {
				return fmt.Errorf("engine publish: %w", err)
			}
			st.events += n
		} else if len(step.Events) > 0 {
			dc := o.rcfg.DCs[step.DC]
			if err := pubs[dc].PublishEvents(ctx, o.domain, dc, step.Worker, step.Events); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("publish events: %w", err)
			}
			st.events += len(step.Events)
		}
		st.requests++
		if time.Now().After(nextStatus) {
			refresh()
			printStatus(stdout, st.line(total), false)
			nextStatus = time.Now().Add(o.status)
		}
	}
	refresh()
	printStatus(stdout, st.line(total), true)
	if o.verify && q != nil {
		return verify(ctx, o, q, rp, stdout)
	}
	return nil
}

// printStatus rewrites one status line in place on a terminal and prints
// one line per update elsewhere (logs, CI).
func printStatus(w io.Writer, line string, final bool) {
	if cli.IsTerminal(w) {
		end := ""
		if final {
			end = "\n"
		}
		fmt.Fprintf(w, "\r\033[K%s%s", line, end)
		return
	}
	fmt.Fprintln(w, line)
}

// exampleQuery prints a ready-to-run query for one replayed request.
func exampleQuery(w io.Writer, url string, locals []ckf.LocalBlockHash) {
	n := min(len(locals), 8)
	hs := make([]string, n)
	for i := range n {
		hs[i] = fmt.Sprint(uint64(locals[i]))
	}
	fmt.Fprintf(w, "query it yourself:\n  curl -s %s/v1/lanes\n  curl -s -X POST %s/v1/match -d '{\"local_hashes\":[%s]}'\n",
		url, url, strings.Join(hs, ","))
}

// querier asks the indexer over HTTP, or over NATS when nc is set (the
// request is then served by any replica of the queue group).
type querier struct {
	client  *http.Client
	url     string
	model   string // named in the body when set
	nc      *nats.Conn
	subject string
}

func (q *querier) match(ctx context.Context, locals []ckf.LocalBlockHash) (api.MatchResponse, int, time.Duration, error) {
	hs := make([]uint64, len(locals))
	for i, h := range locals {
		hs[i] = uint64(h)
	}
	fields := map[string]any{"local_hashes": hs}
	if q.model != "" {
		fields["model"] = q.model
	}
	body, _ := json.Marshal(fields)
	if q.nc != nil {
		return q.matchNATS(ctx, body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, q.url+"/v1/match", bytes.NewReader(body))
	if err != nil {
		return api.MatchResponse{}, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := q.client.Do(req)
	took := time.Since(start)
	if err != nil {
		return api.MatchResponse{}, 0, took, err
	}
	defer resp.Body.Close()
	var out api.MatchResponse
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return out, resp.StatusCode, took, err
		}
	}
	return out, resp.StatusCode, took, nil
}

// matchNATS sends one request on the match subject; an error reply
// carries its HTTP status in the Nats-Service-Error-Code header.
func (q *querier) matchNATS(ctx context.Context, body []byte) (api.MatchResponse, int, time.Duration, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	msg, err := q.nc.RequestWithContext(rctx, q.subject, body)
	took := time.Since(start)
	if err != nil {
		return api.MatchResponse{}, 0, took, err
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, err := strconv.Atoi(code)
		if err != nil {
			return api.MatchResponse{}, 0, took, fmt.Errorf("bad %s %q", micro.ErrorCodeHeader, code)
		}
		return api.MatchResponse{}, n, took, nil
	}
	var out api.MatchResponse
	if err := json.Unmarshal(msg.Data, &out); err != nil {
		return out, http.StatusOK, took, err
	}
	return out, http.StatusOK, took, nil
}

func query(ctx context.Context, q *querier, o *options, step replay.Step, st *stats) {
	resp, code, took, err := q.match(ctx, o.queryLocals(step.Locals))
	if err != nil || code != http.StatusOK {
		st.unavail++
		return
	}
	st.queries++
	st.latencies = append(st.latencies, took)
	if len(st.latencies) > 4096 {
		st.latencies = st.latencies[len(st.latencies)-2048:]
	}
	// The query ran before the request was served: compare with the truth
	// of that moment.
	bestTruth, bestDepth := -1, 0
	for dc, d := range step.DepthBefore {
		if d > bestDepth {
			bestTruth, bestDepth = dc, d
		}
	}
	for _, l := range resp.Lanes {
		dc := slices.Index(o.rcfg.DCs, l.DC)
		if dc < 0 {
			continue
		}
		truth := step.DepthBefore[dc]
		switch {
		case int(l.Depth) == truth:
			st.exact++
		case int(l.Depth) > truth:
			st.over++
		default:
			st.under++
		}
	}
	if bestTruth >= 0 {
		st.bestN++
		if resp.Best != nil && int(resp.Best.Depth) == bestDepth {
			if dc := slices.Index(o.rcfg.DCs, resp.Best.DC); dc >= 0 && step.DepthBefore[dc] == bestDepth {
				st.bestAgree++
			}
		}
	}
}

// verify waits until the pipeline settles and then requires, for a sample
// of requests, that no lane reports less than the exact depth its DC holds.
func verify(ctx context.Context, o *options, q *querier, rp *replay.Replayer, stdout io.Writer) error {
	sample := rp.Sample(512)
	deadline := time.Now().Add(o.verifyWait)
	for {
		under, over, exact, missing := 0, 0, 0, 0
		for _, locals := range sample {
			resp, code, _, err := q.match(ctx, o.queryLocals(locals))
			if err != nil || code != http.StatusOK {
				missing++
				continue
			}
			seqs := ckf.SequenceHashes(nil, locals)
			seen := 0
			for _, l := range resp.Lanes {
				dc := slices.Index(o.rcfg.DCs, l.DC)
				if dc < 0 {
					continue
				}
				seen++
				truth := rp.Depth(dc, seqs)
				switch {
				case int(l.Depth) == truth:
					exact++
				case int(l.Depth) > truth:
					over++
				default:
					under++
				}
			}
			missing += len(o.rcfg.DCs) - seen
		}
		if under == 0 && missing == 0 {
			fmt.Fprintf(stdout, "verify: %d queries × %d DCs settled: no false negative (exact=%d over=%d)\n", len(sample), len(o.rcfg.DCs), exact, over)
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("verify: after %s: %d lane answers below the exact depth, %d lanes missing (exact=%d over=%d)", o.verifyWait, under, missing, exact, over)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
