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
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/replay"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

type options struct {
	natsURL     string
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
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{rcfg: replay.Config{WorkersPerDC: 4, CapacityBlocks: 4096, Duplication: 1, Affinity: 0.8, Seed: 1}}
	fs := flag.NewFlagSet("trace-replayer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cli.Usage(fs, "replays the Mooncake trace as simulated workers' KV events and checks the indexer's answers against the exact ground truth", nil)
	fs.StringVar(&o.natsURL, "nats-url", nats.DefaultURL, "NATS server URL")
	fs.StringVar(&o.domain, "domain", "default", "indexer domain")
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
	fs.IntVar(&o.rcfg.WorkersPerDC, "workers-per-dc", o.rcfg.WorkersPerDC, "simulated workers per DC")
	fs.IntVar(&o.rcfg.CapacityBlocks, "capacity-blocks", o.rcfg.CapacityBlocks, "KV cache capacity per worker, in blocks (LRU)")
	fs.IntVar(&o.rcfg.Duplication, "duplication", o.rcfg.Duplication, "replay the trace this many times in disjoint hash spaces")
	fs.Float64Var(&o.rcfg.Affinity, "affinity", o.rcfg.Affinity, "share of requests routed by prefix affinity")
	fs.Uint64Var(&o.rcfg.Seed, "seed", o.rcfg.Seed, "routing seed")
	if err := cli.Parse(fs, args, getenv); err != nil {
		return nil, err
	}
	for _, dc := range strings.Split(o.dcs, ",") {
		if err := wire.ValidateToken("dc", dc); err != nil {
			return nil, err
		}
		o.rcfg.DCs = append(o.rcfg.DCs, dc)
	}
	if err := wire.ValidateToken("domain", o.domain); err != nil {
		return nil, err
	}
	if o.speed < 0 || o.queryEvery < 0 || o.status <= 0 || o.maxRequests < 0 {
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
	if err := replayTrace(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "trace-replayer: %v\n", err)
		return 1
	}
	if ctx.Err() != nil {
		return 130 // interrupted: the replay did not finish
	}
	return 0
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
	start              time.Time
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
	return fmt.Sprintf("t=%5.1fs requests=%d/%d events=%d (%.0f/s) | queries=%d p50=%s p99=%s unavailable=%d | lanes exact=%d over=%d under(lag)=%d best-DC agree=%.1f%%",
		el, s.requests, total, s.events, float64(s.events)/max(el, 1e-9), s.queries, p50, p99, s.unavail, s.exact, s.over, s.under, agree)
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	c := slices.Clone(d)
	slices.Sort(c)
	return c[min(len(c)-1, int(q*float64(len(c))))].Round(time.Microsecond)
}

func replayTrace(ctx context.Context, o *options, stdout io.Writer) error {
	reqs, err := loadTrace(o)
	if err != nil {
		return err
	}
	if o.maxRequests > 0 && o.maxRequests < len(reqs) {
		reqs = reqs[:o.maxRequests]
	}
	nc, err := nats.Connect(o.natsURL, nats.Name("trace-replayer"))
	if err != nil {
		return fmt.Errorf("connect %s: %w", o.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for pass := 0; ; pass++ {
		cfg := o.rcfg
		cfg.Seed += uint64(pass)
		rp, err := replay.New(cfg, reqs)
		if err != nil {
			return err
		}
		if pass > 0 {
			// Each pass replays the trace in a fresh hash space.
			rp.SetHashSpace(pass * cfg.Duplication)
		}
		if err := onePass(ctx, o, js, client, rp, stdout); err != nil {
			return err
		}
		if !o.repeat || ctx.Err() != nil {
			return nil
		}
	}
}

func onePass(ctx context.Context, o *options, js jetstream.JetStream, client *http.Client, rp *replay.Replayer, stdout io.Writer) error {
	st := &stats{start: time.Now()}
	nextStatus := time.Now().Add(o.status)
	total := rp.Len()
	var pending []jetstream.PubAckFuture
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
			exampleQuery(stdout, o.indexerURL, step.Locals)
		}
		// A router asks where the prefix lives before the request is served.
		if o.indexerURL != "" && o.queryEvery > 0 && step.Index%o.queryEvery == 0 {
			query(ctx, client, o, step, st)
		}
		if len(step.Events) > 0 {
			b, err := json.Marshal(step.Events)
			if err != nil {
				return err
			}
			subj, err := wire.WorkerEventsSubject(o.domain, o.rcfg.DCs[step.DC], step.Worker)
			if err != nil {
				return err
			}
			f, err := js.PublishAsync(subj, b)
			if err != nil {
				return fmt.Errorf("publish events: %w", err)
			}
			pending = append(pending, f)
			st.events += len(step.Events)
		}
		if len(pending) >= 256 {
			if err := waitAcks(ctx, pending); err != nil {
				return err
			}
			pending = pending[:0]
		}
		st.requests++
		if time.Now().After(nextStatus) {
			printStatus(stdout, st.line(total), false)
			nextStatus = time.Now().Add(o.status)
		}
	}
	if err := waitAcks(ctx, pending); err != nil {
		return err
	}
	printStatus(stdout, st.line(total), true)
	if o.verify && o.indexerURL != "" {
		return verify(ctx, o, client, rp, stdout)
	}
	return nil
}

// printStatus rewrites one status line in place on a terminal and prints
// one line per update elsewhere (logs, CI).
func printStatus(w io.Writer, line string, final bool) {
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			end := ""
			if final {
				end = "\n"
			}
			fmt.Fprintf(w, "\r\033[K%s%s", line, end)
			return
		}
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

func waitAcks(ctx context.Context, fs []jetstream.PubAckFuture) error {
	for _, f := range fs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish events: %w", err)
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("publish events: no JetStream ack within 10s")
		}
	}
	return nil
}

func match(ctx context.Context, client *http.Client, url string, locals []ckf.LocalBlockHash) (api.MatchResponse, int, time.Duration, error) {
	hs := make([]uint64, len(locals))
	for i, h := range locals {
		hs[i] = uint64(h)
	}
	body, _ := json.Marshal(map[string]any{"local_hashes": hs})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/match", bytes.NewReader(body))
	if err != nil {
		return api.MatchResponse{}, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
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

func query(ctx context.Context, client *http.Client, o *options, step replay.Step, st *stats) {
	resp, code, took, err := match(ctx, client, o.indexerURL, step.Locals)
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
func verify(ctx context.Context, o *options, client *http.Client, rp *replay.Replayer, stdout io.Writer) error {
	sample := rp.Sample(512)
	deadline := time.Now().Add(o.verifyWait)
	for {
		under, over, exact, missing := 0, 0, 0, 0
		for _, locals := range sample {
			resp, code, _, err := match(ctx, client, o.indexerURL, locals)
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
