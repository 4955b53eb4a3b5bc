package e2e

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/client"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/route"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// routeWithoutAges zeroes what depends on when the answer was taken.
func routeWithoutAges(r api.RouteResponse) api.RouteResponse {
	r.Ranked = append([]api.RouteLane(nil), r.Ranked...)
	for i := range r.Ranked {
		r.Ranked[i].AgeMs = 0
		r.Ranked[i].Load.AgeMs = 0
	}
	return r
}

// POST /v1/route over HTTP, the NATS endpoint, pkg/client on both and the
// in-process Mirror give the same answer for the same state (real relays
// with load windows, a real indexer), for JSON and binary requests; bad
// requests are refused alike.
func TestRouteAnswersAlikeOverEveryPath(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	rc := route.DefaultConfig()
	rc.RTT = map[string]time.Duration{"dc-a": 5 * time.Millisecond, "dc-b": 40 * time.Millisecond}
	routeCfg := follow.RouteConfig{Policy: rc, BlockSize: 16, PrefillRate: map[string]float64{"dc-b": 20000}}
	cfg := indexerConfig(t, nil)
	cfg.Route = routeCfg
	ix := startIndexer(t, nc, js, cfg)
	m, err := client.NewMirror(srv.Connect(t), client.MirrorConfig{Domain: domain, Logger: logger(t).With().Str("proc", "mirror").Logger(),
		Route: rc, RoutePrefillRate: routeCfg.PrefillRate, RouteBlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	background(t, m.Run)
	// dc-a knows its capacity (occupancy in its windows), dc-b does not:
	// its load is missing and must never read as zero.
	ca := relayConfig(t, "dc-a", "relay-a", nil)
	ca.KVCapacityBlocks, ca.LoadInterval = 4096, 50*time.Millisecond
	cb := relayConfig(t, "dc-b", "relay-b", nil)
	cb.LoadInterval = 50 * time.Millisecond
	startRelay(t, nc, js, ca)
	startRelay(t, nc, js, cb)
	w := newWorkload(t, []string{"dc-a", "dc-b"}, 200, 11)
	w.publish(t, js, 200)
	w.converge(t, ix)

	hs := httptest.NewServer(queryapi.Handler(ix.Service, ix.APIMetrics(), nil))
	t.Cleanup(hs.Close)
	hc, err := client.NewHTTP(hs.URL, hs.Client())
	if err != nil {
		t.Fatal(err)
	}
	natsc := client.NewNATS(srv.Connect(t), domain)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Wait until the mirror has the indexer's lanes and both see dc-a's
	// occupancy at the same value.
	testenv.WaitFor(t, settle, "mirror and indexer on the same lanes and load", func() bool {
		want, got := ix.Lanes(), m.Lanes()
		if len(want) != 2 || len(got) != 2 {
			return false
		}
		for i := range want {
			if got[i].InstalledSequence != want[i].InstalledSequence || got[i].Epoch != want[i].Epoch || got[i].State != want[i].State {
				return false
			}
		}
		r1, err1 := ix.Route(api.Query{Locals: w.steps[0].Locals}, api.RouteOptions{Probe: true})
		r2, err2 := m.Route(ctx, api.RouteRequest{MatchRequest: api.MatchRequest{LocalHashes: hashes(w.steps[0].Locals)}, Probe: true})
		return err1 == nil && err2 == nil && reflect.DeepEqual(routeWithoutAges(r1), routeWithoutAges(r2)) &&
			findLane(r1, "dc-a").Load.HasKV && findLane(r1, "dc-a").Load.KVUsedBlocks > 0
	})

	paths := map[string]client.Router{"http": hc, "nats": natsc, "mirror": m}
	chosen := map[string]int{}
	for i, st := range w.steps {
		if len(st.Locals) == 0 {
			continue
		}
		// Probes: a route that counts its request in flight would move the
		// next path's load.
		opts := api.RouteOptions{InputTokens: 16*len(st.Locals) + 7, OutputTokens: 100, Probe: true}
		want, err := ix.Route(api.Query{Locals: st.Locals}, opts)
		if err != nil {
			t.Fatal(err)
		}
		want = routeWithoutAges(want)
		if b := findLane(want, "dc-b"); !b.LoadMissing || b.Load.Known() || b.Terms.QueueMs <= 0 {
			t.Fatalf("step %d: dc-b without load %+v: missing load must be flagged and costed above zero", i, b)
		}
		chosen[want.Chosen().DC]++
		seqs := ckf.SequenceHashes(nil, st.Locals)
		// The relays keep sending load windows (every 50 ms), so the state
		// may move between the indexer's answer and a path's: a mismatch
		// is asked again, with the indexer's answer read anew, until the
		// two were read at the same state.
		same := func(what string, query func() (api.RouteResponse, error)) {
			t.Helper()
			deadline := time.Now().Add(5 * time.Second)
			for {
				got, err := query()
				if err == nil && reflect.DeepEqual(routeWithoutAges(got), want) {
					return
				}
				if err != nil || time.Now().After(deadline) {
					t.Fatalf("step %d over %s: %+v %v\nindexer %+v", i, what, got, err, want)
				}
				time.Sleep(20 * time.Millisecond)
				fresh, err := ix.Route(api.Query{Locals: st.Locals}, opts)
				if err != nil {
					t.Fatal(err)
				}
				want = routeWithoutAges(fresh)
			}
		}
		for name, c := range paths {
			same(name+" (JSON)", func() (api.RouteResponse, error) {
				return c.Route(ctx, api.RouteRequest{MatchRequest: api.MatchRequest{LocalHashes: hashes(st.Locals)},
					InputTokens: opts.InputTokens, OutputTokens: opts.OutputTokens, Probe: true})
			})
			same(name+" (binary)", func() (api.RouteResponse, error) {
				return c.RouteSequenceHashes(ctx, seqHashes(seqs), opts)
			})
		}
		if i > 40 {
			break
		}
	}
	if len(chosen) == 0 {
		t.Fatal("no route compared")
	}

	// The probes counted nothing. A route sent over each path counts its
	// tokens in flight where it was decided (the indexer for HTTP and NATS,
	// the mirror for itself), and the mirror's account reaches the
	// indexer on ckfload.<domain>.<dc>.inflight.
	added := follow.MetricInflightEvents + `{outcome="added"}`
	if n := promtest.Count(ix.Metrics(), added); n != 0 {
		t.Fatalf("probes accounted %d routes", n)
	}
	for name, c := range paths {
		if _, err := c.Route(ctx, api.RouteRequest{MatchRequest: api.MatchRequest{LocalHashes: hashes(w.steps[0].Locals)}, InputTokens: 4096}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	testenv.WaitFor(t, settle, "the indexer applies the mirror's account", func() bool {
		return promtest.Count(ix.Metrics(), follow.MetricInflightAccounts+`{direction="received",outcome="applied"}`) == 1
	})
	if n := promtest.Count(ix.Metrics(), added); n != 3 {
		t.Fatalf("the indexer holds %d entries, want its 2 routes and the mirror's", n)
	}

	// Bad requests: the same refusal on every path.
	big := make([]uint64, api.MaxBlocks+1)
	for name, c := range paths {
		var se *client.StatusError
		_, err := c.Route(ctx, api.RouteRequest{MatchRequest: api.MatchRequest{LocalHashes: []uint64{1}}, Policy: "fastest"})
		if !errors.As(err, &se) || !errors.Is(err, client.ErrBadRequest) || se.Field != "policy" {
			t.Fatalf("%s: bad policy: %v", name, err)
		}
		_, err = c.RouteSequenceHashes(ctx, []uint64{1}, api.RouteOptions{Stale: "ignore"})
		if !errors.As(err, &se) || !errors.Is(err, client.ErrBadRequest) || se.Field != "stale" {
			t.Fatalf("%s: bad stale mode: %v", name, err)
		}
		if _, err = c.RouteSequenceHashes(ctx, big, api.RouteOptions{}); !errors.Is(err, client.ErrTooLarge) {
			t.Fatalf("%s: %d hashes: %v, want 413", name, len(big), err)
		}
	}
	// Over HTTP: an unaccepted media type, options in the URL of a JSON
	// body, a body over the limit.
	for name, tc := range map[string]struct {
		ct, query string
		body      []byte
		status    int
	}{
		"text/plain":       {"text/plain", "", []byte(`{"local_hashes":[1]}`), http.StatusUnsupportedMediaType},
		"json with query":  {"application/json", "?policy=prefix", []byte(`{"local_hashes":[1]}`), http.StatusBadRequest},
		"unknown field":    {"application/json", "", []byte(`{"local_hashes":[1],"weights":{}}`), http.StatusBadRequest},
		"over 4 MiB":       {"application/json", "", make([]byte, api.MaxRequestBytes+1), http.StatusRequestEntityTooLarge},
		"ragged binary":    {api.ContentTypeSeqHashes, "", []byte{1, 2, 3}, http.StatusBadRequest},
		"bad query option": {api.ContentTypeSeqHashes, "?input_tokens=-4", make([]byte, 8), http.StatusBadRequest},
	} {
		resp, err := http.Post(hs.URL+"/v1/route"+tc.query, tc.ct, bytes.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Fatalf("%s: status %d, want %d", name, resp.StatusCode, tc.status)
		}
	}
}

func findLane(r api.RouteResponse, dc string) api.RouteLane {
	for _, l := range r.Ranked {
		if l.DC == dc {
			return l
		}
	}
	return api.RouteLane{}
}

func hashes(ls []ckf.LocalBlockHash) []uint64 {
	out := make([]uint64, len(ls))
	for i, l := range ls {
		out[i] = uint64(l)
	}
	return out
}

func seqHashes(ss []ckf.SequenceHash) []uint64 {
	out := make([]uint64, len(ss))
	for i, s := range ss {
		out[i] = uint64(s)
	}
	return out
}
