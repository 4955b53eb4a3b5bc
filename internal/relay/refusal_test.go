package relay_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// manualClock is the relay's injected clock.
type manualClock struct{ ns atomic.Int64 }

func (c *manualClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func refusalRelay(t *testing.T) (*relay.Relay, func(subj, body string), *prometheus.Registry, *testenv.LogBuffer, *manualClock) {
	t.Helper()
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	reg := prometheus.NewRegistry()
	logs := &testenv.LogBuffer{}
	cfg := testConfig("a")
	cfg.Metrics, cfg.Logger = reg, zerolog.New(logs)
	clock := &manualClock{}
	clock.ns.Store(time.Unix(1_800_000_000, 0).UnixNano())
	r, _ := startRelayWith(t, nc, js, cfg, func(r *relay.Relay) { relay.SetClock(r, clock.now) })
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	pub := func(subj, body string) {
		t.Helper()
		if _, err := js.Publish(context.Background(), subj, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	return r, pub, reg, logs, clock
}

// The first store of a request in llm-d-inference-sim's array form names
// parent 0 (its "none"): it roots the chain, is counted under its own
// reason, and the continuation chains onto it.
func TestAZeroParentTheWorkerDoesNotHoldRootsTheChain(t *testing.T) {
	r, pub, reg, _, _ := refusalRelay(t)
	pub("kvevents.test.a.7", `[{"worker_id":7,"event":{"event_id":1,"data":{"stored":{"parent_hash":0,"blocks":[`+
		`{"block_hash":11,"tokens_hash":101},{"block_hash":12,"tokens_hash":102},{"block_hash":13,"tokens_hash":103}]}},"dp_rank":0}}]`)
	pub("kvevents.test.a.7", `[{"worker_id":7,"event":{"event_id":2,"data":{"stored":{"parent_hash":13,"blocks":[`+
		`{"block_hash":14,"tokens_hash":104}]}},"dp_rank":0}}]`)
	testenv.WaitFor(t, 0, "both stores applied", func() bool { return r.Status().Events == 2 })
	if got := r.Status().UniqueBlocks; got != 4 {
		t.Fatalf("unique blocks %d, want 4", got)
	}
	for _, want := range []string{`ckf_relay_zero_parent_roots_total 1`} {
		if out, ok := metricsContain(reg, want); !ok {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if out, ok := metricsContain(reg, `ckf_relay_event_errors_total{`); ok {
		t.Errorf("event errors:\n%s", out)
	}
}

// A stream of refused events logs one warning (rate-limited) with the
// reason and a sample, raises the refused_events fault in the status and
// the metrics, and the fault clears once the window has slid past them.
func TestRefusedEventsWarnAndRaiseAFault(t *testing.T) {
	r, pub, reg, logs, clock := refusalRelay(t)
	for i := range 10 {
		pub("kvevents.test.a.9", fmt.Sprintf(`[{"worker_id":9,"event":{"event_id":%d,"data":{"stored":{"parent_hash":404,"blocks":[`+
			`{"block_hash":%d,"tokens_hash":%d}]}},"dp_rank":0}}]`, i+1, 500+i, 600+i))
	}
	// A healthy worker next to it is not named.
	pub("kvevents.test.a.3", `[{"worker_id":3,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":1}]}},"dp_rank":0}}]`)
	testenv.WaitFor(t, 0, "all events seen", func() bool { return r.Status().Events == 11 })
	want := "refused_events: worker 9: 10 of 10 recent events refused (parent_block_not_found)"
	testenv.WaitFor(t, 0, "refused_events fault", func() bool {
		for _, f := range r.Status().Faults {
			if strings.HasPrefix(f, want) {
				return !strings.Contains(f, "worker 3")
			}
		}
		return false
	})
	for _, want := range []string{`ckf_relay_fault{dc="a",kind="refused_events"} 1`, `ckf_relay_refusals_total{dc="a",reason="parent_block_not_found"} 10`} {
		if out, ok := metricsContain(reg, want); !ok {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if got := r.Status().Refused; got != 10 {
		t.Errorf("status refused_events %d, want 10", got)
	}
	warns := logs.Lines(`"message":"events refused`)
	if len(warns) != 1 {
		t.Fatalf("%d warnings, want 1 (rate-limited):\n%s", len(warns), strings.Join(warns, "\n"))
	}
	for _, f := range []string{`"level":"warn"`, `"worker_id":9`, `"reason":"parent_block_not_found"`, `"sample_parent_hash":404`, `"sample_first_block_hash":500`} {
		if !strings.Contains(warns[0], f) {
			t.Errorf("warning lacks %s: %s", f, warns[0])
		}
	}
	// The window slides past the refusals: the heartbeat tick clears it.
	clock.advance(31 * time.Second)
	testenv.WaitFor(t, 0, "fault cleared", func() bool { return len(r.Status().Faults) == 0 })
	if out, ok := metricsContain(reg, `ckf_relay_fault{dc="a",kind="refused_events"} 0`); !ok {
		t.Errorf("fault gauge not cleared:\n%s", out)
	}
}
