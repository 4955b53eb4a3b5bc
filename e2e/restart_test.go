package e2e

import (
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// TestNATSServerRestartIsSurvived restarts the (file-backed) server under a
// running relay and indexer: both reconnect, the relay recovers under a new
// epoch if it has to, and the indexer converges again with no false
// negative.
func TestNATSServerRestartIsSurvived(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	icfg := indexerConfig(t, nil)
	icfg.Streams = streams.Options{} // file storage: the streams survive the restart
	ix := startIndexer(t, nc, js, icfg)
	rcfg := relayConfig(t, "dc-a", "relay-a", nil)
	rcfg.Streams = streams.Options{}
	r := startRelay(t, nc, js, rcfg)
	w := newWorkload(t, []string{"dc-a"}, 600, 8)
	w.publish(t, js, 300)
	w.converge(t, ix)

	srv.Restart(t)
	testenv.WaitFor(t, settle, "client reconnected", func() bool { return nc.IsConnected() })
	// JetStream needs a moment after a restart before it accepts
	// publishes; w.publish fails the test on error, so retry until ready.
	testenv.Eventually(t, settle, 50*time.Millisecond, func() error {
		_, err := js.AccountInfo(t.Context())
		return err
	})
	w.publish(t, js, 300)
	testenv.WaitFor(t, settle, "relay active", func() bool { return r.Status().State == relay.StateActive })
	w.converge(t, ix)
}
