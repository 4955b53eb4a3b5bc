package relay_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/testenv"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

func hasFault(st relay.Status, kind string) bool {
	for _, f := range st.Faults {
		if strings.HasPrefix(f, kind+":") {
			return true
		}
	}
	return false
}

// Before issue 6, an epoch key at 2^64-1 wrapped the next epoch to 0.
func TestAnExhaustedEpochCounterMakesTheRelayStandByAndReportIt(t *testing.T) {
	cfg := testConfig("a")
	cfg.RestartBackoffMax = 100 * time.Millisecond
	r, js, reg := activeRelay(t, cfg)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "epoch."+domain+".a", []byte(`{"epoch":18446744073709551615}`)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "lease."+domain+".a"); err != nil { // the relay must take a new epoch
		t.Fatal(err)
	}
	testenv.WaitFor(t, 0, "standing by with the fault", func() bool {
		st := r.Status()
		return st.State == relay.StateStandby && hasFault(st, relay.FaultEpochExhausted)
	})
	if out, ok := metricsContain(reg, `ckf_relay_fault{kind="epoch_exhausted"} 1`); !ok {
		t.Fatalf("fault metric:\n%s", out)
	}
	// The operator repairs the key: the relay publishes again.
	if _, err := kv.Put(ctx, "epoch."+domain+".a", []byte(`{"epoch":41}`)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 0, "publishing again", func() bool {
		st := r.Status()
		return st.State == relay.StateActive && st.Epoch == 42 && len(st.Faults) == 0
	})
}

// Before issue 6, deleting KVEVENTS made the relay take a new epoch every
// 50 ms (8 → 313 in 15 s) and never recreated the stream.
func TestADeletedInputStreamIsRecreatedWithoutAHotLoop(t *testing.T) {
	cfg := testConfig("a")
	cfg.RestartBackoffMin, cfg.RestartBackoffMax = 50*time.Millisecond, 400*time.Millisecond
	cfg.CheckpointInterval = 50 * time.Millisecond
	r, js, reg := activeRelay(t, cfg)
	steps := traceEvents(t, 10)
	publishEvents(t, js, "a", steps[:5])
	last := uint64(len(published(steps[:5])))
	ctx := context.Background()
	obj := snapshotObjects(t, js)
	name, _ := relay.CheckpointObjectName(domain, "a")
	testenv.WaitFor(t, 0, "a checkpoint covering the first events", func() bool {
		info, err := obj.GetInfo(ctx, name)
		return err == nil && info.Metadata[relay.MetaInputSequence] == fmt.Sprint(last)
	})
	epoch := r.Status().Epoch
	if err := js.DeleteStream(ctx, streams.EventStream); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 0, "stream recreated", func() bool {
		_, err := js.Stream(ctx, streams.EventStream)
		return err == nil
	})
	testenv.WaitFor(t, 0, "active again", func() bool { return r.Status().State == relay.StateActive && r.Status().Epoch > epoch })
	if out, ok := metricsContain(reg, `ckf_relay_checkpoints_total{outcome="restored_recreated_stream"}`); !ok {
		t.Fatalf("checkpoint not restored over the recreated stream:\n%s", out)
	}
	// Events published to the recreated stream reach the lane, on top of
	// the state the checkpoint kept.
	publishEvents(t, js, "a", steps[5:])
	want := reference(t, cfg.CKF, steps).Words()
	testenv.WaitFor(t, 0, "lane at the exact state", func() bool {
		words, _, _ := laneImage(t, js, "a")
		return slices.Equal(words, want)
	})
	// A stream that stays deleted costs one epoch per backoff period.
	stop := time.Now().Add(2 * time.Second)
	before := r.Status().Epoch
	for time.Now().Before(stop) {
		_ = js.DeleteStream(ctx, streams.EventStream)
		time.Sleep(20 * time.Millisecond)
	}
	// 2 s at a 400 ms cap is at most ~10 epochs (the old loop took ~40).
	if grew := r.Status().Epoch - before; grew > 12 {
		t.Fatalf("epoch grew by %d in 2s while the stream kept disappearing", grew)
	}
}

