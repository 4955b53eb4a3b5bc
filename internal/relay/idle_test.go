package relay_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// An idle relay does not wake every publish interval to cut an empty
// window: the flush ticker rests until an event enters the window, and
// the events that do arrive are still published.
func TestAnIdleRelayDoesNotCutOnEveryPublishInterval(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	reg := prometheus.NewRegistry()
	cfg := testConfig("a")
	cfg.Metrics = reg
	cfg.PublishInterval = time.Millisecond
	cfg.HeartbeatInterval = time.Second // a heartbeat flushes (cuts) too
	var cuts atomic.Int64
	r, _ := startRelayWith(t, nc, js, cfg, func(r *relay.Relay) { relay.SetOnCut(r, func() { cuts.Add(1) }) })
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })

	for round := range 2 {
		before := promtest.Count(reg, "ckf_relay_deltas_published_total")
		publishEvents(t, js, "a", traceEvents(t, 3+round))
		sent := time.Now()
		testenv.WaitFor(t, 0, "a delta", func() bool { return promtest.Count(reg, "ckf_relay_deltas_published_total") > before })
		// From rest, the event is cut as soon as it is applied, not at a
		// heartbeat's flush.
		if took := time.Since(sent); took >= cfg.HeartbeatInterval {
			t.Fatalf("round %d: the delta took %v, a heartbeat interval", round, took)
		}
		// Let the window settle: the ticker fires once after the last cut,
		// finds the window empty, and rests.
		time.Sleep(50 * time.Millisecond)
		start := cuts.Load()
		time.Sleep(300 * time.Millisecond)
		// 300 ticks of 1 ms without the rest; a heartbeat may fall inside.
		if n := cuts.Load() - start; n > 3 {
			t.Fatalf("round %d: %d cuts in 300 ms of idle at a 1 ms publish interval", round, n)
		}
	}
}

// On a slow lane (a WAN: each delta outlasts the publish interval) a
// window is cut once the interval since the last cut has passed. After a
// rest it has: the first event is cut as soon as it is applied, not an
// interval after the ticker restarts.
func TestASlowLaneCutsTheFirstEventAfterARestAtOnce(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := testConfig("a")
	cfg.PublishInterval = 100 * time.Millisecond
	cfg.HeartbeatInterval = time.Hour
	const delay = 150 * time.Millisecond // every delta outlasts the interval: the lane is slow
	deltas := make(chan time.Time, 16)
	r, _ := startRelayWith(t, nc, js, cfg, func(r *relay.Relay) {
		relay.SetBeforePublish(r, func(k wire.MessageKind) error {
			if k == wire.KindDelta {
				deltas <- time.Now()
				time.Sleep(delay)
			}
			return nil
		})
	})
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	steps := traceEvents(t, 6)
	next := func() []replay.Step {
		for i, st := range steps {
			if len(st.Events) > 0 {
				steps = steps[i+1:]
				return []replay.Step{st}
			}
		}
		t.Fatal("out of events")
		return nil
	}
	publishEvents(t, js, "a", next())
	select {
	case <-deltas: // its landing marks the lane slow
	case <-time.After(10 * time.Second):
		t.Fatal("no delta")
	}
	// The flight lands, a tick finds the window empty, the ticker rests.
	time.Sleep(delay + 3*cfg.PublishInterval)
	for len(deltas) > 0 {
		<-deltas
	}
	sent := time.Now()
	publishEvents(t, js, "a", next())
	select {
	case at := <-deltas:
		if took := at.Sub(sent); took >= cfg.PublishInterval/2 {
			t.Fatalf("the first event after a rest was cut %v after its publish; the interval had passed", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delta after the rest")
	}
}
