package indexer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/client"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/unithost"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

const (
	testBlocks = 4096
	waitTotal  = 30 * time.Second
)

func logger(t testing.TB) zerolog.Logger {
	if os.Getenv("CKF_TEST_LOG") != "" {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	return zerolog.Nop()
}

// baseConfig is an indexer config for tests: memory storage, fast backoff,
// a lag bound far above any scheduling delay, stale lanes excluded after
// staleAfter.
func baseConfig(t testing.TB, staleAfter time.Duration) follow.Config {
	pc := consumer.DefaultPoolConfig()
	pc.MaxDirtyToAppliedAge = time.Minute
	return follow.Config{
		Pool:                pc,
		Logger:              logger(t),
		BootstrapBackoffMin: 10 * time.Millisecond,
		BootstrapBackoffMax: 100 * time.Millisecond,
		StatePollInterval:   20 * time.Millisecond,
		Streams:             streams.Options{Memory: true},
		LeaseOptions:        []lease.Option{lease.WithMemoryStorage()},
		LaneStaleAfter:      staleAfter,
		StaleLanes:          follow.StaleExclude,
	}
}

type env struct {
	srv *testenv.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	reg *prometheus.Registry
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := testenv.StartServer(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, nc: nc, js: js, reg: prometheus.NewRegistry()}
}

// start runs a registry until the test ends.
func (e *env) start(t testing.TB, cfg domains.Config) *domains.Registry {
	t.Helper()
	cfg.Registerer = e.reg
	cfg.Logger = logger(t)
	// As global-indexer runs it: every domain on its NATS endpoint too.
	cfg.Base.Attach = indexer.Attach
	r, err := domains.New(e.nc, e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Background(t, r.Run)
	return r
}

// runningRelay is a real relay of one pool on its own connection; kill
// closes that connection under it (kill -9: no lease release).
type runningRelay struct {
	domain, dc string
	nc         *nats.Conn
	js         jetstream.JetStream
	cancel     context.CancelFunc
	done       chan error
}

func (e *env) relay(t testing.TB, domain, dc string, blocks uint64) *runningRelay {
	t.Helper()
	rr, _ := e.relayWith(t, domain, dc, blocks, nil)
	return rr
}

// relayWith is relay with mut applied to its config; it also returns the
// relay.
func (e *env) relayWith(t testing.TB, domain, dc string, blocks uint64, mut func(*relay.Config)) (*runningRelay, *relay.Relay) {
	t.Helper()
	c := relay.DefaultConfig(domain, dc)
	c.Instance = domain + "-" + dc
	c.CKF = ckf.NewConfig(blocks)
	c.PublishInterval = 2 * time.Millisecond
	c.HeartbeatInterval = 20 * time.Millisecond
	c.LeaseTTL = 3 * time.Second
	c.Streams = streams.Options{Memory: true}
	c.Logger = logger(t)
	if mut != nil {
		mut(&c)
	}
	nc := e.srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(nc, js, c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rr := &runningRelay{domain: domain, dc: dc, nc: nc, js: js, cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(ctx) }()
	t.Cleanup(func() { rr.kill(t) })
	return rr, r
}

func (rr *runningRelay) kill(t testing.TB) {
	t.Helper()
	if rr.cancel == nil {
		return
	}
	rr.nc.Close()
	rr.cancel()
	select {
	case <-rr.done:
	case <-time.After(waitTotal):
		t.Errorf("relay %s/%s did not stop", rr.domain, rr.dc)
	}
	rr.cancel = nil
}

// workload stores, for chain i, its first depth(i) blocks on worker 1.
type workload struct {
	chains [][]ckf.LocalBlockHash
	mod    int
}

func newWorkload(seed uint64, n, mod int) *workload {
	w := &workload{mod: mod}
	for i := range n {
		c := make([]ckf.LocalBlockHash, 8)
		x := seed*1000 + uint64(i)
		for j := range c {
			x = x*0x9E3779B97F4A7C15 + 0xD1B54A32D192ED03
			c[j] = ckf.LocalBlockHash(x ^ (x >> 29) | 1)
		}
		w.chains = append(w.chains, c)
	}
	return w
}

func (w *workload) depth(i int) int { return i % w.mod }

func (w *workload) publish(t testing.TB, rr *runningRelay) {
	t.Helper()
	subj, err := wire.WorkerEventsSubject(rr.domain, rr.dc, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTotal)
	defer cancel()
	for i, c := range w.chains {
		if w.depth(i) == 0 {
			continue
		}
		var blocks []string
		for _, h := range c[:w.depth(i)] {
			blocks = append(blocks, fmt.Sprintf(`{"block_hash":%d,"tokens_hash":%d}`, uint64(h), uint64(h)))
		}
		msg := fmt.Sprintf(`{"worker_id":1,"event":{"event_id":%d,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[%s]}}}}`, i+1, strings.Join(blocks, ","))
		if _, err := rr.js.Publish(ctx, subj, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
}

// exact reports the first chain whose depth on dc in model's answer is not
// the exact one.
func (w *workload) exact(r *domains.Registry, model, dc string) error {
	for i, c := range w.chains {
		resp, err := r.Match(api.Query{Locals: c, Model: model})
		if err != nil {
			return fmt.Errorf("%s chain %d: %w", model, i, err)
		}
		found := false
		for _, l := range resp.Lanes {
			if l.DC == dc {
				found = true
				if int(l.Depth) != w.depth(i) {
					return fmt.Errorf("%s chain %d: %s depth %d, exact %d", model, i, dc, l.Depth, w.depth(i))
				}
			}
		}
		if !found {
			return fmt.Errorf("%s chain %d: %s not in the answer %+v", model, i, dc, resp)
		}
	}
	return nil
}

func eventually(t testing.TB, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, waitTotal, 10*time.Millisecond, func() error {
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// A wrong-format lane refused in one domain, a relay killed in another
// (its lane goes stale, the domain unready) leave the third domain's
// answers exact and its readiness unchanged, at every step.
func TestOneDomainsTroubleLeavesTheOthersUnchanged(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, domains.Config{Base: baseConfig(t, time.Second), Domains: []string{"llama", "qwen", "mistral"}})
	llama := e.relay(t, "llama", "dc-a", testBlocks)
	qwen := e.relay(t, "qwen", "dc-a", testBlocks)
	mistral := e.relay(t, "mistral", "dc-a", testBlocks)
	wl, wq, wm := newWorkload(1, 40, 5), newWorkload(2, 40, 7), newWorkload(3, 40, 3)
	wl.publish(t, llama)
	wq.publish(t, qwen)
	wm.publish(t, mistral)
	eventually(t, "llama exact", func() error { return wl.exact(r, "llama", "dc-a") })
	eventually(t, "qwen exact", func() error { return wq.exact(r, "qwen", "dc-a") })
	eventually(t, "mistral exact", func() error { return wm.exact(r, "mistral", "dc-a") })
	// The same chain answers per domain: llama's chains are nowhere in qwen.
	resp, err := r.Match(api.Query{Locals: wl.chains[4], Model: "qwen"})
	if err != nil || resp.Best != nil {
		t.Fatalf("llama's chain in qwen: %+v %v, want no depth", resp, err)
	}

	steady := func() {
		t.Helper()
		if err := wl.exact(r, "llama", "dc-a"); err != nil {
			t.Fatal(err)
		}
		if ready, known := r.DomainReady("llama"); !ready || !known {
			t.Fatalf("llama ready %t known %t", ready, known)
		}
	}
	// A refusal in qwen: a DC whose relay sizes its filter differently.
	e.relay(t, "qwen", "dc-b", 4*testBlocks)
	eventually(t, "qwen dc-b refused", func() error {
		for _, l := range r.Lanes() {
			if l.Domain == "qwen" && l.DC == "dc-b" && strings.Contains(l.LastFault, "format") {
				return nil
			}
		}
		return fmt.Errorf("lanes %+v", r.Lanes())
	})
	steady()
	if err := wq.exact(r, "qwen", "dc-a"); err != nil {
		t.Fatalf("qwen's own good lane: %v", err)
	}
	// A stale lane in mistral: its only relay dies.
	mistral.kill(t)
	eventually(t, "mistral unready", func() error {
		if ready, _ := r.DomainReady("mistral"); ready {
			return errors.New("still ready")
		}
		return nil
	})
	if _, err := r.Match(api.Query{Locals: wm.chains[1], Model: "mistral"}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("mistral answered with no fresh lane: %v", err)
	}
	steady()
	if !r.Ready() {
		t.Fatal("the process is unready while two domains serve")
	}
	// Every lane row and series names its domain.
	for _, l := range r.Lanes() {
		if l.Domain == "" {
			t.Fatalf("lane without a domain: %+v", l)
		}
	}
	if promtest.Count(e.reg, follow.MetricBootstraps+`{domain="llama",outcome="installed"}`) == 0 ||
		promtest.Count(e.reg, follow.MetricBootstraps+`{domain="qwen",outcome="installed"}`) == 0 {
		t.Fatalf("bootstraps not labelled by domain:\n%s", promtest.Text(e.reg))
	}
}

// Queries over HTTP name their model; none goes to the default domain; an
// unknown one is 404; /readyz?domain= answers per domain.
func TestHTTPQueriesNameTheirModel(t *testing.T) {
	e := newEnv(t)
	r := e.start(t, domains.Config{Base: baseConfig(t, 0), Domains: []string{"llama", "qwen"}})
	llama := e.relay(t, "llama", "dc-a", testBlocks)
	qwen := e.relay(t, "qwen", "dc-a", testBlocks)
	wl, wq := newWorkload(1, 20, 5), newWorkload(2, 20, 7)
	wl.publish(t, llama)
	wq.publish(t, qwen)
	eventually(t, "llama exact", func() error { return wl.exact(r, "llama", "dc-a") })
	eventually(t, "qwen exact", func() error { return wq.exact(r, "qwen", "dc-a") })
	apiM, err := queryapi.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"domain": ""}, e.reg))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(queryapi.Handler(r, apiM, e.reg))
	defer srv.Close()
	post := func(body string) (int, api.MatchResponse) {
		t.Helper()
		res, err := http.Post(srv.URL+"/v1/match", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out api.MatchResponse
		if res.StatusCode == http.StatusOK {
			if err := jsonDecode(res, &out); err != nil {
				t.Fatal(err)
			}
		}
		return res.StatusCode, out
	}
	c := wq.chains[6] // depth 6 in qwen
	hashes := fmt.Sprint(uint64(c[0]))
	for _, h := range c[1:] {
		hashes += "," + fmt.Sprint(uint64(h))
	}
	if code, resp := post(`{"model":"qwen","local_hashes":[` + hashes + `]}`); code != 200 || resp.Best == nil || resp.Best.Depth != 6 {
		t.Fatalf("qwen: %d %+v, want depth 6", code, resp)
	}
	if code, resp := post(`{"local_hashes":[` + hashes + `]}`); code != 200 || resp.Best != nil {
		t.Fatalf("default (llama): %d %+v, want no depth", code, resp)
	}
	if code, _ := post(`{"domain":"gemma","local_hashes":[` + hashes + `]}`); code != http.StatusNotFound {
		t.Fatalf("unknown model: %d, want 404", code)
	}
	for d, want := range map[string]int{"llama": 200, "qwen": 200, "gemma": 404} {
		res, err := http.Get(srv.URL + "/readyz?domain=" + d)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("/readyz?domain=%s: %d, want %d", d, res.StatusCode, want)
		}
	}
	// /v1/route names its model too.
	res, err := http.Post(srv.URL+"/v1/route", "application/json", bytes.NewBufferString(`{"model":"qwen","local_hashes":[`+hashes+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(rb), `"depth":6`) {
		t.Fatalf("route qwen: %d %s", res.StatusCode, rb)
	}
	// A binary body names its model in the URL's query: the Go client's
	// ForModel.
	seqs := ckf.SequenceHashes(nil, c)
	hs := make([]uint64, len(seqs))
	for i, h := range seqs {
		hs[i] = uint64(h)
	}
	hc, err := client.NewHTTP(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if resp, err := hc.ForModel("qwen").MatchSequenceHashes(ctx, hs); err != nil || resp.Best == nil || resp.Best.Depth != 6 {
		t.Fatalf("qwen by hashes: %+v %v, want depth 6", resp, err)
	}
	if resp, err := hc.MatchSequenceHashes(ctx, hs); err != nil || resp.Best != nil {
		t.Fatalf("default (llama) by hashes: %+v %v, want no depth", resp, err)
	}
	if resp, err := hc.ForModel("qwen").RouteSequenceHashes(ctx, hs, api.RouteOptions{Policy: "prefix", InputTokens: 900}); err != nil || len(resp.Ranked) == 0 || resp.Ranked[0].Depth != 6 {
		t.Fatalf("qwen route by hashes: %+v %v, want depth 6 first", resp, err)
	}
	if _, err := hc.ForModel("gemma").MatchSequenceHashes(ctx, hs); !errors.Is(err, client.ErrUnknownModel) {
		t.Fatalf("gemma by hashes: %v, want ErrUnknownModel", err)
	}
	if _, err := hc.ForModel("qwen").Match(ctx, api.MatchRequest{Model: "llama", LocalHashes: hs}); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("llama in a request for qwen: %v, want ErrBadRequest", err)
	}
	if resp, err := hc.ForModel("qwen").Match(ctx, api.MatchRequest{SequenceHashes: hs}); err != nil || resp.Best == nil || resp.Best.Depth != 6 {
		t.Fatalf("qwen JSON through ForModel: %+v %v, want depth 6", resp, err)
	}
	// A JSON body names its model itself, never in the URL as well.
	res, err = http.Post(srv.URL+"/v1/match?model=qwen", "application/json", bytes.NewBufferString(`{"local_hashes":[`+hashes+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("JSON with ?model=: %d, want 400", res.StatusCode)
	}
	if _, err := r.Route(api.Query{Locals: c, Model: "gemma"}, api.RouteOptions{}); !errors.Is(err, api.ErrUnknownDomain) {
		t.Fatalf("route of an unknown model: %v", err)
	}
	// A domain's own service refuses another domain's model.
	svc, ok := r.Service("llama")
	if _, err := svc.Match(api.Query{Locals: c, Model: "qwen"}); !ok || !errors.Is(err, api.ErrUnknownDomain) {
		t.Fatalf("llama's service answered qwen: %v", err)
	}
	// Each domain also answers on its own NATS subject.
	msg, err := e.nc.Request(api.MatchSubject("qwen"), []byte(`{"local_hashes":[`+hashes+`]}`), 5*time.Second)
	if err != nil || !strings.Contains(string(msg.Data), `"depth":6`) {
		t.Fatalf("NATS qwen: %v %s", err, msg.Data)
	}
}

// The domain bound: with discovery on, domains appear as relays register
// them, and the one past MaxDomains is refused (typed, counted) while the
// ones served keep answering; a domain whose table passes MaxTableBytes
// gets no table, its lanes say why, and the others keep theirs.
func TestDomainBounds(t *testing.T) {
	e := newEnv(t)
	tableBytes := follow.TableBytesOf(mustFormat(t, testBlocks))
	r := e.start(t, domains.Config{Base: baseConfig(t, 0), Domains: []string{"llama"}, Discover: true,
		MaxDomains: 3, MaxTableBytes: 2 * tableBytes})
	llama := e.relay(t, "llama", "dc-a", testBlocks)
	wl := newWorkload(1, 20, 5)
	wl.publish(t, llama)
	eventually(t, "llama exact", func() error { return wl.exact(r, "llama", "dc-a") })

	qwen := e.relay(t, "qwen", "dc-a", testBlocks)
	wq := newWorkload(2, 20, 7)
	wq.publish(t, qwen)
	eventually(t, "qwen discovered and exact", func() error { return wq.exact(r, "qwen", "dc-a") })
	if got := r.TableBytes(); got != 2*tableBytes {
		t.Fatalf("table bytes %d, want %d", got, 2*tableBytes)
	}
	// A third domain fits the count but not the table memory.
	e.relay(t, "mistral", "dc-a", testBlocks)
	eventually(t, "mistral refused its table", func() error {
		if promtest.Count(e.reg, domains.MetricRefused+`{kind="over_budget"}`) == 0 {
			return errors.New("no over_budget refusal counted")
		}
		for _, l := range r.Lanes() {
			if l.Domain == "mistral" && strings.Contains(l.LastFault, "over_budget") {
				return nil
			}
		}
		return fmt.Errorf("lanes %+v", r.Lanes())
	})
	// A fourth passes the count.
	e.relay(t, "gemma", "dc-a", testBlocks)
	eventually(t, "gemma refused", func() error {
		if promtest.Count(e.reg, domains.MetricRefused+`{kind="too_many"}`) == 0 {
			return errors.New("no too_many refusal counted")
		}
		return nil
	})
	var de *unithost.Error
	if err := r.Add("gemma"); !errors.As(err, &de) || !errors.Is(err, unithost.ErrTooMany) || de.Name != "gemma" {
		t.Fatalf("Add past the bound: %v", err)
	}
	if _, err := r.Match(api.Query{Locals: wl.chains[1], Model: "gemma"}); !errors.Is(err, api.ErrUnknownDomain) {
		t.Fatalf("gemma answered: %v", err)
	}
	if err := wl.exact(r, "llama", "dc-a"); err != nil {
		t.Fatal(err)
	}
	if err := wq.exact(r, "qwen", "dc-a"); err != nil {
		t.Fatal(err)
	}
	// Removing a domain frees its table and its place: mistral's lanes,
	// retrying, now get a table; gemma may come in.
	if !r.Remove("qwen") {
		t.Fatal("qwen not removed")
	}
	eventually(t, "mistral ready after qwen left", func() error {
		if ready, _ := r.DomainReady("mistral"); !ready {
			return errors.New("mistral not ready")
		}
		return nil
	})
	if err := r.Add("gemma"); err != nil {
		t.Fatalf("gemma after qwen left: %v", err)
	}
	if err := wl.exact(r, "llama", "dc-a"); err != nil {
		t.Fatal(err)
	}
	// A domain removed comes back: its series left with it.
	if !r.Remove("gemma") {
		t.Fatal("gemma not removed")
	}
	if err := r.Add("gemma"); err != nil {
		t.Fatalf("gemma added again: %v", err)
	}
	if _, known := r.DomainReady("gemma"); !known {
		t.Fatal("gemma not served after it was added again")
	}
}

func mustFormat(t testing.TB, blocks uint64) ckf.FormatIdentity {
	f, err := ckf.NewConfig(blocks).Format()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func jsonDecode(res *http.Response, v any) error { return json.NewDecoder(res.Body).Decode(v) }
