package follow

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// pipeTimeout is the error nats.go's Object Store returns when no chunk of
// the body arrives before the read deadline ("read pipe: i/o timeout").
var pipeTimeout = &net.OpError{Op: "read", Net: "pipe", Err: os.ErrDeadlineExceeded}

// failingReads makes the first n snapshot body reads fail with err, then
// reads for real; it records every attempt's deadline.
type failingReads struct {
	n, calls    atomic.Int64
	err         error
	noDeadline  atomic.Bool
	maxDeadline atomic.Int64 // longest deadline seen, in ns from the call
}

func (f *failingReads) install(s *Service) {
	real := s.readObject
	s.readObject = func(ctx context.Context, store jetstream.ObjectStore, mk *wire.SnapshotMarker, format ckf.FormatIdentity) ([]uint64, error) {
		d, ok := ctx.Deadline()
		if !ok {
			f.noDeadline.Store(true)
		} else if left := int64(time.Until(d)); left > f.maxDeadline.Load() {
			f.maxDeadline.Store(left)
		}
		if f.calls.Add(1) <= f.n.Load() {
			return nil, f.err
		}
		return real(ctx, store, mk, format)
	}
}

func TestStalledSnapshotReadIsRetriedWithoutALaneFault(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(21, 12, 8)
	feed(r, w, func(i int) int { return 1 + i%8 })
	r.snapshot()
	f := &failingReads{err: pipeTimeout}
	f.n.Store(1)
	s := startService(t, e.nc, e.js, testConfig(t), f.install)
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return checkDepths(s.Service, r, w) })

	lane := strconv.Itoa(r.lane)
	if got := metricCount(s.reg, MetricSnapshotFetchRetries, lane); got != 1 {
		t.Fatalf("fetch retries = %d, want 1", got)
	}
	if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "failed"); got != 0 {
		t.Fatalf("failed bootstraps = %d, want 0: a retried read is not a bootstrap failure", got)
	}
	if st, _ := statusOf(s.Service, r.lane); st.LastFault != "" {
		t.Fatalf("last fault %q, want none", st.LastFault)
	}
	if f.noDeadline.Load() {
		t.Fatal("a snapshot read ran without a deadline of its own")
	}
	// The test lane's body is a few KiB: its size adds well under a second.
	if got := time.Duration(f.maxDeadline.Load()); got > DefaultSnapshotFetchTimeout+time.Second {
		t.Fatalf("read deadline %s exceeds the configured bound", got)
	}
}

func TestSnapshotReadTimingOutOnEveryAttemptIsALaneFault(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(22, 8, 6)
	feed(r, w, func(i int) int { return 1 + i%6 })
	r.snapshot()
	cfg := testConfig(t)
	cfg.SnapshotFetchAttempts = 2
	f := &failingReads{err: pipeTimeout}
	f.n.Store(1 << 40)
	s := startService(t, e.nc, e.js, cfg, f.install)
	lane := strconv.Itoa(r.lane)
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		if got := metricCount(s.reg, MetricFaults, lane, "kind", "snapshot_fetch"); got == 0 {
			return errors.New("no snapshot_fetch fault yet")
		}
		st, err := statusOf(s.Service, r.lane)
		if err != nil {
			return err
		}
		if st.LastFault == "" {
			return errors.New("no last fault reported")
		}
		return nil
	})
	if isReady(s.Service, r.lane) {
		t.Fatal("lane ready without a snapshot")
	}
	// Each failed bootstrap made exactly Attempts reads and Attempts-1 retries.
	failed := metricCount(s.reg, MetricBootstraps, lane, "outcome", "failed")
	retries := metricCount(s.reg, MetricSnapshotFetchRetries, lane)
	if failed == 0 || retries < failed || retries > failed+1 {
		t.Fatalf("failed bootstraps %d, retries %d: want one retry per failed bootstrap", failed, retries)
	}
	// The Object Store comes back: the lane recovers on its own.
	f.n.Store(0)
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return checkDepths(s.Service, r, w) })
}

func TestMissingSnapshotObjectIsNotRetried(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	feed(r, newWorkload(23, 4, 4), func(i int) int { return 2 })
	r.snapshot()
	f := &failingReads{err: jetstream.ErrObjectNotFound}
	f.n.Store(1)
	s := startService(t, e.nc, e.js, testConfig(t), f.install)
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	lane := strconv.Itoa(r.lane)
	if got := metricCount(s.reg, MetricSnapshotFetchRetries, lane); got != 0 {
		t.Fatalf("fetch retries = %d, want 0: only timeouts are retried", got)
	}
	if got := metricCount(s.reg, MetricFaults, lane, "kind", "snapshot_fetch"); got != 1 {
		t.Fatalf("snapshot_fetch faults = %d, want 1", got)
	}
}

func TestIsTimeout(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{pipeTimeout, true},
		{context.DeadlineExceeded, true},
		{os.ErrDeadlineExceeded, true},
		{jetstream.ErrObjectNotFound, false},
		{context.Canceled, false},
		{errors.New("digest mismatch"), false},
	} {
		if got := isTimeout(tc.err); got != tc.want {
			t.Errorf("isTimeout(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
