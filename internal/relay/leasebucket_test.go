package relay_test

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

// recreateBucketWithoutTTLs deletes the lease bucket and creates it again
// the way an operator would by hand (`nats kv add`): no per-key TTLs, no
// expiry markers. A relay may recreate it in between (it sets everything
// up again when its lease is lost); then the operator's turn is retried.
func recreateBucketWithoutTTLs(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	testenv.Eventually(t, 0, time.Millisecond, func() error {
		if err := js.DeleteKeyValue(ctx, wire.LeaseBucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			return err
		}
		_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: wire.LeaseBucket, History: 5, Storage: jetstream.MemoryStorage})
		return err
	})
	st, err := js.Stream(ctx, "KV_"+wire.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL != 0 {
		t.Fatalf("the recreated bucket has per-key TTLs: %+v", cfg)
	}
}

// The lease bucket recreated without per-key TTLs while a relay publishes
// (an operator's `nats kv rm` and `nats kv add`): the relay's lease record
// is gone, its next renewal fails and its epoch ends; it then sets up again
// as it does at start, which upgrades the bucket in place, takes a new
// epoch whose record carries a server TTL, and keeps renewing it. The DC
// is not left dark until a restart.
func TestARelayRepairsALeaseBucketRecreatedWithoutPerKeyTTLs(t *testing.T) {
	r, js, reg := activeRelay(t, testConfig("a"))
	before := r.Status().Epoch
	recreateBucketWithoutTTLs(t, js)

	ctx := context.Background()
	key := "$KV." + wire.LeaseBucket + ".lease." + domain + ".a"
	var epoch uint64
	var rev uint64
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		st := r.Status()
		if st.State != relay.StateActive {
			return fmt.Errorf("relay %s at epoch %d (was %d)", st.State, st.Epoch, before)
		}
		s, err := js.Stream(ctx, "KV_"+wire.LeaseBucket)
		if err != nil {
			return err
		}
		if cfg := s.CachedInfo().Config; !cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL == 0 {
			return fmt.Errorf("bucket not upgraded: allow_msg_ttl %t, marker TTL %s", cfg.AllowMsgTTL, cfg.SubjectDeleteMarkerTTL)
		}
		m, err := s.GetLastMsgForSubject(ctx, key)
		if err != nil {
			return err
		}
		if m.Header.Get("Nats-TTL") == "" {
			return fmt.Errorf("lease record without a server TTL (headers %v)", m.Header)
		}
		epoch, rev = st.Epoch, m.Sequence
		return nil
	})
	if out, ok := metricsContain(reg, `ckf_relay_fences_total{reason="lease_lost"}`); !ok {
		t.Fatalf("the relay never lost its lease to the recreated bucket:\n%s", out)
	}
	// Three renewals of that epoch's record go through.
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		s, err := js.Stream(ctx, "KV_"+wire.LeaseBucket)
		if err != nil {
			return err
		}
		m, err := s.GetLastMsgForSubject(ctx, key)
		if err != nil {
			return err
		}
		if st := r.Status(); st.State != relay.StateActive || st.Epoch != epoch {
			t.Fatalf("relay %s at epoch %d after the repair, want active at %d", st.State, st.Epoch, epoch)
		}
		if m.Sequence < rev+3 || m.Header.Get("Nats-TTL") == "" {
			return fmt.Errorf("lease record at stream sequence %d (TTL %q), want three renewals after %d", m.Sequence, m.Header.Get("Nats-TTL"), rev)
		}
		return nil
	})
}
