package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/streams"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// clusterStreams is the clustered hub's storage: every lane stream, object
// store and lease bucket R3 on files, the input R1 on the DC site's server.
var clusterStreams = streams.Options{Replicas: 3, EventReplicas: 1}

// TestLaneStreamLeaderKillLeavesNoLaneBelowTheExactDepth kills the node
// leading CKF_LANES on a three-node hub while both DCs' relays publish
// under load, leaves it dead, and requires every lane answer to reach the
// exact depth of its DC once the load is over: R3 keeps every lane message
// the relays had acknowledged, so nothing may be missing.
func TestLaneStreamLeaderKillLeavesNoLaneBelowTheExactDepth(t *testing.T) {
	hub := testenv.StartCluster(t, 3)
	// The DCs' input streams live on their own site, as on a DC leaf: the
	// hub's fault does not touch them.
	site := testenv.StartServer(t)
	siteJS := site.JetStream(t)

	icfg := indexerConfig(t, nil)
	icfg.Streams = clusterStreams
	icfg.LeaseOptions = []lease.Option{lease.WithReplicas(3)}
	// Three of the relays' heartbeats.
	icfg.LaneStaleAfter = 3 * time.Second
	ixNC := hub.Connect(t)
	ixJS, err := jetstream.New(ixNC)
	if err != nil {
		t.Fatal(err)
	}
	ix := startIndexer(t, ixNC, ixJS, icfg)
	t.Logf("indexer on %s", ixNC.ConnectedServerName())
	dcs := []string{"dc-a", "dc-b"}
	relays := map[string]*relayProc{}
	for _, inst := range []string{"1", "2"} {
		for _, dc := range dcs {
			cfg := relayConfig(t, dc, "relay-"+dc+inst, nil)
			cfg.Streams = clusterStreams
			cfg.PublishInterval = 10 * time.Millisecond
			cfg.HeartbeatInterval = time.Second
			cfg.CheckpointInterval = time.Second
			cfg.InputJS = site.JetStream(t)
			nc := hub.Connect(t)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			relays[dc+inst] = startRelay(t, nc, js, cfg)
			t.Logf("relay %s on %s", dc+inst, nc.ConnectedServerName())
		}
	}

	const before, during = 200, 600
	w := newWorkload(t, dcs, before+during, 27)
	w.publish(t, siteJS, before)
	w.convergeWithin(t, ix, wanSettle)

	probe := hub.JetStream(t)
	leader := ""
	testenv.Eventually(t, settle, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		leader, err = testenv.StreamLeader(ctx, probe, streams.LaneStream)
		if err == nil && leader == "" {
			err = fmt.Errorf("%s has no leader", streams.LaneStream)
		}
		return err
	})
	epochs := map[string]uint64{}
	for dc, r := range relays {
		epochs[dc] = r.Status().Epoch
	}

	// Load in small steps, the leader killed a third of the way in; its
	// node stays down.
	const step = 10
	for i := 0; i < during; i += step {
		if i == during/3 {
			t.Logf("killing %s, the leader of %s", leader, streams.LaneStream)
			hub.Kill(t, leader)
		}
		w.publish(t, siteJS, step)
	}

	testenv.WaitFor(t, wanSettle, "every lane active", func() bool {
		lanes := ix.Lanes()
		for _, l := range lanes {
			if l.State != "active" {
				return false
			}
		}
		return len(lanes) == len(dcs)
	})
	_ = relay.StateActive
	// Once every lane is active again, the index must reach the exact
	// state; a lane left below it is the failure this test is about.
	var last error
	deadline := time.Now().Add(laneSettleAfterKill)
	for time.Now().Before(deadline) {
		if _, last = w.check(ix); last == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if testing.Verbose() || last != nil {
		var b strings.Builder
		for _, l := range ix.Lanes() {
			fmt.Fprintf(&b, "\n  lane %+v", l)
		}
		for dc, r := range relays {
			fmt.Fprintf(&b, "\n  relay %s: %+v", dc, r.Status())
		}
		for i, dc := range dcs {
			_, err := w.check(ix, dc)
			fmt.Fprintf(&b, "\n  %s: %d blocks exact; %v", dc, w.rp.Blocks(i), err)
		}
		if last != nil {
			t.Log(testenv.Goroutines())
			t.Fatalf("%s after the lanes were active again: %v%s", laneSettleAfterKill, last, b.String())
		}
		t.Logf("converged:%s", b.String())
	}
}

// laneSettleAfterKill bounds how long an active lane may trail its
// relay's published state once the load has ended.
const laneSettleAfterKill = 30 * time.Second
