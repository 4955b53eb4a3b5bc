package relay_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// A hub that comes back without its JetStream state (a replaced node, a
// lost volume): the relay recreates the lanes, the lease bucket and the
// object store, rebuilds its exact state from the DC's input, which it
// still has, and publishes again.
func TestARelayRecoversFromAHubThatLostItsState(t *testing.T) {
	hub, dc := testenv.StartServer(t), testenv.StartServer(t)
	hnc := hub.Connect(t, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	djs := dc.JetStream(t)
	cfg := testConfig("a")
	cfg.InputJS = djs
	cfg.CheckpointInterval = 100 * time.Millisecond
	cfg.RestartBackoffMax = 200 * time.Millisecond
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	js, err := jetstream.New(hnc)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := startRelay(t, hnc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	steps := traceEvents(t, 300)
	publishEvents(t, djs, "a", steps)
	want := reference(t, cfg.CKF, steps).Words()
	laneConverges(t, js, r, want)
	epoch := r.Status().Epoch

	hub.Shutdown()
	if err := os.RemoveAll(hub.StoreDir()); err != nil {
		t.Fatal(err)
	}
	hub.Restart(t)
	testenv.WaitFor(t, 60*time.Second, "a lane on the new hub", func() bool {
		s, err := js.Stream(context.Background(), streams.LaneStream)
		if err != nil {
			return false
		}
		last, err := streams.LastLaneSequence(context.Background(), s, "ckf.>")
		return err == nil && last > 0 && r.Status().State == relay.StateActive
	})
	t.Logf("status %+v", r.Status())
	laneConverges(t, js, r, want)
	t.Logf("epoch %d before the loss, %d after", epoch, r.Status().Epoch)
}
