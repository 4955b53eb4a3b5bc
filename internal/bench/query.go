package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/client"
)

// QueryConfig sizes the query-path pairs.
type QueryConfig struct {
	// Requests per side (default 20000), each with Hashes sequence hashes
	// (default 128), all distinct; Warmup requests per side first (default
	// 1000).
	Requests, Hashes, Warmup int
	// Round is how many requests one side sends before the other takes
	// its turn (default 500), so drift on a shared machine hits both.
	Round int
}

func (c QueryConfig) withDefaults() QueryConfig {
	if c.Requests <= 0 {
		c.Requests = 20000
	}
	if c.Hashes <= 0 {
		c.Hashes = 128
	}
	if c.Warmup <= 0 {
		c.Warmup = 1000
	}
	if c.Round <= 0 {
		c.Round = 500
	}
	return c
}

// QueryPath is the latency of one way of asking, against its baseline.
type QueryPath struct {
	Name     string  `json:"name"`
	Baseline string  `json:"baseline"`
	P50Ns    float64 `json:"p50_ns"`
	P99Ns    float64 `json:"p99_ns"`
	BaseP50  float64 `json:"baseline_p50_ns"`
	BaseP99  float64 `json:"baseline_p99_ns"`
	Bytes    int     `json:"answer_bytes"`
	// TableBytes is the memory of the mirror's own table (mirror only).
	TableBytes uint64 `json:"table_bytes,omitempty"`
}

// queryBodies are the same requests in both encodings.
type queryBodies struct {
	json, binary [][]byte
}

// newQueryBodies draws n distinct requests of h sequence hashes: the chain
// of a replayed trace request (so lanes answer real depths), extended with
// random hashes to h.
func (e *Env) newQueryBodies(n, h int, seed uint64) queryBodies {
	rng := rand.New(rand.NewPCG(seed, 0x71))
	var qb queryBodies
	for i := range n {
		var seqs []ckf.SequenceHash
		if e.rp != nil {
			if s := e.rp.Sample(1); len(s) == 1 {
				seqs = ckf.SequenceHashes(nil, s[0])
			}
		}
		if len(seqs) > h {
			seqs = seqs[:h]
		}
		for len(seqs) < h {
			seqs = append(seqs, ckf.SequenceHash(rng.Uint64()|uint64(i)<<1))
		}
		var j bytes.Buffer
		j.WriteString(`{"sequence_hashes":[`)
		bin := make([]byte, 0, 8*h)
		for k, s := range seqs {
			if k > 0 {
				j.WriteByte(',')
			}
			fmt.Fprint(&j, uint64(s))
			bin = binary.LittleEndian.AppendUint64(bin, uint64(s))
		}
		j.WriteString(`]}`)
		qb.json = append(qb.json, j.Bytes())
		qb.binary = append(qb.binary, bin)
	}
	return qb
}

// ask is one way of sending a body and reading the whole answer.
type ask func(ctx context.Context, body []byte) (int, error)

func httpAsk(c *http.Client, url, contentType string) ask {
	return func(ctx context.Context, body []byte) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", contentType)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		return int(n), err
	}
}

func natsAsk(nc *nats.Conn, subject string, hdr nats.Header) ask {
	return func(ctx context.Context, body []byte) (int, error) {
		msg, err := nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: body, Header: hdr})
		if err != nil {
			return 0, err
		}
		if code := msg.Header.Get(api.HeaderErrorCode); code != "" {
			return 0, fmt.Errorf("service error %s: %s", code, msg.Data)
		}
		return len(msg.Data), nil
	}
}

