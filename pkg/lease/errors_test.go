package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// The messages operators read name the fields that apply to the failure
// and nothing else: no empty domain, no lane -1, no epoch 0.
func TestErrorMessagesNameWhatApplies(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	c, clk := newCoordinator(t, srv.JetStream(t))

	_, err := lease.New(ctx, srv.JetStream(t), lease.WithHistory(0))
	if got, want := err.Error(), "lease: invalid option: history 0, want 1..64"; got != want {
		t.Errorf("option error %q, want %q", got, want)
	}
	if got, want := lease.ValidateName("").Error(), `lease: invalid name: "" must be 1..64 characters`; got != want {
		t.Errorf("name error %q, want %q", got, want)
	}
	_, err = c.Acquire(ctx, domain, "bad.dc", "relay-1", time.Minute)
	if got, want := err.Error(), `lease: invalid name: dc "bad.dc" has '.' at 3; want [A-Za-z0-9_-]`; got != want {
		t.Errorf("pool name error %q, want %q", got, want)
	}

	if _, err := c.Register(ctx, domain, "dc-a", testPool(t, "dc-a")); err != nil {
		t.Fatal(err)
	}
	_, err = c.Register(ctx, domain, "dc-a", testPool(t, "dc-x"))
	if got, want := err.Error(), "lease: lane conflict: domain prod dc dc-a lane 0: name is registered for pool "; !strings.HasPrefix(got, want) {
		t.Errorf("conflict error %q, want prefix %q", got, want)
	}
	err = c.RequestSnapshot(ctx, domain, "dc-a", "")
	if got, want := err.Error(), "lease: invalid argument: domain prod dc dc-a: empty requester"; got != want {
		t.Errorf("argument error %q, want %q", got, want)
	}
	// A domain's failure names no DC.
	kv, err := srv.JetStream(t).KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "lanes.other", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	_, err = c.LaneMap(ctx, "other")
	if got, want := err.Error(), "lease: corrupt record: domain other: key lanes.other: lane map format 0, want 1"; got != want {
		t.Errorf("domain error %q, want %q", got, want)
	}

	if _, err := c.Acquire(ctx, domain, "dc-a", "relay-1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, domain, "dc-a", "relay-2", 10*time.Second)
	want := "lease: lease held by another owner: domain prod dc dc-a holder relay-1 epoch 1 expires " +
		clk.Now().Add(10*time.Second).UTC().Format(time.RFC3339Nano)
	if got := err.Error(); got != want {
		t.Errorf("held error %q, want %q", got, want)
	}
	if e := asError(t, err, lease.ErrLeaseHeld); e.Lane != -1 {
		t.Errorf("held error names lane %d, want -1 (none)", e.Lane)
	}

	// The cause is part of the message and of the chain.
	if _, err := kv.Put(ctx, "epoch."+domain+".dc-b", []byte("junk")); err != nil {
		t.Fatal(err)
	}
	_, err = c.CurrentEpoch(ctx, domain, "dc-b")
	want = "lease: corrupt record: domain prod dc dc-b: key epoch.prod.dc-b: invalid character 'j' looking for beginning of value"
	if got := err.Error(); got != want {
		t.Errorf("corrupt error %q, want %q", got, want)
	}
	var e *lease.Error
	if !errors.As(err, &e) || e.Err == nil || !errors.Is(err, e.Err) || !errors.Is(err, lease.ErrCorruptRecord) {
		t.Errorf("corrupt error chain: %#v", err)
	}

	// A hand-built error of another kind never prints its zero lane.
	if got := (&lease.Error{Kind: lease.ErrLeaseLost}).Error(); got != "lease: lease lost" {
		t.Errorf("bare error %q", got)
	}
	if got := lease.ErrLeaseOrphaned.Error(); got != "lease: lease orphaned" {
		t.Errorf("orphaned kind %q", got)
	}
}
