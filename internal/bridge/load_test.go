package bridge

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"

	"github.com/ckfrelay/ckfrelay/pkg/prefillest"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// The bridge scrapes each engine's real HTTP metrics endpoint and
// publishes one report per worker, summed over its engines (two vLLM
// engine processes of worker 7 here); a worker one of whose engines does
// not answer is not reported at all, and a worker with an engine without
// an endpoint is never reported.
func TestBridgeReportsEachWorkersServingLoadFromItsEnginesMetrics(t *testing.T) {
	vllm, err := os.ReadFile("../enginemetrics/testdata/vllm.prom")
	if err != nil {
		t.Fatal(err)
	}
	serve := func(body []byte, status int) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			w.Write(body)
		}))
		t.Cleanup(s.Close)
		return s
	}
	a, b, down := serve(vllm, 200), serve(vllm, 200), serve(nil, 503)
	srv := testenv.StartServer(t)
	nc := srv.Connect(t)
	cfg := Config{Domain: "d", DC: "dc-a", BlockSize: 16, LoadInterval: 20 * time.Millisecond, Engines: []EngineSpec{
		{WorkerID: 7, Pub: "tcp://127.0.0.1:1", Metrics: a.URL + "/metrics"},
		{WorkerID: 7, Pub: "tcp://127.0.0.1:2", DPRank: 1, Metrics: b.URL + "/metrics"},
		{WorkerID: 8, Pub: "tcp://127.0.0.1:3", Metrics: down.URL + "/metrics"},
		{WorkerID: 9, Pub: "tcp://127.0.0.1:4", Metrics: a.URL + "/metrics"},
		{WorkerID: 9, Pub: "tcp://127.0.0.1:5", DPRank: 1},
	}}
	br, err := New(cfg, srv.JetStream(t))
	if err != nil {
		t.Fatal(err)
	}
	workers := br.loadWorkers()
	if len(workers) != 2 || len(workers[7]) != 2 || len(workers[8]) != 1 {
		t.Fatalf("workers %v: want 7 (two engines) and 8; 9 has an engine without an endpoint", workers)
	}
	got := make(chan wire.WorkerLoad, 64)
	sub, err := nc.Subscribe("ckfload.d.dc-a.worker.*", func(m *nats.Msg) {
		w, err := wire.DecodeWorkerLoad(m.Data)
		if err != nil {
			t.Errorf("report does not decode: %v", err)
			return
		}
		if id, err := wire.ParseWorkerLoadSubject(m.Subject, "d", "dc-a"); err != nil || id != w.WorkerID {
			t.Errorf("report of worker %d on %s", w.WorkerID, m.Subject)
		}
		got <- w
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); br.reportLoad(ctx, nc, workers) }()
	defer func() { cancel(); <-done }()
	var last uint64
	for i := 0; i < 3; i++ {
		select {
		case w := <-got:
			if w.WorkerID != 7 {
				t.Fatalf("worker %d reported", w.WorkerID)
			}
			// Prompt tokens to prefill: 10 waiting × the mean prompt of
			// the finished requests (360,000 tokens over 120).
			want := wire.ServingLoad{Running: 10, Waiting: 10, ActiveDecodeBlocks: 12000, ActivePrefillTokens: 30000}
			if w.Flags != wire.LoadRequests|wire.LoadKV|wire.LoadDecode|wire.LoadPrefill|wire.LoadPrefillEstimated || w.Serving != want || w.KVCapacityBlocks != 32000 || w.Sequence <= last {
				t.Fatalf("report %+v: want twice one engine's load, a rising sequence", w)
			}
			last = w.Sequence
		case <-time.After(20 * time.Second):
			t.Fatal("no report")
		}
	}
	var m dto.Metric
	if err := br.m.loadScrapes.WithLabelValues("error").Write(&m); err != nil || m.GetCounter().GetValue() == 0 {
		t.Fatal("failed scrapes of worker 8 not counted")
	}
}