// timeAsks runs the two sides in alternating rounds over the same bodies
// and returns each side's latencies.
func timeAsks(ctx context.Context, cfg QueryConfig, subjBodies, baseBodies [][]byte, subj, base ask) (s, b []time.Duration, err error) {
	for i := range cfg.Warmup {
		if _, err := subj(ctx, subjBodies[i%len(subjBodies)]); err != nil {
			return nil, nil, fmt.Errorf("subject: %w", err)
		}
		if _, err := base(ctx, baseBodies[i%len(baseBodies)]); err != nil {
			return nil, nil, fmt.Errorf("baseline: %w", err)
		}
	}
	s = make([]time.Duration, 0, cfg.Requests)
	b = make([]time.Duration, 0, cfg.Requests)
	one := func(f ask, body []byte, out *[]time.Duration) error {
		t0 := time.Now()
		if _, err := f(ctx, body); err != nil {
			return err
		}
		*out = append(*out, time.Since(t0))
		return nil
	}
	for start := 0; start < cfg.Requests; start += cfg.Round {
		end := min(start+cfg.Round, cfg.Requests)
		for i := start; i < end; i++ {
			if err := one(subj, subjBodies[i%len(subjBodies)], &s); err != nil {
				return nil, nil, fmt.Errorf("subject: %w", err)
			}
		}
		for i := start; i < end; i++ {
			if err := one(base, baseBodies[i%len(baseBodies)], &b); err != nil {
				return nil, nil, fmt.Errorf("baseline: %w", err)
			}
		}
	}
	return s, b, nil
}

// bareHTTP is the baseline server: net/http reading the body and writing
// a fixed answer of the subject's size, nothing else.
func bareHTTP(answer []byte) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	})}
	go hs.Serve(ln) //nolint:errcheck // closed by the caller; a benchmark baseline
	return hs, "http://" + ln.Addr().String(), nil
}

