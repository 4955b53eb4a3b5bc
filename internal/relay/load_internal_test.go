package relay

import (
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// A report older than the freshness bound makes the serving load
// incomplete (nothing, never a partial sum); a silent worker that holds no
// block is forgotten after workerLoadForget, one that holds blocks is not.
func TestServingLoadNeedsAFreshReportFromEveryKnownWorker(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var w workerLoads
	rep := func(id uint64, running uint64) wire.WorkerLoad {
		return wire.WorkerLoad{WorkerID: id, Time: t0, Flags: wire.LoadRequests, Serving: wire.ServingLoad{Running: running}}
	}
	w.put(rep(1, 2), t0)
	w.put(rep(2, 5), t0.Add(2*time.Second))
	fresh := 3 * time.Second
	if a := w.aggregate(t0.Add(time.Second), fresh, nil); a.flags != wire.LoadRequests || a.serving.Running != 7 || a.workers != 2 {
		t.Fatalf("both fresh: %+v", a)
	}
	if a := w.aggregate(t0.Add(4*time.Second), fresh, nil); a.flags != 0 || a.serving != (wire.ServingLoad{}) || a.workers != 0 {
		t.Fatalf("worker 1 stale: %+v, want no serving load", a)
	}
	// Worker 1 holds blocks: it stays expected however long it is silent.
	late := t0.Add(workerLoadForget + time.Minute)
	w.put(rep(2, 5), late)
	if a := w.aggregate(late, fresh, map[uint64]struct{}{1: {}}); a.flags != 0 {
		t.Fatalf("worker 1 holds blocks and is silent: %+v", a)
	}
	// Without blocks it is forgotten: worker 2 alone is complete.
	if a := w.aggregate(late, fresh, nil); a.flags != wire.LoadRequests || a.serving.Running != 5 || a.workers != 1 {
		t.Fatalf("worker 1 forgotten: %+v", a)
	}
}

// The pool's sums saturate at the wire's bounds, so a pool of workers each
// at its bound gives a window within them (one the wire accepts), loaded to
// the bound, never wrapped to a small value.
func TestServingLoadSumsSaturateAtTheWireBounds(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var w workerLoads
	all := wire.LoadKV | wire.LoadServing
	for id := uint64(1); id <= 3; id++ {
		w.put(wire.WorkerLoad{WorkerID: id, Time: t0, Flags: all, KVCapacityBlocks: wire.MaxLoadBlocks,
			Serving: wire.ServingLoad{Running: wire.MaxLoadRequests, Waiting: wire.MaxLoadRequests - 1,
				ActivePrefillTokens: wire.MaxLoadTokens, ActiveDecodeBlocks: wire.MaxLoadBlocks}}, t0)
	}
	a := w.aggregate(t0, time.Second, nil)
	want := wire.ServingLoad{Running: wire.MaxLoadRequests, Waiting: wire.MaxLoadRequests,
		ActivePrefillTokens: wire.MaxLoadTokens, ActiveDecodeBlocks: wire.MaxLoadBlocks}
	if a.serving != want || a.capacity != wire.MaxLoadBlocks || a.workers != 3 {
		t.Fatalf("sums %+v capacity %d workers %d, want each at its bound", a.serving, a.capacity, a.workers)
	}
}

// One worker whose prefill is an estimate makes the pool's an estimate; the
// mark never goes out without the prefill it qualifies.
func TestServingLoadIsEstimatedWhenAnyWorkersIs(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	exact := wire.LoadRequests | wire.LoadPrefill
	for _, c := range []struct {
		name   string
		flags  [2]wire.LoadFlags
		want   bool
		prefil bool
	}{
		{"both exact", [2]wire.LoadFlags{exact, exact}, false, true},
		{"one estimated", [2]wire.LoadFlags{exact, exact | wire.LoadPrefillEstimated}, true, true},
		{"both estimated", [2]wire.LoadFlags{exact | wire.LoadPrefillEstimated, exact | wire.LoadPrefillEstimated}, true, true},
		{"estimated but a worker without prefill", [2]wire.LoadFlags{wire.LoadRequests, exact | wire.LoadPrefillEstimated}, false, false},
	} {
		var w workerLoads
		for i, f := range c.flags {
			rep := wire.WorkerLoad{WorkerID: uint64(i + 1), Time: t0, Flags: f, Serving: wire.ServingLoad{Running: 1}}
			if f.Has(wire.LoadPrefill) {
				rep.Serving.ActivePrefillTokens = 100
			}
			w.put(rep, t0)
		}
		a := w.aggregate(t0, time.Second, nil)
		if a.flags.Has(wire.LoadPrefillEstimated) != c.want || a.flags.Has(wire.LoadPrefill) != c.prefil {
			t.Errorf("%s: flags %v", c.name, a.flags)
		}
	}
}

// The §6.4 pool view carries the window's estimated mark, which the
// kvrelay server exports as DEGRADED; a measured window's view is unmarked.
func TestServingPoolLoadCarriesAnEstimatedPrefill(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	w := wire.PoolLoad{Time: t0, ServingTime: t0, ServingWorkers: 2, Flags: wire.LoadRequests | wire.LoadPrefill | wire.LoadDecode,
		Serving: wire.ServingLoad{Running: 1, Waiting: 3, ActivePrefillTokens: 3000, ActiveDecodeBlocks: 8}}
	l, ok := servingPoolLoad(&w, time.Second, t0)
	if !ok || l.PrefillEstimated || l.ActivePrefillTokens != 3000 || l.Workers != 2 {
		t.Fatalf("measured: %+v %v", l, ok)
	}
	w.Flags |= wire.LoadPrefillEstimated
	if l, ok = servingPoolLoad(&w, time.Second, t0); !ok || !l.PrefillEstimated || l.ActivePrefillTokens != 3000 || l.Workers != 2 || !l.SourceTime.Equal(t0) {
		t.Fatalf("estimated: %+v %v", l, ok)
	}
}
