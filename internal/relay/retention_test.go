package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// published keeps the steps publishEvents sends as messages: the i-th one
// is stored at input stream sequence i+1 on a fresh server.
func published(steps []replay.Step) []replay.Step {
	var out []replay.Step
	for _, st := range steps {
		if len(st.Events) > 0 {
			out = append(out, st)
		}
	}
	return out
}

// eventStream returns the input stream.
func eventStream(t *testing.T, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	events, err := js.Stream(context.Background(), streams.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// eventStreamState returns the input stream's state now.
func eventStreamState(t *testing.T, js jetstream.JetStream) jetstream.StreamState {
	t.Helper()
	info, err := eventStream(t, js).Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

func purgeBefore(t *testing.T, js jetstream.JetStream, seq uint64) {
	t.Helper()
	if err := eventStream(t, js).Purge(context.Background(), jetstream.WithPurgeSequence(seq)); err != nil {
		t.Fatal(err)
	}
}

func gapMetric(n uint64) string { return fmt.Sprintf("ckf_relay_input_gap_messages_total %d", n) }

func TestARebuildReportsInputThatRetentionDropped(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	msgs := published(traceEvents(t, 200))
	cfg := testConfig("a")
	// The stream exists before the first relay: publish, then drop the
	// first 20 messages as an age limit would.
	first, stopFirst := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return first.Status().State == relay.StateActive })
	stopFirst()
	publishEvents(t, js, "a", msgs)
	const dropped = 20
	purgeBefore(t, js, dropped+1)

	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	r, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	if st := r.Status(); st.InputGap != dropped {
		t.Fatalf("status input gap %d, want %d", st.InputGap, dropped)
	}
	if !hasMetric(reg, gapMetric(dropped)) {
		t.Fatalf("metrics lack %q", gapMetric(dropped))
	}
	// The relay goes on with what the stream still holds.
	laneConverges(t, js, r, reference(t, cfg.CKF, msgs[dropped:]).Words())
}

func TestARestoredCheckpointOnlyMissesInputDroppedAfterIt(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	msgs := published(traceEvents(t, 300))
	half := len(msgs) / 2
	cfg := testConfig("a")
	oi := checkpointedFirstHalf(t, srv, cfg, msgs[:half])
	cpSeq, _ := strconv.ParseUint(oi.Metadata[relay.MetaInputSequence], 10, 64)
	publishEvents(t, js, "a", msgs[half:])

	// Dropping only what the checkpoint covers loses nothing.
	purgeBefore(t, js, cpSeq+1)
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	r, stop := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	if st := r.Status(); st.InputGap != 0 || !hasMetric(reg, gapMetric(0)) {
		t.Fatalf("input gap %d with nothing missing", st.InputGap)
	}
	laneConverges(t, js, r, reference(t, cfg.CKF, msgs).Words())
	stop() // stores a checkpoint covering everything

	// Retention overtakes the checkpoint: five messages after it are gone.
	publishEvents(t, js, "a", msgs[:10])
	last := eventStreamState(t, js).LastSeq
	purgeBefore(t, js, last-4) // keeps the last 5 of the 10
	reg2 := prometheus.NewRegistry()
	cfg.Metrics = reg2
	r2, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r2.Status().State == relay.StateActive })
	if st := r2.Status(); st.InputGap != 5 {
		t.Fatalf("status input gap %d, want 5 (checkpoint at %d, stream from %d)", st.InputGap, last-10, last-4)
	}
	if !hasMetric(reg2, gapMetric(5)) {
		t.Fatalf("metrics lack %q", gapMetric(5))
	}
}

// TestARebuildWhoseLastInputAgedOutFinishes: a rebuild reads the last
// input sequence of its pool, then waits until it has applied it. If
// retention drops that message first (purged here, right after the
// rebuild read it, as --input-max-age or a message limit would), the
// rebuild must end at what the stream still holds, count it, and publish,
// instead of sitting in "rebuilding" under its lease until the pool sends
// something new.
func TestARebuildWhoseLastInputAgedOutFinishes(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := testConfig("a")
	first, stopFirst := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return first.Status().State == relay.StateActive })
	stopFirst()
	// More messages than the input consumer can deliver ahead of the actor
	// (its pull batch and channel hold 1024 each): the last one cannot have
	// been delivered when the hook below purges it.
	const n = 3000
	var msgs []replay.Step
	for i := range uint64(n) {
		msgs = append(msgs, storeSteps(i%3, 1+i, 1, 1)...)
	}
	publishEvents(t, js, "a", msgs)

	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	var waitedFor atomic.Uint64
	r, _ := startRelayWith(t, nc, js, cfg, func(r *relay.Relay) {
		relay.SetRebuildTarget(r, func(target uint64) {
			waitedFor.Store(target)
			// The tail and everything before it aged out. This runs on the
			// relay's goroutine: report, never t.Fatal.
			ctx := context.Background()
			events, err := js.Stream(ctx, streams.EventStream)
			if err == nil {
				err = events.Purge(ctx, jetstream.WithPurgeSequence(target+1))
			}
			if err != nil {
				t.Errorf("purge the rebuild's tail: %v", err)
			}
		})
	})
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	if got := waitedFor.Load(); got != n {
		t.Fatalf("rebuild waited for sequence %d, want %d", got, n)
	}
	if !hasMetric(reg, "ckf_relay_rebuild_tail_dropped_total 1") {
		t.Fatal("the dropped tail was not counted")
	}

	// It serves: a new message is applied after whatever the consumer had
	// delivered before the purge (a prefix of the input), and the lane
	// shows exactly those.
	more := storeSteps(0, 1<<20, 1, 1)
	publishEvents(t, js, "a", more)
	testenv.WaitFor(t, 0, "new input applied", func() bool { return r.Status().InputSeq == n+1 })
	applied := int(promtest.Count(reg, "ckf_relay_events_total")) - 1
	if applied < 0 || applied >= n {
		t.Fatalf("%d of %d purged messages applied", applied, n)
	}
	laneConverges(t, js, r, reference(t, cfg.CKF, append(msgs[:applied:applied], more...)).Words())
}