// QueryPaths measures the indexer's query surface as a router meets it,
// each path against the bare transport answering the same size on the same
// machine in the same run: POST /v1/match with a JSON and with a binary
// body through the binary's own stack (httpserve listener, tracing
// middleware, queryapi handler), against a bare net/http server; and the
// ckfq.<domain>.match NATS endpoint against a bare NATS request/reply. The
// pipeline must be started and hold data.
func (e *Env) QueryPaths(ctx context.Context, cfg QueryConfig) ([]QueryPath, error) {
	cfg = cfg.withDefaults()
	if e.ix == nil {
		return nil, fmt.Errorf("bench: query paths need a started pipeline")
	}
	bodies := e.newQueryBodies(cfg.Requests, cfg.Hashes, e.cfg.Seed)

	// The subject: the indexer's HTTP stack exactly as cmd/global-indexer
	// builds it with tracing off (its default).
	reg := prometheus.NewRegistry()
	h := cli.TraceHTTP(queryapi.Handler(e.ix, e.ix.APIMetrics(), reg), noop.NewTracerProvider(), "global-indexer")
	srv, err := httpserve.DefaultConfig().Start("127.0.0.1:0", h, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown(context.Background()) //nolint:errcheck // benchmark teardown
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	defer hc.CloseIdleConnections()
	subjURL := "http://" + srv.Addr().String() + "/v1/match"
	jsonAsk := httpAsk(hc, subjURL, "application/json")
	size, err := jsonAsk(ctx, bodies.json[0])
	if err != nil {
		return nil, fmt.Errorf("bench: query: %w", err)
	}
	answer := bytes.Repeat([]byte{' '}, size)

	bare, bareURL, err := bareHTTP(answer)
	if err != nil {
		return nil, err
	}
	defer bare.Close()
	bareAsk := httpAsk(hc, bareURL, "application/json")

	var out []QueryPath
	add := func(name, baseline string, s, b []time.Duration) {
		q := func(d []time.Duration, p float64) float64 {
			slices.Sort(d)
			return float64(quantile(d, p).Nanoseconds())
		}
		out = append(out, QueryPath{Name: name, Baseline: baseline, Bytes: size,
			P50Ns: q(s, 0.5), P99Ns: q(s, 0.99), BaseP50: q(b, 0.5), BaseP99: q(b, 0.99)})
	}
	s, b, err := timeAsks(ctx, cfg, bodies.json, bodies.json, jsonAsk, bareAsk)
	if err != nil {
		return nil, fmt.Errorf("bench: http json: %w", err)
	}
	add("http json", "bare net/http, same body and answer size", s, b)

	binAsk := httpAsk(hc, subjURL, api.ContentTypeSeqHashes)
	s, b, err = timeAsks(ctx, cfg, bodies.binary, bodies.json, binAsk, bareAsk)
	if err != nil {
		return nil, fmt.Errorf("bench: http binary: %w", err)
	}
	add("http binary", "bare net/http, JSON body, same answer size", s, b)

	// NATS: the micro endpoint against a bare responder on the same server.
	nc, err := e.connect("ckf-bench-query")
	if err != nil {
		return nil, err
	}
	rc, err := e.connect("ckf-bench-echo")
	if err != nil {
		return nil, err
	}
	sub, err := rc.Subscribe("ckfbench.echo", func(m *nats.Msg) { _ = m.Respond(answer) })
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe() //nolint:errcheck // benchmark teardown
	if err := rc.Flush(); err != nil {
		return nil, err
	}
	s, b, err = timeAsks(ctx, cfg, bodies.json, bodies.json, natsAsk(nc, api.MatchSubject(e.cfg.Domain), nil), natsAsk(nc, "ckfbench.echo", nil))
	if err != nil {
		return nil, fmt.Errorf("bench: nats: %w", err)
	}
	add("nats json", "bare NATS request/reply, same body and answer size", s, b)

	// The in-process mirror: the same lanes followed in this process,
	// answering with no hop at all. Its baseline is the hop it saves.
	mc, err := e.connect("ckf-bench-mirror")
	if err != nil {
		return nil, err
	}
	mirror, err := client.NewMirror(mc, client.MirrorConfig{Domain: e.cfg.Domain})
	if err != nil {
		return nil, err
	}
	mctx, stop := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- mirror.Run(mctx) }()
	defer func() { stop(); <-mdone }()
	if err := e.waitFor(ctx, "mirror lanes at the indexer's sequences", func() bool {
		want, got := e.ix.Lanes(), mirror.Lanes()
		if len(want) != len(got) {
			return false
		}
		for i := range want {
			if got[i].InstalledSequence != want[i].InstalledSequence || got[i].State != want[i].State {
				return false
			}
		}
		return true
	}); err != nil {
		return nil, err
	}
	hashes := make([]uint64, 0, cfg.Hashes)
	mirrorAsk := func(ctx context.Context, body []byte) (int, error) {
		hashes = hashes[:0]
		for i := 0; i+8 <= len(body); i += 8 {
			hashes = append(hashes, binary.LittleEndian.Uint64(body[i:]))
		}
		r, err := mirror.MatchSequenceHashes(ctx, hashes)
		return len(r.Lanes), err
	}
	s, b, err = timeAsks(ctx, cfg, bodies.binary, bodies.json, mirrorAsk, bareAsk)
	if err != nil {
		return nil, fmt.Errorf("bench: mirror: %w", err)
	}
	add("mirror", "bare net/http round trip, JSON body, same answer size (the hop the mirror saves)", s, b)
	out[len(out)-1].TableBytes = mirror.TableBytes()

	// The route against the match it adds to: the same stack, body and
	// connection, alternating rounds in one run. The route also reads
	// every lane's load and runs the cost policy, and its answer is larger.
	routeAsk := httpAsk(hc, "http://"+srv.Addr().String()+"/v1/route", "application/json")
	rsize, err := routeAsk(ctx, bodies.json[0])
	if err != nil {
		return nil, fmt.Errorf("bench: route: %w", err)
	}
	s, b, err = timeAsks(ctx, cfg, bodies.json, bodies.json, routeAsk, jsonAsk)
	if err != nil {
		return nil, fmt.Errorf("bench: http route: %w", err)
	}
	add("http route", "POST /v1/match, same stack and body", s, b)
	out[len(out)-1].Bytes = rsize
	return out, nil
}
