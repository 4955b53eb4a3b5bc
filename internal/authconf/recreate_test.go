package authconf

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/eventpub"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// The repairs issue 6 added run under the role permissions too: after an
// operator deletes the input and lane streams, the relay and the indexer
// recreate them (STREAM.INFO/CREATE, the indexer's per-second lane stream
// check), the relay takes a new epoch (epoch and lease keys, its lease
// re-read before each checkpoint), the indexer follows it (granted epochs
// read from the lease bucket) and new events reach the lane, all without a
// single permission violation.
func TestRelayAndIndexerRecreateDeletedStreamsWithinTheirPermissions(t *testing.T) {
	srv, users := permServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const dc = "dc-a"

	rc := connectAs(t, srv, users["relay-"+dc])
	cfg := roleRelayConfig(testDomain, dc)
	cfg.RestartBackoffMax = time.Second
	r := runRelay(t, rc, rc.js, cfg)
	ixConn := connectAs(t, srv, users["indexer"])
	ix := runIndexer(t, ixConn, testDomain, func(c *follow.Config) { c.StreamCheckInterval = 100 * time.Millisecond })

	reqs, err := replay.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	rp, err := replay.New(replay.Config{DCs: []string{dc}, WorkersPerDC: 2, CapacityBlocks: 256, Duplication: 1, Affinity: 0.7, Seed: 5}, reqs[:80])
	if err != nil {
		t.Fatal(err)
	}
	worker := connectAs(t, srv, users["worker-"+dc])
	pub, err := eventpub.New(worker.js, eventpub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		t.Helper()
		for range n {
			st, ok := rp.Next()
			if !ok {
				t.Fatal("workload exhausted")
			}
			if len(st.Events) == 0 {
				continue
			}
			if err := pub.PublishEvents(ctx, testDomain, dc, st.Worker, st.Events); err != nil {
				t.Fatalf("worker publishing its events: %v", err)
			}
		}
	}
	// following waits until the lane is active under the relay's epoch and
	// has installed what the relay published after seq; it returns the
	// relay's epoch and sequence.
	following := func(seq uint64) (uint64, uint64) {
		t.Helper()
		var st relay.Status
		testenv.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
			st = r.Status()
			if st.State != relay.StateActive || st.Sequence <= seq {
				return fmt.Errorf("relay %+v", st)
			}
			for _, l := range ix.Lanes() {
				if l.DC == dc && l.State == follow.PhaseActive && l.Epoch == st.Epoch && l.InstalledSequence >= st.Sequence {
					return nil
				}
			}
			return fmt.Errorf("lanes %+v, relay %+v", ix.Lanes(), st)
		})
		return st.Epoch, st.Sequence
	}
	publish(40)
	epoch, _ := following(0)

	admin := connectAs(t, srv, adminUser)
	// A deleted input stream takes the events after the relay's last
	// checkpoint with it (stores of the next events would then name
	// unknown parents): delete only once the checkpoint covers them all.
	snaps, err := admin.js.ObjectStore(ctx, wire.SnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	cpName, err := relay.CheckpointObjectName(testDomain, dc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
		info, err := snaps.GetInfo(ctx, cpName)
		if err != nil {
			return err
		}
		if got, want := info.Metadata[relay.MetaInputSequence], fmt.Sprint(r.Status().InputSeq); got != want {
			return fmt.Errorf("checkpoint covers input %s, relay at %s", got, want)
		}
		return nil
	})
	for _, stream := range []string{streams.EventStream, streams.LaneStream} {
		if err := admin.js.DeleteStream(ctx, stream); err != nil {
			t.Fatalf("admin deleting %s: %v", stream, err)
		}
	}
	testenv.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
		for _, stream := range []string{streams.EventStream, streams.LaneStream} {
			if _, err := admin.js.Stream(ctx, stream); err != nil {
				return fmt.Errorf("%s: %w", stream, err)
			}
		}
		return nil
	})
	// The new lane stream starts its sequences again: wait for the relay's
	// new epoch, then for new events on the lane.
	testenv.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
		if st := r.Status(); st.Epoch <= epoch || st.State != relay.StateActive {
			return fmt.Errorf("relay %+v, epoch before %d", st, epoch)
		}
		return nil
	})
	publish(40)
	following(0)

	requireNoViolation(t, "relay "+dc, rc)
	requireNoViolation(t, "indexer", ixConn)
	requireNoViolation(t, "worker "+dc, worker)
}