// Before issue 6, ownership grew without bound past --expected-blocks.
func TestTrackedBlocksStopAtTheBoundWithAFault(t *testing.T) {
	cfg := testConfig("a")
	cfg.CKF = ckf.NewConfig(1 << 10)
	cfg.MaxTrackedBlocks = 1 << 11
	r, js, reg := activeRelay(t, cfg)
	ctx := context.Background()
	subj, _ := wire.WorkerEventsSubject(domain, "a", 1)
	var b strings.Builder
	for batch := range 12 {
		b.Reset()
		b.WriteString(`[`)
		for i := range 256 {
			if i > 0 {
				b.WriteString(",")
			}
			h := batch*1000 + i + 1
			fmt.Fprintf(&b, `{"worker_id":1,"event":{"event_id":%d,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":%d,"tokens_hash":%d}]}}}}`, h, h, h)
		}
		b.WriteString(`]`)
		if _, err := js.Publish(ctx, subj, []byte(b.String())); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 0, "tracked_blocks fault", func() bool { return hasFault(r.Status(), relay.FaultTrackedBlocks) })
	testenv.WaitFor(t, 0, "every refusal counted", func() bool {
		_, ok := metricsContain(reg, fmt.Sprintf("ckf_relay_refused_events_total %d", 12*256-(1<<11)))
		return ok
	})
	if n := r.Status().UniqueBlocks; n != int(cfg.MaxTrackedBlocks) {
		t.Fatalf("unique blocks %d, bound %d", n, cfg.MaxTrackedBlocks)
	}
	// Removals make room and clear the fault.
	if _, err := js.Publish(ctx, subj, []byte(`{"worker_id":1,"event":{"event_id":99999,"dp_rank":0,"data":"cleared"}}`)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 0, "fault cleared", func() bool {
		st := r.Status()
		return !hasFault(st, relay.FaultTrackedBlocks) && st.UniqueBlocks == 0
	})
}

func TestRetentionShorterThanTwiceTheCheckpointIntervalIsRefused(t *testing.T) {
	cfg := testConfig("a")
	cfg.CheckpointInterval = time.Minute
	cfg.Streams.EventMaxAge = 90 * time.Second
	if err := cfg.Validate(); err == nil {
		t.Fatal("accepted")
	}
	cfg.Streams.EventMaxAge = 2 * time.Minute
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.MaxTrackedBlocks = cfg.CKF.ExpectedBlocksPerDC - 1
	if err := cfg.Validate(); err == nil {
		t.Fatal("a tracked-blocks bound below the expected blocks was accepted")
	}
}

// Before issue 6, a relay that had lost its lease without noticing could
// overwrite its successor's checkpoint with an older state.
func TestACheckpointIsWrittenOnlyUnderAConfirmedLease(t *testing.T) {
	cfg := testConfig("a")
	cfg.LeaseTTL = time.Minute // no renewal notices the theft during the test
	cfg.CheckpointInterval = 50 * time.Millisecond
	r, js, reg := activeRelay(t, cfg)
	publishEvents(t, js, "a", traceEvents(t, 3))
	testenv.WaitFor(t, 0, "a checkpoint", func() bool {
		_, ok := metricsContain(reg, `ckf_relay_checkpoints_total{outcome="written"}`)
		return ok
	})
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rec := fmt.Sprintf(`{"owner":"successor","epoch":%d,"acquired_at":%d,"expires_at":%d}`, r.Status().Epoch+1, now.UnixNano(), now.Add(time.Minute).UnixNano())
	if _, err := kv.Put(ctx, "lease."+domain+".a", []byte(rec)); err != nil {
		t.Fatal(err)
	}
	obj := snapshotObjects(t, js)
	name, _ := relay.CheckpointObjectName(domain, "a")
	before, err := obj.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	publishEvents(t, js, "a", traceEvents(t, 6)[3:])
	testenv.WaitFor(t, 0, "checkpoint skipped", func() bool {
		_, ok := metricsContain(reg, `ckf_relay_checkpoints_total{outcome="skipped_lease_not_held"}`)
		return ok
	})
	after, err := obj.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if after.Metadata[relay.MetaInputSequence] != before.Metadata[relay.MetaInputSequence] || after.ModTime != before.ModTime {
		t.Fatalf("checkpoint rewritten without the lease: %v → %v", before.Metadata, after.Metadata)
	}
	testenv.WaitFor(t, 0, "standing by", func() bool { return r.Status().State == relay.StateStandby })
}