func TestEngineSpecTakesAMetricsEndpoint(t *testing.T) {
	s, err := ParseEngine("7=tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558,metrics=http://10.0.0.5:8000/metrics")
	if err != nil || s.Metrics != "http://10.0.0.5:8000/metrics" {
		t.Fatalf("%+v %v", s, err)
	}
	if again, err := ParseEngine(s.String()); err != nil || again != s {
		t.Fatalf("round trip: %+v %v", again, err)
	}
	for _, bad := range []string{"7=tcp://h:1,metrics=tcp://h:8000", "7=tcp://h:1,metrics=http://", "7=tcp://h:1,metrics=:::"} {
		if _, err := ParseEngine(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// An engine whose metrics hold a value no engine can have (here a waiting
// count that underflowed) is not reported, and the scrape is counted as
// out of range, apart from failed scrapes.
func TestBridgeRefusesAnEnginesOutOfRangeLoad(t *testing.T) {
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("vllm:num_requests_running 2\nvllm:num_requests_waiting 1.8446744073709552e+19\n"))
	}))
	t.Cleanup(bad.Close)
	srv := testenv.StartServer(t)
	br, err := New(Config{Domain: "d", DC: "dc-a", BlockSize: 16, Engines: []EngineSpec{
		{WorkerID: 7, Pub: "tcp://127.0.0.1:1", Metrics: bad.URL + "/metrics"}}}, srv.JetStream(t))
	if err != nil {
		t.Fatal(err)
	}
	if rep, ok := br.scrapeWorker(context.Background(), 7, []string{bad.URL + "/metrics"}, &prefillest.Estimator{}); ok {
		t.Fatalf("reported %+v", rep)
	}
	for outcome, want := range map[string]float64{"out_of_range": 1, "error": 0, "ok": 0} {
		var m dto.Metric
		if err := br.m.loadScrapes.WithLabelValues(outcome).Write(&m); err != nil || m.GetCounter().GetValue() != want {
			t.Errorf("scrapes %s = %v, want %v", outcome, m.GetCounter().GetValue(), want)
		}
	}
}

// The pending prefill estimate follows the requests finished between two
// scrapes: waiting × their mean prompt, not the lifetime mean; an engine
// without the counters reports request counts only.
func TestBridgeEstimatesPendingPrefillFromCounterDeltas(t *testing.T) {
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(body.Load().(string)))
	}))
	t.Cleanup(srv.Close)
	br, err := New(Config{Domain: "d", DC: "dc-a", BlockSize: 16, Engines: []EngineSpec{
		{WorkerID: 1, Pub: "tcp://127.0.0.1:1", Metrics: srv.URL}}}, testenv.StartServer(t).JetStream(t))
	if err != nil {
		t.Fatal(err)
	}
	page := func(waiting int, tokens, requests float64) string {
		return fmt.Sprintf("vllm:num_requests_running 1\nvllm:num_requests_waiting %d\n"+
			"vllm:prompt_tokens_total %g\nvllm:request_success_total %g\n", waiting, tokens, requests)
	}
	var est prefillest.Estimator
	// 4 finished requests of 5,000 tokens move the lifetime mean of 100 towards 5,000.
	m := prefillest.Smooth(100, 5000, 4)
	for i, c := range []struct {
		page string
		want uint64
		flag bool
	}{
		{page(2, 1000, 10), 2 * 100, true},                                       // lifetime mean 100
		{page(3, 1000+4*5000, 14), uint64(math.Round(3 * m)), true},              // 4 finished, 5,000 each
		{page(1, 1000+4*5000, 14), uint64(math.Round(m)), true},                  // none finished: the last mean
		{"vllm:num_requests_running 1\nvllm:num_requests_waiting 4\n", 0, false}, // no counters
	} {
		body.Store(c.page)
		rep, ok := br.scrapeWorker(context.Background(), 1, []string{srv.URL}, &est)
		if !ok || rep.Flags.Has(wire.LoadPrefill) != c.flag || rep.Flags.Has(wire.LoadPrefillEstimated) != c.flag || rep.Serving.ActivePrefillTokens != c.want {
			t.Fatalf("scrape %d: %+v %v, want prefill %d (flag %v)", i, rep, ok, c.want, c.flag)
		}
	}
}
