package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// hasMetric reports whether reg has the series of spec (name{labels},
// other labels ignored) with the value spec ends with, if any.
func hasMetric(reg prometheus.Gatherer, spec string) bool {
	_, ok := promtest.Has(reg, spec)
	return ok
}

func checkpointCount(outcome string, n int) string {
	return fmt.Sprintf(`ckf_relay_checkpoints_total{outcome=%q} %d`, outcome, n)
}

// checkpointedFirstHalf runs a relay with cfg over the first half of steps
// until it has applied all of it and stored a checkpoint, then stops it
// (which stores a final checkpoint) and returns the checkpoint's info.
func checkpointedFirstHalf(t *testing.T, srv *testenv.Server, cfg relay.Config, steps []replay.Step) *jetstream.ObjectInfo {
	t.Helper()
	nc, js := srv.Connect(t), srv.JetStream(t)
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	cfg.CheckpointInterval = 20 * time.Millisecond
	r, stop := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	publishEvents(t, js, "a", steps)
	last := eventStreamState(t, js).LastSeq
	testenv.WaitFor(t, 0, "first half applied", func() bool { return r.Status().InputSeq == last })
	// The counter appears with its first increment; an unchanged state is
	// never checkpointed, so this one covers applied input.
	testenv.WaitFor(t, 0, "checkpoint written", func() bool { return hasMetric(reg, `ckf_relay_checkpoints_total{outcome="written"}`) })
	stop()
	ctx := context.Background()
	obj := snapshotObjects(t, js)
	name, _ := relay.CheckpointObjectName(domain, "a")
	oi, err := obj.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if seq, err := strconv.ParseUint(oi.Metadata[relay.MetaInputSequence], 10, 64); err != nil || seq != last {
		t.Fatalf("checkpoint after stop covers %q, want %d (%v)", oi.Metadata[relay.MetaInputSequence], last, err)
	}
	return oi
}

// startActive starts a relay on cfg with a registry of its own and waits
// until it is active.
func startActive(t *testing.T, nc *nats.Conn, js jetstream.JetStream, cfg relay.Config) (*relay.Relay, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	r, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	return r, reg
}

