//go:build ckftest

package e2e

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// kvFaults is how often the indexer's kvrelay source a-kv was invalidated
// for reason.
func kvFaults(s *indexerProc, reason client.Reason) uint64 {
	return promtest.Count(s.Metrics(), client.MetricFaults+`{source="a-kv",reason="`+string(reason)+`"}`)
}

// The round trip: a real relay serves its pool over kvrelay, the indexer
// follows it as lane a-kv next to the same relay's NATS lane a, and both
// answer the exact depths with identical lanes; then the relay is killed,
// the standby takes over, and the kvrelay lane follows the new producer
// generation and settles exact again.
func TestKvRelayLaneRoundTripAndTakeover(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	ra := startKvRelay(t, srv, kvRelayConfig("a", "relay-a", 1<<12), "127.0.0.1:0")
	testenv.WaitFor(t, kvWait, "relay active", func() bool { return ra.r.Status().State == relay.StateActive })
	standbyCfg := kvRelayConfig("a", "relay-a-standby", 1<<12)
	rb, err := relay.New(nc, js, standbyCfg)
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(context.Background())
	bdone := make(chan error, 1)
	go func() { bdone <- rb.Run(bctx) }()
	t.Cleanup(func() { bcancel(); <-bdone })

	s := startIndexer(t, nc, js, kvIndexerConfig(t, ra.addr))
	w := newKvWorkload(1, 40)
	w.publish(t, js, "a")
	kvLaneIdx := ckf.LaneCount - 1
	var natsLane int
	testenv.WaitFor(t, kvWait, "both lanes exact", func() bool {
		l, ok := laneOf(s, "a")
		if !ok {
			return false
		}
		natsLane = l.Lane
		return w.exact(s, l.Lane) == nil && w.exact(s, kvLaneIdx) == nil
	})
	sameKvLanes(t, s, natsLane, kvLaneIdx)
	kl, _ := laneOf(s, "a-kv")
	if kl.Source != follow.SourceKvRelay || kl.Address != ra.addr || kl.Producer == "" || kl.LastFrameAgeMs == nil || kl.State != follow.PhaseActive || kl.Lane != kvLaneIdx {
		t.Fatalf("kvrelay lane row %+v", kl)
	}
	before := kl.Producer
	if nl, _ := laneOf(s, "a"); nl.Source != follow.SourceNATS {
		t.Fatalf("nats lane row %+v", nl)
	}

	// Kill the active relay; once its lease lapses the standby takes it
	// and serves on the same address (a VIP keeps it).
	addr := ra.addr
	ra.kill(t)
	testenv.WaitFor(t, kvWait, "kvrelay lane invalidated", func() bool {
		p := follow.PoolForTest(s.Service.Service)
		return p != nil && p.Indexer().ReadyLanes()&(1<<kvLaneIdx) == 0
	})
	testenv.WaitFor(t, kvWait, "standby active", func() bool { return rb.Status().State == relay.StateActive })
	rrb := &runningRelay{r: rb}
	rrb.serve(t, addr)
	t.Cleanup(func() { rrb.kill(t) })
	w2 := newKvWorkload(2, 40)
	w2.publish(t, js, "a")
	testenv.WaitFor(t, kvWait, "exact again under the new generation", func() bool {
		l, ok := laneOf(s, "a-kv")
		return ok && l.State == follow.PhaseActive && l.Producer != before &&
			w.exact(s, kvLaneIdx) == nil && w2.exact(s, kvLaneIdx) == nil && w2.exact(s, natsLane) == nil
	})
	sameKvLanes(t, s, natsLane, kvLaneIdx)
	if n := kvFaults(s, client.ReasonUnavailable) + kvFaults(s, client.ReasonStreamEnd) +
		kvFaults(s, client.ReasonProducerChanged); n < 1 {
		t.Fatalf("the kill was not counted")
	}
}

// sameKvLanes checks two lanes hold the same words (once both settle).
func sameKvLanes(t *testing.T, s *indexerProc, a, b int) {
	t.Helper()
	testenv.WaitFor(t, kvWait, "identical lanes", func() bool {
		p := follow.PoolForTest(s.Service.Service)
		if p == nil {
			return false
		}
		ix := p.Indexer()
		return slices.Equal(ix.LaneWords(a, nil), ix.LaneWords(b, nil))
	})
}

// A pool of another CKF format than the table's is refused, counted, and
// /v1/lanes says why; the lane never becomes ready.
func TestKvRelayFormatMismatchIsRefusedVisibly(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	ra := startKvRelay(t, srv, kvRelayConfig("a", "relay-a", 1<<12), "127.0.0.1:0")
	testenv.WaitFor(t, kvWait, "relay active", func() bool { return ra.r.Status().State == relay.StateActive })
	cfg := kvIndexerConfig(t, ra.addr)
	f, err := ckf.NewConfig(1 << 16).Format() // not the relay's bucket count
	if err != nil {
		t.Fatal(err)
	}
	cfg.Format = &f
	s := startIndexer(t, nc, js, cfg)
	h := queryapi.Handler(s, s.APIMetrics(), s.Metrics())
	var row api.LaneStatus
	testenv.WaitFor(t, kvWait, "refused in /v1/lanes", func() bool {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/lanes", nil))
		var body struct{ Lanes []api.LaneStatus }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v", rec.Body, err)
		}
		for _, r := range body.Lanes {
			if r.DC == "a-kv" {
				row = r
			}
		}
		return row.State == follow.PhaseRefused && strings.Contains(row.LastFault, "differs from the table's") &&
			kvFaults(s, client.ReasonRefused) >= 1
	})
	if row.Source != follow.SourceKvRelay || row.Address != ra.addr {
		t.Fatalf("row %+v", row)
	}
	if p := follow.PoolForTest(s.Service.Service); p != nil && p.Indexer().ReadyLanes()&(1<<row.Lane) != 0 {
		t.Fatal("refused lane ready")
	}
	if v, ok, _ := promtest.Value(s.Metrics(), follow.MetricFaults+`{dc="a-kv",kind="wrong_format"}`); !ok || v < 1 {
		t.Fatalf("wrong_format not counted")
	}
}
