package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/internal/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
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

func purgeBefore(t *testing.T, js jetstream.JetStream, seq uint64) {
	t.Helper()
	ctx := context.Background()
	events, err := js.Stream(ctx, streams.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Purge(ctx, jetstream.WithPurgeSequence(seq)); err != nil {
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
	waitFor(t, "active", func() bool { return first.Status().State == relay.StateActive })
	stopFirst()
	publishEvents(t, js, "a", msgs)
	const dropped = 20
	purgeBefore(t, js, dropped+1)

	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	r, _ := startRelay(t, nc, js, cfg)
	waitFor(t, "active", func() bool { return r.Status().State == relay.StateActive })
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
	waitFor(t, "active", func() bool { return r.Status().State == relay.StateActive })
	if st := r.Status(); st.InputGap != 0 || !hasMetric(reg, gapMetric(0)) {
		t.Fatalf("input gap %d with nothing missing", st.InputGap)
	}
	laneConverges(t, js, r, reference(t, cfg.CKF, msgs).Words())
	stop() // stores a checkpoint covering everything

	// Retention overtakes the checkpoint: five messages after it are gone.
	publishEvents(t, js, "a", msgs[:10])
	events, err := js.Stream(context.Background(), streams.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	si, err := events.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	last := si.State.LastSeq
	purgeBefore(t, js, last-4) // keeps the last 5 of the 10
	reg2 := prometheus.NewRegistry()
	cfg.Metrics = reg2
	r2, _ := startRelay(t, nc, js, cfg)
	waitFor(t, "active", func() bool { return r2.Status().State == relay.StateActive })
	if st := r2.Status(); st.InputGap != 5 {
		t.Fatalf("status input gap %d, want 5 (checkpoint at %d, stream from %d)", st.InputGap, last-10, last-4)
	}
	if !hasMetric(reg2, gapMetric(5)) {
		t.Fatalf("metrics lack %q", gapMetric(5))
	}
}