// snapshotObjects is the object store of snapshot bodies and checkpoints.
func snapshotObjects(t testing.TB, js jetstream.JetStream) jetstream.ObjectStore {
	t.Helper()
	obj, err := js.ObjectStore(context.Background(), wire.SnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// checkpointKept fails unless the stored checkpoint is still oi: the same
// body and input sequence.
func checkpointKept(t *testing.T, js jetstream.JetStream, oi *jetstream.ObjectInfo) {
	t.Helper()
	now, err := snapshotObjects(t, js).GetInfo(context.Background(), oi.Name)
	if err != nil {
		t.Fatal(err)
	}
	if now.Digest != oi.Digest || now.Metadata[relay.MetaInputSequence] != oi.Metadata[relay.MetaInputSequence] {
		t.Fatalf("checkpoint replaced: input sequence %s → %s", oi.Metadata[relay.MetaInputSequence], now.Metadata[relay.MetaInputSequence])
	}
}

// rewriteCheckpoint stores the checkpoint oi again, under its name and
// metadata, with the body edit changed in place.
func rewriteCheckpoint(t *testing.T, js jetstream.JetStream, oi *jetstream.ObjectInfo, edit func(body []byte)) {
	t.Helper()
	ctx, obj := context.Background(), snapshotObjects(t, js)
	body, err := obj.GetBytes(ctx, oi.Name)
	if err != nil {
		t.Fatal(err)
	}
	edit(body)
	if _, err := obj.Put(ctx, jetstream.ObjectMeta{Name: oi.Name, Metadata: oi.Metadata}, bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
}

// restartRejects starts a relay on cfg and checks that it counted the
// stored checkpoint as outcome, restored nothing, and converges on steps
// by replaying its input.
func restartRejects(t *testing.T, nc *nats.Conn, js jetstream.JetStream, cfg relay.Config, outcome string, steps []replay.Step) {
	t.Helper()
	r, reg := startActive(t, nc, js, cfg)
	if !hasMetric(reg, checkpointCount(outcome, 1)) || hasMetric(reg, `outcome="restored"`) {
		t.Fatalf("the stored checkpoint was not counted %s", outcome)
	}
	laneConverges(t, js, r, reference(t, cfg.CKF, steps).Words())
}

// nextEpochRestores starts the next relay on cfg and checks that it
// restores the kept checkpoint and converges on want.
func nextEpochRestores(t *testing.T, nc *nats.Conn, js jetstream.JetStream, cfg relay.Config, want []uint64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	r, _ := startRelay(t, nc, js, cfg)
	laneConverges(t, js, r, want)
	if !hasMetric(reg, checkpointCount("restored", 1)) {
		t.Fatal("the next epoch did not restore the kept checkpoint")
	}
}

// laneConverges waits until the lane, published by r under its current
// epoch, equals want.
func laneConverges(t *testing.T, js jetstream.JetStream, r *relay.Relay, want []uint64) {
	t.Helper()
	testenv.WaitFor(t, 0, "lane converged", func() bool {
		words, marker, _ := laneImage(t, js, "a")
		return marker.Lease.Epoch == r.Status().Epoch && slices.Equal(words, want)
	})
}

func TestRelayRestoresItsCheckpointAndReplaysOnlyWhatFollows(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	steps := traceEvents(t, 300)
	cfg := testConfig("a")
	oi := checkpointedFirstHalf(t, srv, cfg, steps[:150])
	cpSeq, _ := strconv.ParseUint(oi.Metadata[relay.MetaInputSequence], 10, 64)

	// Delete every input message the checkpoint covers: only a restore
	// can still know their effect.
	purgeBefore(t, js, cpSeq+1)
	if st := eventStreamState(t, js); st.Msgs != 0 || st.FirstSeq != cpSeq+1 {
		t.Fatalf("after purge: %+v", st)
	}
	publishEvents(t, js, "a", steps[150:])

	r, reg := startActive(t, nc, js, cfg)
	if !hasMetric(reg, checkpointCount("restored", 1)) {
		t.Fatal("checkpoint not restored")
	}
	laneConverges(t, js, r, reference(t, cfg.CKF, steps).Words())
}

func TestACheckpointOfAnotherFormatIsIgnored(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	steps := traceEvents(t, 300)
	small := testConfig("a")
	small.CKF = ckf.NewConfig(1 << 12)
	checkpointedFirstHalf(t, srv, small, steps[:150])
	publishEvents(t, js, "a", steps[150:])

	restartRejects(t, nc, js, testConfig("a"), "rejected_format", steps)
}

func TestACorruptCheckpointIsIgnoredAndCounted(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	steps := traceEvents(t, 300)
	cfg := testConfig("a")
	oi := checkpointedFirstHalf(t, srv, cfg, steps[:150])

	// Same name and metadata, one byte of the body changed.
	rewriteCheckpoint(t, js, oi, func(body []byte) { body[len(body)/2] ^= 0x5A })
	publishEvents(t, js, "a", steps[150:])

	restartRejects(t, nc, js, cfg, "rejected_corrupt", steps)
}

// TestAnUnansweredCheckpointLookupIsAskedAgain: a metadata request that
// is never answered (it reached a server that then died, or the bucket's
// stream is electing a leader) costs one attempt, not the epoch: the next
// attempt restores the checkpoint and the relay replays only what follows
// it.
func TestAnUnansweredCheckpointLookupIsAskedAgain(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	steps := traceEvents(t, 300)
	cfg := testConfig("a")
	checkpointedFirstHalf(t, srv, cfg, steps[:150])
	publishEvents(t, js, "a", steps[150:])

	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	var attempts atomic.Int32
	r, _ := startRelayWith(t, nc, js, cfg, func(r *relay.Relay) {
		relay.SetCheckpointInfoBounds(r, 300*time.Millisecond, time.Minute)
		relay.SetBeforeCheckpointLoad(r, func(ctx context.Context) error {
			if attempts.Add(1) > 2 {
				return nil
			}
			<-ctx.Done() // unanswered until the attempt's deadline
			return ctx.Err()
		})
	})
	laneConverges(t, js, r, reference(t, cfg.CKF, steps).Words())
	if n := attempts.Load(); n != 3 {
		t.Fatalf("%d metadata attempts, want 3 (two unanswered, one answered)", n)
	}
	if !hasMetric(reg, checkpointCount("restored", 1)) || hasMetric(reg, `outcome="load_error"`) {
		t.Fatalf("the checkpoint was not restored after two unanswered lookups:\n%s", promtest.Text(reg))
	}
}

// TestAnUnreadableCheckpointIsNeverOverwritten: when the stored checkpoint
// exists but cannot be read at the start of an epoch (a transport error,
// not a rejected checkpoint), the relay replays its input and serves, but
// never replaces that checkpoint: it may hold state the input stream no
// longer has. A later epoch that can read it restores it.
func TestAnUnreadableCheckpointIsNeverOverwritten(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	steps := traceEvents(t, 300)
	cfg := testConfig("a")
	oi := checkpointedFirstHalf(t, srv, cfg, steps[:150])
	publishEvents(t, js, "a", steps[150:])

	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	cfg.CheckpointInterval = 20 * time.Millisecond
	r, stop := startRelayWith(t, nc, js, cfg, func(r *relay.Relay) {
		relay.SetCheckpointInfoBounds(r, 50*time.Millisecond, 400*time.Millisecond)
		relay.SetBeforeCheckpointLoad(r, func(context.Context) error { return errors.New("object store unreachable") })
	})
	laneConverges(t, js, r, reference(t, cfg.CKF, steps).Words())
	// Several checkpoint periods pass with new input applied.
	testenv.WaitFor(t, 0, "checkpoints skipped", func() bool {
		return hasMetric(reg, `ckf_relay_checkpoints_total{outcome="skipped_unread_checkpoint"}`)
	})
	stop()
	if !hasMetric(reg, checkpointCount("load_error", 1)) || hasMetric(reg, `ckf_relay_checkpoints_total{outcome="written"}`) {
		t.Fatal("the epoch that could not read the checkpoint wrote one")
	}
	checkpointKept(t, js, oi)
	// The next epoch reads it and replays only what follows.
	nextEpochRestores(t, nc, js, cfg, reference(t, cfg.CKF, steps).Words())
}
