package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/route"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// simMetrics serves one llm-d-inference-sim /metrics text (captured from
// the running simulator, internal/enginemetrics/testdata) and can switch
// to another, as the engine's queue comes and goes.
type simMetrics struct {
	body atomic.Pointer[[]byte]
	srv  *httptest.Server
}

func serveSimMetrics(t *testing.T, body []byte) *simMetrics {
	m := &simMetrics{}
	m.body.Store(&body)
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(*m.body.Load())
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *simMetrics) set(body []byte) { m.body.Store(&body) }

func readSimMetrics(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../internal/enginemetrics/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// With one llm-d-inference-sim per DC, the engine bridge's scrape of the
// simulator's vLLM metrics turns into each DC's load window, and a DC
// whose simulator holds a queue loses cold routes to an idle DC; when the
// queue moves, the routes follow it. The queue (8 waiting requests, one
// running, captured with --max-num-seqs 1) costs more than the default
// affinity margin (400 ms): below it, cold prompts keep spreading over the
// DCs by their hash.
func TestRoutesMoveAwayFromADCWhoseEngineHasAQueue(t *testing.T) {
	idle, queued := readSimMetrics(t, "llm-d-inference-sim-idle.prom"), readSimMetrics(t, "llm-d-inference-sim-queued.prom")
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	rc := route.DefaultConfig()
	rc.RTT = map[string]time.Duration{"dc-a": 10 * time.Millisecond, "dc-b": 10 * time.Millisecond}
	cfg := indexerConfig(t, nil)
	cfg.Route = follow.RouteConfig{Policy: rc, BlockSize: 16}
	ix := startIndexer(t, nc, js, cfg)
	engines := map[string]*simMetrics{"dc-a": serveSimMetrics(t, queued), "dc-b": serveSimMetrics(t, idle)}
	for i, dc := range []string{"dc-a", "dc-b"} {
		c := relayConfig(t, dc, "relay-"+dc, nil)
		c.LoadInterval = 50 * time.Millisecond
		startRelay(t, nc, js, c)
		bjs, err := jetstream.New(srv.Connect(t))
		if err != nil {
			t.Fatal(err)
		}
		br, err := bridge.New(bridge.Config{Domain: domain, DC: dc, BlockSize: 16, LoadInterval: 50 * time.Millisecond,
			Streams: streams.Options{Memory: true}, Logger: logger(t).With().Str("proc", "bridge-"+dc).Logger(),
			// The simulator's events are not needed here: an endpoint
			// nothing serves, only its metrics.
			Engines: []bridge.EngineSpec{{WorkerID: uint64(i + 1), Pub: fmt.Sprintf("tcp://127.0.0.1:%d", 1+i),
				Metrics: engines[dc].srv.URL + "/metrics"}}}, bjs)
		if err != nil {
			t.Fatal(err)
		}
		background(t, br.Run)
	}
	hs := httptest.NewServer(queryapi.Handler(ix.Service, ix.APIMetrics(), nil))
	t.Cleanup(hs.Close)
	cold := make([]uint32, 64) // a prompt no DC holds
	for i := range cold {
		cold[i] = uint32(900000 + i)
	}
	// ask is POST /v1/route for the cold prompt; 503 until a lane is ready.
	ask := func() (api.RouteResponse, bool) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"tokens": cold, "block_size": 16})
		resp, err := http.Post(hs.URL+"/v1/route", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r api.RouteResponse
		if resp.StatusCode != http.StatusOK {
			return r, false
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatalf("route answer: %v", err)
		}
		return r, true
	}
	lane := func(r api.RouteResponse, dc string) api.RouteLane {
		for _, l := range r.Ranked {
			if l.DC == dc {
				return l
			}
		}
		return api.RouteLane{}
	}
	// routesTo waits until the windows carry the simulators' load (the
	// queued one's waiting requests, the idle one's none) and the cold
	// route goes to want.
	routesTo := func(want, busy string) {
		t.Helper()
		var last api.RouteResponse
		defer func() {
			if t.Failed() {
				t.Logf("last route: %+v", last)
			}
		}()
		testenv.WaitFor(t, settle, "cold routes to "+want, func() bool {
			var ok bool
			if last, ok = ask(); !ok {
				return false
			}
			b, w := lane(last, busy), lane(last, want)
			return b.Load.HasRequests && b.Load.Waiting > 0 && w.Load.HasRequests && w.Load.Waiting == 0 &&
				w.Load.HasKV && w.Load.KVCapacityBlocks > 0 && len(last.Ranked) == 2 && last.Chosen().DC == want
		})
		if b, w := lane(last, busy), lane(last, want); b.Terms.QueueMs <= w.Terms.QueueMs {
			t.Fatalf("queue terms: %s %v, %s %v", busy, b.Terms.QueueMs, want, w.Terms.QueueMs)
		}
	}
	routesTo("dc-b", "dc-a")
	// The queue moves to dc-b's engine: so do the routes.
	engines["dc-a"].set(idle)
	engines["dc-b"].set(queued)
	routesTo("dc-a", "dc-b")
}
