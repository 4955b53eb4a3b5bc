package lease_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
)

// Before issue 6, a counter at 2^64-1 wrapped the next epoch to 0.
func TestAnEpochCounterAtItsMaximumIsRefusedNotWrapped(t *testing.T) {
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	kv, err := srv.JetStream(t).KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "epoch."+domain+".dc-a", []byte(`{"epoch":18446744073709551615}`)); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, domain, "dc-a", "relay-1", time.Minute)
	e := asError(t, err, lease.ErrEpochExhausted)
	if e.Epoch != 1<<64-1 || !strings.Contains(err.Error(), "18446744073709551615") {
		t.Fatalf("error lacks detail: %v", err)
	}
	if cur, _ := c.CurrentEpoch(ctx, domain, "dc-a"); cur != 1<<64-1 {
		t.Fatalf("counter moved to %d", cur)
	}
	// An operator repairs the key: epochs resume above the repaired value.
	if _, err := kv.Put(ctx, "epoch."+domain+".dc-a", []byte(`{"epoch":7}`)); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-1", time.Minute)
	if err != nil || l.Epoch() != 8 {
		t.Fatalf("after repair: %v %v", l, err)
	}
}

func TestVerifyTellsAStrayWriterFromASuccessor(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	const ttl = time.Second
	l, err := c.Acquire(ctx, domain, "dc-a", "relay-1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Verify(ctx); err != nil {
		t.Fatalf("held lease: %v", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Verify(ctx); err != nil {
		t.Fatalf("renewed lease: %v", err)
	}
	// The holder's clock stands still: only the server's expiry lets the
	// successor in.
	waitNoLease(t, c, "dc-a", 5*time.Second)
	l2, err := c.Acquire(ctx, domain, "dc-a", "relay-2", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Verify(ctx); !errors.Is(err, lease.ErrLeaseLost) || !l.Lost() {
		t.Fatalf("superseded lease verified: %v", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done still open")
	}
	if err := l2.Verify(ctx); err != nil {
		t.Fatalf("successor: %v", err)
	}
}

// Before issue 6, 15 entries with 100 KB names were obeyed: they took the
// lanes and became metric labels.
func TestLaneMapEntriesAreValidatedOnRead(t *testing.T) {
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	if _, err := c.Register(ctx, domain, "dc-a", testPool(t, "dc-a")); err != nil {
		t.Fatal(err)
	}
	kv, err := srv.JetStream(t).KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.LaneMap(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := json.Marshal(&m)
	var raw map[string]any
	dec := json.NewDecoder(strings.NewReader(string(stored)))
	dec.UseNumber() // dc ids are u64
	if err := dec.Decode(&raw); err != nil {
		t.Fatal(err)
	}
	lanes := raw["lanes"].([]any)
	good := lanes[0].(map[string]any)
	entry := func(name string, id uint64) map[string]any {
		e := map[string]any{}
		for k, v := range good {
			e[k] = v
		}
		e["dc"], e["dc_id"] = name, id
		return e
	}
	long := strings.Repeat("x", 100<<10)
	for i := 1; i < 12; i++ {
		lanes[i] = entry(fmt.Sprintf("%s%d", long[:1000], i), uint64(ckf.DcIDFromName(long)))
	}
	lanes[12] = entry("dc.b", uint64(ckf.DcIDFromName("dc.b"))) // subject separator
	lanes[13] = entry("dc-c", 12345)                            // id not derived from the name
	lanes[14] = entry("dc-a", uint64(ckf.DcIDFromName("dc-a"))) // duplicate
	lanes[15] = entry("dc-d", uint64(ckf.DcIDFromName("dc-d"))) // valid
	b, _ := json.Marshal(raw)
	if _, err := kv.Put(ctx, "lanes."+domain, b); err != nil {
		t.Fatal(err)
	}
	got, err := c.LaneMap(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	if got.Occupied() != 1|1<<15 || len(got.Rejected) != 14 {
		t.Fatalf("occupied %016b rejected %d: %v", got.Occupied(), len(got.Rejected), got.Rejected)
	}
	for _, r := range got.Rejected {
		if len(r) > 200 {
			t.Fatalf("rejection report of %d bytes", len(r))
		}
	}
	// A real DC registers into a lane the rejected entries held, and the
	// rewrite drops them.
	lane, err := c.Register(ctx, domain, "dc-e", testPool(t, "dc-e"))
	if err != nil || lane != 1 {
		t.Fatalf("register: lane %d %v", lane, err)
	}
	after, err := c.LaneMap(ctx, domain)
	if err != nil || len(after.Rejected) != 0 || after.Occupied() != 1|1<<1|1<<15 {
		t.Fatalf("after register: %016b %v %v", after.Occupied(), after.Rejected, err)
	}
}

func TestAWatchedLaneMapThatDoesNotDecodeIsReportedNotObeyed(t *testing.T) {
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	if _, err := c.Register(ctx, domain, "dc-a", testPool(t, "dc-a")); err != nil {
		t.Fatal(err)
	}
	ch, err := c.WatchLaneMap(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	if m := <-ch; m.Err != nil || m.Occupied() != 1 {
		t.Fatalf("first map %+v", m)
	}
	kv, err := srv.JetStream(t).KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "lanes."+domain, []byte("junk")); err != nil {
		t.Fatal(err)
	}
	m := <-ch
	if !errors.Is(m.Err, lease.ErrCorruptRecord) || m.Occupied() != 0 {
		t.Fatalf("corrupt map delivered as %+v", m)
	}
}
