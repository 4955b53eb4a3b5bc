package relay_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zeebo/xxh3"

	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// prefixHash is the i-th block of the shared prefix (i from 1).
func prefixHash(i uint64) uint64 { return i * 0x9E3779B97F4A7C15 }

// storeSteps has worker store prefix blocks first..first+count-1, perEvent
// to a message, as one parentless chain per message.
func storeSteps(worker, first, count, perEvent uint64) []replay.Step {
	var steps []replay.Step
	for b := first; b < first+count; b += perEvent {
		sb := make([]routerevent.StoredBlock, 0, perEvent)
		for h := b; h < min(b+perEvent, first+count); h++ {
			sb = append(sb, routerevent.StoredBlock{BlockHash: prefixHash(h), TokensHash: prefixHash(h)})
		}
		ev := routerevent.RouterEvent{WorkerID: worker, Event: routerevent.KvCacheEvent{EventID: b,
			Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{Blocks: sb}}}}
		steps = append(steps, replay.Step{Worker: worker, Events: []routerevent.RouterEvent{ev}})
	}
	return steps
}

// removeSteps has worker remove what storeSteps stored for the same range.
func removeSteps(worker, first, count, perEvent uint64) []replay.Step {
	var steps []replay.Step
	for b := first; b < first+count; b += perEvent {
		hs := make([]uint64, 0, perEvent)
		for h := b; h < min(b+perEvent, first+count); h++ {
			hs = append(hs, prefixHash(h))
		}
		ev := routerevent.RouterEvent{WorkerID: worker, Event: routerevent.KvCacheEvent{EventID: 1 << 40,
			Data: routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{BlockHashes: hs}}}}
		steps = append(steps, replay.Step{Worker: worker, Events: []routerevent.RouterEvent{ev}})
	}
	return steps
}

// TestARestartRestoresASharedPrefixPoolWhoseInputAgedOut: eight workers
// cache the same 8,192 blocks (half the expected blocks, an eighth of
// --max-tracked-blocks, but eight tables of that size). The checkpoint of
// that pool must restore once the input it covers is gone, or the
// restarted relay loses every block.
func TestARestartRestoresASharedPrefixPoolWhoseInputAgedOut(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	const workers, blocks = 8, 8192
	var steps []replay.Step
	for w := range uint64(workers) {
		steps = append(steps, storeSteps(w, 1, blocks, 64)...)
	}
	cfg := testConfig("a")
	checkpointedFirstHalf(t, srv, cfg, steps)

	purgeBefore(t, js, eventStreamState(t, js).LastSeq+1) // as --input-max-age would

	r, reg := startActive(t, nc, js, cfg)
	if !hasMetric(reg, checkpointCount("restored", 1)) || hasMetric(reg, `ckf_relay_checkpoints_total{outcome="rejected_corrupt"}`) ||
		hasMetric(reg, `ckf_relay_checkpoints_total{outcome="rejected_over_budget"}`) {
		t.Fatal("the shared-prefix checkpoint was not restored")
	}
	if got := r.Status().UniqueBlocks; got != blocks {
		t.Fatalf("restarted relay tracks %d blocks, want %d", got, blocks)
	}
	laneConverges(t, js, r, reference(t, cfg.CKF, steps).Words())
}

// TestAnOverBudgetStateNeverReplacesTheStoredCheckpoint: a worker caches
// 60,000 blocks (checkpointed), then evicts all but one. Tables keep their
// capacity, so the state now holds more emptied capacity than a restore
// may allocate: the relay counts skipped_over_budget and keeps the stored
// checkpoint (periodic and on stop), and a restart restores that one and
// replays the input after it.
func TestAnOverBudgetStateNeverReplacesTheStoredCheckpoint(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := testConfig("a")
	cfg.CKF.MaxKicks = 8 // most of the 60,000 blocks are capacity omissions: fail fast
	full := append(storeSteps(0, 1, 100, 50), storeSteps(1, 1000, 60000, 256)...)
	oi := checkpointedFirstHalf(t, srv, cfg, full)
	evict := removeSteps(1, 1001, 59999, 256)
	publishEvents(t, js, "a", evict)
	all := append(full, evict...)

	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	cfg.CheckpointInterval = 20 * time.Millisecond
	r, stop := startRelay(t, nc, js, cfg)
	laneConverges(t, js, r, reference(t, cfg.CKF, all).Words())
	testenv.WaitFor(t, 0, "over-budget checkpoints skipped", func() bool {
		return promtest.Count(reg, `ckf_relay_checkpoints_total{outcome="skipped_over_budget"}`) >= 2
	})
	stop() // its final checkpoint is skipped too
	if !hasMetric(reg, checkpointCount("restored", 1)) || hasMetric(reg, `ckf_relay_checkpoints_total{outcome="written"}`) ||
		hasMetric(reg, `ckf_relay_checkpoints_total{outcome="write_error"}`) {
		t.Fatal("the over-budget epoch restored nothing, or wrote (or tried to write) a checkpoint")
	}

	checkpointKept(t, js, oi)
	nextEpochRestores(t, nc, js, cfg, reference(t, cfg.CKF, all).Words())
}

// TestACheckpointBeyondTheRestoreBudgetIsRejectedAsSuch: an intact
// checkpoint (checksum and digest match) whose owner table claims 2^40
// slots, as a build without the writer's check could have stored, is
// counted as rejected_over_budget, not as corrupt. No build can restore
// it, so the epoch replays its input and its own checkpoints replace it.
func TestACheckpointBeyondTheRestoreBudgetIsRejectedAsSuch(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	steps := traceEvents(t, 300)
	cfg := testConfig("a")
	oi := checkpointedFirstHalf(t, srv, cfg, steps[:150])

	// Encoding v1: 40-byte header, rng and 7 counters, the lane words, then
	// the owner table: flags u8 (no key 0 here), capacity u64, ...
	format, err := cfg.CKF.Format()
	if err != nil {
		t.Fatal(err)
	}
	owners := 40 + 8 + 7*8 + 8*int(format.BucketCount)
	rewriteCheckpoint(t, js, oi, func(body []byte) {
		if body[owners] != 0 {
			t.Fatal("fixture tracks hash 0")
		}
		binary.LittleEndian.PutUint64(body[owners+1:], 1<<40)
		binary.LittleEndian.PutUint64(body[len(body)-8:], xxh3.Hash(body[:len(body)-8]))
	})
	publishEvents(t, js, "a", steps[150:])

	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	cfg.CheckpointInterval = 20 * time.Millisecond
	r, _ := startRelay(t, nc, js, cfg)
	laneConverges(t, js, r, reference(t, cfg.CKF, steps).Words())
	if !hasMetric(reg, checkpointCount("rejected_over_budget", 1)) || hasMetric(reg, `outcome="rejected_corrupt"`) || hasMetric(reg, `outcome="restored"`) {
		t.Fatal("an over-budget checkpoint was not rejected as such")
	}
	testenv.WaitFor(t, 0, "checkpoint replaced", func() bool { return hasMetric(reg, `ckf_relay_checkpoints_total{outcome="written"}`) })
}
