package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// loadWindows collects the pool load windows of dc.
func loadWindows(t *testing.T, nc *nats.Conn, dc string) <-chan wire.PoolLoad {
	t.Helper()
	subj, err := wire.PoolLoadSubject(domain, dc)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan wire.PoolLoad, 1024)
	sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
		p, err := wire.DecodePoolLoad(m.Data)
		if err != nil {
			t.Errorf("window does not decode: %v", err)
			return
		}
		select {
		case ch <- p:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// waitWindow returns the first window ok accepts.
func waitWindow(t *testing.T, ch <-chan wire.PoolLoad, what string, ok func(*wire.PoolLoad) bool) wire.PoolLoad {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case p := <-ch:
			if ok(&p) {
				return p
			}
		case <-deadline:
			t.Fatalf("no window: %s", what)
		}
	}
}

// pubStore publishes one worker's store of one root block.
func pubStore(t *testing.T, js jetstream.JetStream, dc string, worker, hash uint64) {
	t.Helper()
	subj, _ := wire.WorkerEventsSubject(domain, dc, worker)
	body := fmt.Sprintf(`{"worker_id":%d,"event":{"event_id":%d,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":%d,"tokens_hash":%d}]}}}}`,
		worker, hash, hash, hash)
	if _, err := js.Publish(context.Background(), subj, []byte(body)); err != nil {
		t.Fatal(err)
	}
}

func publishWorkerLoad(t *testing.T, nc *nats.Conn, dc string, w wire.WorkerLoad) {
	t.Helper()
	subj, _ := wire.WorkerLoadSubject(domain, dc, w.WorkerID)
	b, err := wire.AppendWorkerLoad(nil, &w)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(subj, b); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
}

// The relay's windows carry the exact state's occupancy against the
// configured capacity, fenced by the lane's identity and epoch, with a
// window sequence that moves; serving load appears only once every worker
// of the exact state reported it, and is summed over them.
func TestRelayPublishesLoadWindowsFromItsExactStateAndTheWorkersReports(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := testConfig("a")
	cfg.LoadInterval = 20 * time.Millisecond
	cfg.WorkerLoadFresh = time.Hour // freshness is tested on the aggregate itself
	cfg.KVCapacityBlocks = 100
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	ch := loadWindows(t, nc, "a")
	r, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })

	first := waitWindow(t, ch, "an empty pool", func(p *wire.PoolLoad) bool { return true })
	if !first.Flags.Has(wire.LoadKV) || first.KVUsedBlocks != 0 || first.KVCapacityBlocks != 100 || first.Flags&wire.LoadServing != 0 {
		t.Fatalf("first window %+v: want known, empty occupancy and no serving load", first)
	}
	if first.Lease.Epoch != r.Status().Epoch || first.Identity.ProducerIncarnation != r.Status().Epoch {
		t.Fatalf("window fenced by epoch %d, relay at %d", first.Lease.Epoch, r.Status().Epoch)
	}

	// Worker 1 holds 2 blocks, worker 2 holds 1 (one shared): 3 resident.
	for _, ev := range []struct{ w, h uint64 }{{1, 11}, {1, 12}, {2, 11}} {
		pubStore(t, js, "a", ev.w, ev.h)
	}
	p := waitWindow(t, ch, "3 resident blocks", func(p *wire.PoolLoad) bool { return p.KVUsedBlocks == 3 })
	if p.KVWorkers != 2 || p.Flags&wire.LoadServing != 0 || p.WindowSequence <= first.WindowSequence {
		t.Fatalf("window %+v: want 2 workers, no serving load, a later window", p)
	}

	// Only worker 1 reports: incomplete, so no serving load at all.
	now := time.Now()
	publishWorkerLoad(t, nc, "a", wire.WorkerLoad{WorkerID: 1, Sequence: 1, Time: now, Flags: wire.LoadRequests | wire.LoadPrefill,
		Serving: wire.ServingLoad{Running: 3, Waiting: 2, ActivePrefillTokens: 500}})
	testenv.WaitFor(t, 0, "report accepted", func() bool {
		return promtest.Count(reg, `ckf_relay_worker_load_reports_total{outcome="accepted"}`) == 1
	})
	p = waitWindow(t, ch, "a window after the report", func(q *wire.PoolLoad) bool { return q.Time.After(now) })
	if p.Flags&wire.LoadServing != 0 {
		t.Fatalf("window %+v has serving load with worker 2 silent", p)
	}
	// Worker 2 reports requests only: the sum holds requests, not prefill.
	publishWorkerLoad(t, nc, "a", wire.WorkerLoad{WorkerID: 2, Sequence: 1, Time: now, Flags: wire.LoadRequests,
		Serving: wire.ServingLoad{Running: 1, Waiting: 4}})
	p = waitWindow(t, ch, "serving load", func(q *wire.PoolLoad) bool { return q.Flags&wire.LoadServing != 0 })
	if p.Flags&wire.LoadServing != wire.LoadRequests || p.Serving != (wire.ServingLoad{Running: 4, Waiting: 6}) || p.ServingWorkers != 2 {
		t.Fatalf("window %+v: want requests 4 running / 6 waiting over 2 workers, no prefill", p)
	}

	// A report on another worker's subject, and bytes that do not decode,
	// are counted and change nothing.
	bad, _ := wire.AppendWorkerLoad(nil, &wire.WorkerLoad{WorkerID: 9, Time: now})
	subj, _ := wire.WorkerLoadSubject(domain, "a", 1)
	_ = nc.Publish(subj, bad)
	_ = nc.Publish(subj, []byte{0x91, 0x01})
	_ = nc.Flush()
	testenv.WaitFor(t, 0, "bad reports counted", func() bool {
		return promtest.Count(reg, `ckf_relay_worker_load_reports_total{outcome="bad_subject"}`) == 1 &&
			promtest.Count(reg, `ckf_relay_worker_load_reports_total{outcome="malformed"}`) == 1
	})
	if promtest.Count(reg, `ckf_relay_load_windows_total{outcome="published"}`) < 3 {
		t.Fatal("windows not counted")
	}
}

