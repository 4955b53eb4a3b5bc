package follow

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// earlyCount reads one outcome of MetricEarlyDeltas on r's lane.
func earlyCount(s *runningService, r *fakeRelay, outcome string) uint64 {
	return metricCount(s.reg, MetricEarlyDeltas, strconv.Itoa(r.lane), "outcome", outcome)
}

// A lane admits most deltas from their core copies and every one of them
// is confirmed by its stored copy: the answers are those of the exact
// state, as without early deltas, and nothing diverges.
func TestEarlyDeltasAreConfirmedByTheirStoredCopies(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(41, 40, 16)
	s := startService(t, e.nc, e.js, testConfig(t))
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	feed(r, w, func(i int) int { return 1 + i%16 })
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, waitTotal, "every early delta confirmed", func() bool {
		return earlyCount(s, r, earlyConfirmed) == earlyCount(s, r, earlyAdmitted)
	})
	// 40 chains, each its own delta: the core copy wins the race to the
	// run goroutine for nearly all of them (it is handed over before the
	// stream stores the message).
	if got := earlyCount(s, r, earlyAdmitted); got == 0 {
		t.Fatalf("no delta admitted early out of %d", r.pub.LastSequence())
	}
	if got := earlyCount(s, r, earlyDiverged); got != 0 {
		t.Fatalf("diverged = %d", got)
	}
	if got := metricCount(s.reg, MetricFaults, strconv.Itoa(r.lane)); got != 0 {
		t.Fatalf("faults = %d", got)
	}
}

// With StoredDeltasOnly no core copy is read at all.
func TestStoredDeltasOnlyAdmitsNothingEarly(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(42, 20, 8)
	cfg := testConfig(t)
	cfg.StoredDeltasOnly = true
	s := startService(t, e.nc, e.js, cfg)
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	feed(r, w, func(i int) int { return 1 + i%8 })
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	if err := checkDepths(s.Service, r, w); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{earlyAdmitted, earlySkipped, earlyConfirmed, earlyDropped} {
		if got := earlyCount(s, r, o); got != 0 {
			t.Fatalf("%s = %d with stored deltas only", o, got)
		}
	}
}

// publishRefused publishes a copy of the relay's last delta as the next
// one, with every image cleared, under a fence the stream refuses: core
// subscribers get it, the stream stores nothing.
func publishRefused(t *testing.T, r *fakeRelay) {
	t.Helper()
	fd := r.lastDelta
	next := r.pub.LastSequence()
	fd.BaseSequence, fd.Sequence = next, next+1
	fd.Images = append([]ckf.BucketImage(nil), fd.Images...)
	for i := range fd.Images {
		fd.Images[i].Value = 0
	}
	b, err := wire.AppendDelta(nil, &fd)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.js.PublishMsg(testCtx(t), &nats.Msg{Subject: r.subj.Delta, Data: b},
		jetstream.WithExpectLastSequenceForSubject(r.lastLaneSeq+1000, r.subj.Filter))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("refused publish: %v, want wrong last sequence", err)
	}
}

// A core copy whose publish the stream refused (a fenced-off writer, a
// relay that lost its lane) is admitted early, as it looks like the next
// delta; the stream never confirms it, so the lane leaves the ready set
// and bootstraps again, and ends up with exactly what the stream holds.
func TestAnEarlyDeltaTheStreamNeverStoredDoesNotStick(t *testing.T) {
	for _, tc := range []struct {
		name string
		// next is the relay's traffic after the refused copy: a real next
		// delta (other bytes at the same sequence), or only a drain marker
		// (the epoch's stored deltas end before the early one).
		next func(r *fakeRelay, w *workload)
	}{
		{"next stored delta differs", func(r *fakeRelay, w *workload) {
			r.apply(storeChain(7, w.chains[0], 0, len(w.chains[0])))
			r.drain()
		}},
		// Nothing: the relay stays quiet (an idle relay's drain marker
		// repeats the last one's Msg-Id, so the stream keeps the first).
		{"relay quiet after it", func(r *fakeRelay, w *workload) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.relay(t, "dc-a")
			w := newWorkload(43, 12, 8)
			s := startService(t, e.nc, e.js, testConfig(t), func(s *Service) { s.earlyConfirmWithin = 300 * time.Millisecond })
			feed(r, w, func(i int) int { return 4 })
			waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
			if err := checkDepths(s.Service, r, w); err != nil {
				t.Fatal(err)
			}
			admitted := earlyCount(s, r, earlyAdmitted)

			publishRefused(t, r)
			testenv.WaitFor(t, waitTotal, "the refused copy admitted early", func() bool {
				return earlyCount(s, r, earlyAdmitted) == admitted+1
			})
			tc.next(r, w)

			testenv.WaitFor(t, waitTotal, "the divergence seen", func() bool { return earlyCount(s, r, earlyDiverged) == 1 })
			lane := strconv.Itoa(r.lane)
			if got := metricCount(s.reg, MetricFaults, lane, "kind", faultEarlyDiverged); got != 1 {
				t.Fatalf("%s faults = %d, want 1", faultEarlyDiverged, got)
			}
			waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
			testenv.WaitFor(t, waitTotal, "lane ready again", func() bool { return isReady(s.Service, r.lane) })
			if err := checkDepths(s.Service, r, w); err != nil {
				t.Fatal(err)
			}
			if got := metricCount(s.reg, MetricBootstraps, lane, "outcome", "installed"); got != 2 {
				t.Fatalf("installed bootstraps = %d, want 2", got)
			}
		})
	}
}
