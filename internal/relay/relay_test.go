package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

const domain = "test"

func testConfig(dc string) relay.Config {
	c := relay.DefaultConfig(domain, dc)
	c.Instance = "relay-" + dc
	c.CKF = ckf.NewConfig(1 << 14)
	c.PublishInterval = 2 * time.Millisecond
	c.HeartbeatInterval = 20 * time.Millisecond
	c.LeaseTTL = 2 * time.Second // the server keeps a lease key at least 1 s; a starved -race run must not miss a renewal
	c.Streams = streams.Options{Memory: true}
	return c
}

// startRelay runs a relay until the test ends.
func startRelay(t testing.TB, nc *nats.Conn, js jetstream.JetStream, cfg relay.Config) (*relay.Relay, context.CancelFunc) {
	t.Helper()
	return startRelayWith(t, nc, js, cfg, nil)
}

// startRelayWith is startRelay with prep run on the relay before Run
// (test hooks).
func startRelayWith(t testing.TB, nc *nats.Conn, js jetstream.JetStream, cfg relay.Config, prep func(*relay.Relay)) (*relay.Relay, context.CancelFunc) {
	t.Helper()
	r, err := relay.New(nc, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if prep != nil {
		prep(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("relay run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("relay did not stop; goroutines:\n%s", testenv.Goroutines())
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

// trace returns replayed events for one DC, as JSON messages per worker.
func traceEvents(t *testing.T, n int) []replay.Step {
	t.Helper()
	reqs, err := replay.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	rp, err := replay.New(replay.Config{DCs: []string{"a"}, WorkersPerDC: 3, CapacityBlocks: 256, Duplication: 1, Affinity: 0.8, Seed: 7}, reqs[:n])
	if err != nil {
		t.Fatal(err)
	}
	var steps []replay.Step
	for {
		st, ok := rp.Next()
		if !ok {
			return steps
		}
		steps = append(steps, st)
	}
}

func publishEvents(t *testing.T, js jetstream.JetStream, dc string, steps []replay.Step) {
	t.Helper()
	ctx := context.Background()
	for _, st := range steps {
		if len(st.Events) == 0 {
			continue
		}
		b, err := json.Marshal(st.Events)
		if err != nil {
			t.Fatal(err)
		}
		subj, _ := wire.WorkerEventsSubject(domain, dc, st.Worker)
		if _, err := js.Publish(ctx, subj, b); err != nil {
			t.Fatal(err)
		}
	}
}

// laneImage reconstructs a lane from its newest snapshot marker and the
// deltas after it, checking continuity, and returns the words with the
// identity and sequence reached.
func laneImage(t *testing.T, js jetstream.JetStream, dc string) ([]uint64, wire.SnapshotMarker, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subj, _ := wire.NewLaneSubjects(domain, dc)
	lanes, err := js.Stream(ctx, streams.LaneStream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := lanes.GetLastMsgForSubject(ctx, subj.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	marker, err := wire.DecodeSnapshotMarker(raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	obj := snapshotObjects(t, js)
	body, err := obj.GetBytes(ctx, marker.ObjectName)
	if err != nil {
		t.Fatal(err)
	}
	if err := marker.VerifyBody(body); err != nil {
		t.Fatal(err)
	}
	words, err := wire.DecodeSnapshotBody(body, marker.Identity.Format, nil)
	if err != nil {
		t.Fatal(err)
	}
	seq := marker.Sequence
	last, err := streams.LastLaneSequence(ctx, lanes, subj.Filter)
	if err != nil {
		t.Fatal(err)
	}
	if last == raw.Sequence {
		return words, marker, seq
	}
	cons, err := lanes.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj.Filter}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: raw.Sequence + 1})
	if err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if kind, _ := wire.PeekKind(msg.Data()); kind == wire.KindDelta {
			d, err := wire.DecodeDelta(msg.Data())
			if err != nil {
				t.Fatal(err)
			}
			if d.Lease.Epoch != marker.Lease.Epoch || d.BaseSequence != seq {
				t.Fatalf("delta %d→%d epoch %d after %d (epoch %d)", d.BaseSequence, d.Sequence, d.Lease.Epoch, seq, marker.Lease.Epoch)
			}
			for _, im := range d.Images {
				words[im.Bucket] = im.Value
			}
			seq = d.Sequence
		}
		meta, _ := msg.Metadata()
		if meta.Sequence.Stream >= last {
			return words, marker, seq
		}
	}
}

// reference applies the same events to a fresh producer state.
func reference(t *testing.T, cfg ckf.Config, steps []replay.Step) *producer.State {
	t.Helper()
	cfg.PublishEveryNEvents = 1 << 62
	s, err := producer.NewState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		for i := range st.Events {
			s.ApplyEvent(&st.Events[i])
		}
	}
	return s
}

func TestRelayPublishesALaneThatReproducesTheExactProducerState(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	steps := traceEvents(t, 400)
	cfg := testConfig("a")
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	r, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	publishEvents(t, js, "a", steps)
	ref := reference(t, cfg.CKF, steps)
	want := ref.Words()
	testenv.WaitFor(t, 0, "lane converged", func() bool {
		words, _, _ := laneImage(t, js, "a")
		for i := range want {
			if words[i] != want[i] {
				return false
			}
		}
		return true
	})
	st := r.Status()
	if st.Epoch == 0 || st.UniqueBlocks != ref.Stats().UniqueBlocks || st.Lane != 0 {
		t.Fatalf("status %+v, reference unique %d", st, ref.Stats().UniqueBlocks)
	}
	_, marker, _ := laneImage(t, js, "a")
	if marker.Identity.ProducerIncarnation != st.Epoch || marker.Lease.Epoch != st.Epoch || marker.Lease.Instance != cfg.Instance {
		t.Fatalf("marker %+v status %+v", marker, st)
	}
}

func TestRelayRestartRebuildsFromTheInputStreamUnderANewEpoch(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	steps := traceEvents(t, 300)
	cfg := testConfig("a")
	r1, stop1 := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r1.Status().State == relay.StateActive })
	publishEvents(t, js, "a", steps[:150])
	testenv.WaitFor(t, 0, "first half applied", func() bool { return r1.Status().InputSeq > 0 && r1.Status().Events > 0 })
	epoch1 := r1.Status().Epoch
	stop1()
	// Events arrive while no relay runs; nothing JetStream accepted is lost.
	publishEvents(t, js, "a", steps[150:])
	r2, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active again", func() bool { return r2.Status().State == relay.StateActive })
	if r2.Status().Epoch <= epoch1 {
		t.Fatalf("epoch %d after %d", r2.Status().Epoch, epoch1)
	}
	want := reference(t, cfg.CKF, steps).Words()
	obj, err := js.ObjectStore(context.Background(), wire.SnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 0, "earlier epochs' snapshot bodies pruned", func() bool {
		infos, err := obj.List(context.Background())
		if err != nil {
			return false
		}
		for _, info := range infos {
			if strings.HasPrefix(info.Name, "ckpt/") {
				continue // the pool's checkpoint, written when r1 stopped
			}
			if !strings.Contains(info.Name, fmt.Sprintf("/a/%d-", r2.Status().Epoch)) {
				return false
			}
		}
		return len(infos) > 0
	})
	testenv.WaitFor(t, 0, "lane converged after restart", func() bool {
		words, marker, _ := laneImage(t, js, "a")
		if marker.Lease.Epoch != r2.Status().Epoch {
			return false
		}
		for i := range want {
			if words[i] != want[i] {
				return false
			}
		}
		return true
	})
}

func TestTwoRelaysForOnePoolOnePublishesTheOtherStandsBy(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	a := testConfig("a")
	b := testConfig("a")
	b.Instance = "relay-a-standby"
	ra, stopA := startRelay(t, nc, js, a)
	testenv.WaitFor(t, 0, "a active", func() bool { return ra.Status().State == relay.StateActive })
	rb, _ := startRelay(t, nc, js, b)
	testenv.WaitFor(t, 0, "b standby", func() bool { return rb.Status().State == relay.StateStandby })
	time.Sleep(3 * a.LeaseTTL / 2) // b keeps retrying; a keeps renewing
	if rb.Status().State != relay.StateStandby || ra.Status().State != relay.StateActive {
		t.Fatalf("a %s b %s", ra.Status().State, rb.Status().State)
	}
	epochA := ra.Status().Epoch
	stopA()
	testenv.WaitFor(t, 0, "b takes over", func() bool { return rb.Status().State == relay.StateActive })
	if rb.Status().Epoch <= epochA {
		t.Fatalf("b epoch %d, a had %d", rb.Status().Epoch, epochA)
	}
}

func TestAZombiePublishIsRefusedAndTheRelayRecoversUnderANewEpoch(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := testConfig("a")
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	var inject atomic.Bool
	var stolen atomic.Uint64
	r, _ := startRelayWith(t, nc, js, cfg, func(r *relay.Relay) {
		relay.SetBeforePublish(r, func(kind wire.MessageKind) error {
			if kind == wire.KindDelta && inject.CompareAndSwap(true, false) {
				// A successor takes the lease (its record outlives this
				// relay's local view by a moment) and publishes on the lane
				// before this relay's next publish.
				ctx := context.Background()
				kv, err := js.KeyValue(ctx, lease.DefaultBucket)
				if err != nil {
					return err
				}
				epoch := r.Status().Epoch + 1
				now := time.Now()
				rec := fmt.Sprintf(`{"owner":"successor","epoch":%d,"acquired_at":%d,"expires_at":%d}`, epoch, now.UnixNano(), now.Add(time.Second).UnixNano())
				if _, err := kv.Put(ctx, "epoch."+domain+".a", []byte(fmt.Sprintf(`{"epoch":%d}`, epoch))); err != nil {
					return err
				}
				if _, err := kv.Put(ctx, "lease."+domain+".a", []byte(rec)); err != nil {
					return err
				}
				stolen.Store(epoch)
				subj, _ := wire.NewLaneSubjects(domain, "a")
				_, err = js.Publish(ctx, subj.Heartbeat, []byte("successor"))
				return err
			}
			return nil
		})
	})
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	inject.Store(true)
	publishEvents(t, js, "a", traceEvents(t, 20))
	testenv.WaitFor(t, 0, "recovered under a new epoch", func() bool {
		st := r.Status()
		return st.State == relay.StateActive && stolen.Load() != 0 && st.Epoch > stolen.Load()
	})
	if out, ok := metricsContain(reg, `ckf_relay_fences_total{reason="lane_taken"} 1`); !ok {
		t.Fatalf("fence not counted:\n%s", out)
	}
}

// Before issue 6, any message on the lane subjects fenced the relay (three
// junk messages took it from epoch 1 to 4).
func TestJunkOnTheLaneNeverFencesTheRelay(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := testConfig("a")
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	var inject atomic.Int64
	r, _ := startRelayWith(t, nc, js, cfg, func(r *relay.Relay) {
		relay.SetBeforePublish(r, func(kind wire.MessageKind) error {
			if inject.Add(-1) >= 0 {
				subj, _ := wire.NewLaneSubjects(domain, "a")
				_, err := js.Publish(context.Background(), subj.For(kind), []byte{0xde, 0xad, 0xbe, 0xef})
				return err
			}
			return nil
		})
	})
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	epoch := r.Status().Epoch
	inject.Store(3)
	steps := traceEvents(t, 20)
	publishEvents(t, js, "a", steps)
	want := reference(t, cfg.CKF, steps).Words()
	testenv.WaitFor(t, 0, "junk written and the lane at the exact state", func() bool {
		if inject.Load() >= 0 {
			return false
		}
		words, _, _ := laneImage(t, js, "a")
		return slices.Equal(words, want)
	})
	if st := r.Status(); st.Epoch != epoch || st.State != relay.StateActive {
		t.Fatalf("junk moved the relay: %+v, epoch was %d", st, epoch)
	}
	if out, ok := metricsContain(reg, `ckf_relay_lane_foreign_writes_total 3`); !ok {
		t.Fatalf("foreign writes not counted:\n%s", out)
	}
	if out, ok := metricsContain(reg, `ckf_relay_fences_total{`); ok {
		t.Fatalf("fenced:\n%s", out)
	}
}

func TestBadInputIsCountedAndNeverStopsTheRelay(t *testing.T) {
	r, js, reg := activeRelay(t, testConfig("a"))
	ctx := context.Background()
	for _, m := range []struct{ subj, body string }{
		{"kvevents.test.a.7", `{"worker_id":7`},
		{"kvevents.test.a.7", `{"worker_id":8,"event":{"event_id":1,"data":"cleared","dp_rank":0}}`},
		{"kvevents.test.a.notanumber", `{"worker_id":7,"event":{"event_id":1,"data":"cleared","dp_rank":0}}`},
		{"kvevents.test.a.7", `{"worker_id":7,"event":{"event_id":2,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":5,"tokens_hash":5}]}},"dp_rank":0}}`},
	} {
		if _, err := js.Publish(ctx, m.subj, []byte(m.body)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 0, "good event applied", func() bool { return r.Status().UniqueBlocks == 1 })
	for _, want := range []string{
		`ckf_relay_bad_events_total{reason="malformed"} 1`,
		`ckf_relay_bad_events_total{reason="worker_mismatch"} 1`,
		`ckf_relay_bad_events_total{reason="subject"} 1`,
		`ckf_relay_events_total 1`,
	} {
		if out, ok := metricsContain(reg, want); !ok {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for _, mut := range []func(*relay.Config){
		func(c *relay.Config) { c.Domain = "" },
		func(c *relay.Config) { c.DC = "a.b" },
		func(c *relay.Config) { c.Instance = "" },
		func(c *relay.Config) { c.CKF.ExpectedBlocksPerDC = 0 },
		func(c *relay.Config) { c.PublishInterval = 0 },
		func(c *relay.Config) { c.MaxDeltaImages = wire.MaxDeltaImages + 1 },
		func(c *relay.Config) { c.LeaseTTL = 0 },
		func(c *relay.Config) { c.CheckpointInterval = -time.Second },
		func(c *relay.Config) { c.UploadMinRate = -1 },
	} {
		c := testConfig("a")
		mut(&c)
		if err := c.Validate(); !errors.Is(err, relay.ErrConfig) {
			t.Fatalf("%+v: %v", c, err)
		}
	}
	c := testConfig("a")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestRepeatedSnapshotRequestsKeepTheNewestBody(t *testing.T) {
	_, js, reg := activeRelay(t, testConfig("a"))
	coord, err := lease.New(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	_, first, _ := laneImage(t, js, "a")
	firstInfo := snapshotInfo(t, js, first.ObjectName)
	for i := 1; i <= 4; i++ {
		if err := coord.RequestSnapshot(context.Background(), domain, "a", "test"); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`ckf_relay_snapshots_total{trigger="request"} %d`, i)
		testenv.WaitFor(t, 0, want, func() bool { return hasMetric(reg, want) })
	}
	// The sequence never moved: every request named the same body, which
	// was stored once (a rewrite would purge the chunks a consumer may be
	// reading) and still exists.
	words, marker, _ := laneImage(t, js, "a")
	if len(words) == 0 || marker.Sequence != 0 || marker.ObjectName != first.ObjectName {
		t.Fatalf("marker %+v, first %+v", marker, first)
	}
	if info := snapshotInfo(t, js, marker.ObjectName); info.NUID != firstInfo.NUID {
		t.Fatalf("snapshot body rewritten: object id %s, was %s", info.NUID, firstInfo.NUID)
	}
}

func snapshotInfo(t *testing.T, js jetstream.JetStream, name string) *jetstream.ObjectInfo {
	t.Helper()
	obj, err := js.ObjectStore(context.Background(), wire.SnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obj.GetInfo(context.Background(), name)
	if err != nil {
		t.Fatalf("snapshot body %s: %v", name, err)
	}
	return info
}

func TestALostLeaseStopsPublishingUnderItsEpoch(t *testing.T) {
	r, js, reg := activeRelay(t, testConfig("a"))
	epoch1 := r.Status().Epoch
	// An operator (or a competing coordinator) removes the lease: the next
	// renewal's compare-and-set fails and the relay must stop publishing
	// under that epoch, then come back under a fresh one.
	kv, err := js.KeyValue(context.Background(), wire.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(context.Background(), "lease."+domain+".a"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 0, "new epoch", func() bool {
		st := r.Status()
		return st.State == relay.StateActive && st.Epoch > epoch1
	})
	if out, ok := metricsContain(reg, `ckf_relay_fences_total{reason="lease_lost"}`); !ok {
		t.Fatalf("lease loss not counted:\n%s", out)
	}
	// Nothing under the old epoch was published after the new epoch's marker.
	words, marker, _ := laneImage(t, js, "a")
	if marker.Lease.Epoch <= epoch1 || len(words) == 0 {
		t.Fatalf("marker %+v", marker)
	}
}

func TestAnIdleRelayPublishesAnEventWithoutWaitingForItsTimer(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := testConfig("a")
	// Only the idle cut can publish within the test's lifetime.
	cfg.PublishInterval, cfg.HeartbeatInterval = time.Hour, time.Hour
	r, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	steps := traceEvents(t, 3)
	publishEvents(t, js, "a", steps)
	want := reference(t, cfg.CKF, steps).Words()
	testenv.WaitFor(t, 0, "published without the timer", func() bool {
		words, _, _ := laneImage(t, js, "a")
		for i := range want {
			if words[i] != want[i] {
				return false
			}
		}
		return true
	})
}

// activeRelay starts a server and a relay with its own metrics registry and
// waits until the relay publishes.
func activeRelay(t *testing.T, cfg relay.Config) (*relay.Relay, jetstream.JetStream, *prometheus.Registry) {
	t.Helper()
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	r, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	return r, js, reg
}

// metricsContain reports whether reg has the series of want (see
// hasMetric), and returns the exposition for failure messages.
func metricsContain(reg prometheus.Gatherer, want string) (string, bool) {
	return promtest.Has(reg, want)
}