// Without a configured capacity the occupancy is unknown until every
// worker of the exact state declared its capacity: never a zero capacity.
func TestRelayOccupancyIsUnknownUntilEveryWorkerDeclaresItsCapacity(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := testConfig("b")
	cfg.LoadInterval = 20 * time.Millisecond
	cfg.WorkerLoadFresh = time.Hour
	ch := loadWindows(t, nc, "b")
	r, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	pubStore(t, js, "b", 1, 21)
	pubStore(t, js, "b", 2, 22)
	now := time.Now()
	p := waitWindow(t, ch, "a window after the events", func(q *wire.PoolLoad) bool { return q.Time.After(now) })
	if p.Flags.Has(wire.LoadKV) {
		t.Fatalf("window %+v: occupancy known without any capacity", p)
	}
	publishWorkerLoad(t, nc, "b", wire.WorkerLoad{WorkerID: 1, Time: now, Flags: wire.LoadKV, KVCapacityBlocks: 50})
	now = time.Now()
	p = waitWindow(t, ch, "a window after worker 1's capacity", func(q *wire.PoolLoad) bool { return q.Time.After(now) })
	if p.Flags.Has(wire.LoadKV) {
		t.Fatalf("window %+v: occupancy known with worker 2's capacity undeclared", p)
	}
	publishWorkerLoad(t, nc, "b", wire.WorkerLoad{WorkerID: 2, Time: now, Flags: wire.LoadKV, KVCapacityBlocks: 30})
	p = waitWindow(t, ch, "declared capacity", func(q *wire.PoolLoad) bool { return q.Flags.Has(wire.LoadKV) })
	if p.KVCapacityBlocks != 80 || p.KVUsedBlocks != 2 {
		t.Fatalf("window %+v: want 2 of 80 blocks", p)
	}
}
