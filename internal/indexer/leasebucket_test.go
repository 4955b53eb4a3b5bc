package indexer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// The lease bucket deleted and recreated by hand without per-key TTLs
// while a relay and an indexer run (the relay side is
// internal/relay's TestARelayRepairsALeaseBucketRecreatedWithoutPerKeyTTLs):
// the relay sets up again, which upgrades the bucket, registers its lane
// and takes an epoch of the restarted counter; the indexer follows it and
// answers the DC exactly, old and new blocks, without any restart.
func TestADCStaysAnsweredAfterItsLeaseBucketIsRecreatedWithoutTTLs(t *testing.T) {
	e := newEnv(t)
	ra := startKvRelay(t, e, kvRelayConfig("a", "relay-a", 1<<12), "127.0.0.1:0")
	testenv.WaitFor(t, waitTotal, "relay active", func() bool { return ra.r.Status().State == relay.StateActive })
	s := startService(t, e.nc, e.js, testConfig(t))
	w := newKvWorkload(71, 24)
	w.publish(t, e.js, "a")
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return w.exact(s.Service, 0) })

	ctx := context.Background()
	testenv.Eventually(t, waitTotal, time.Millisecond, func() error {
		if err := e.js.DeleteKeyValue(ctx, wire.LeaseBucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return err
		}
		_, err := e.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: wire.LeaseBucket, History: 5, Storage: jetstream.MemoryStorage})
		return err
	})
	more := newKvWorkload(72, 24)
	more.publish(t, e.js, "a")
	testenv.Eventually(t, 2*waitTotal, waitInterval, func() error {
		st, err := e.js.Stream(ctx, "KV_"+wire.LeaseBucket)
		if err != nil {
			return err
		}
		if cfg := st.CachedInfo().Config; !cfg.AllowMsgTTL {
			return fmt.Errorf("lease bucket not upgraded")
		}
		if err := w.exact(s.Service, 0); err != nil {
			return err
		}
		return more.exact(s.Service, 0)
	})
}
