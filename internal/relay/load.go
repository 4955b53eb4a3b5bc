package relay

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// The load plane, relay side (docs/protocol.md §6). Every LoadInterval the
// actor builds a window of the pool's load and publishes it on core NATS
// beside the lane, fenced by the epoch's identity and wire lease:
//
//   - KV occupancy from the exact state: the (worker, block) pairs it holds
//     against the capacity the workers declare (their WorkerLoad reports)
//     or, overriding that, Config.KVCapacityBlocks. No capacity, no KV
//     occupancy: it is sent as unknown, never as empty.
//   - Serving load summed over the workers' WorkerLoad reports, only when it
//     is complete: every worker the relay knows (in the exact state or
//     reporting within workerLoadForget) reported within
//     Config.WorkerLoadFresh, and a value is summed only if every one of
//     them reported it.

// Load plane defaults.
const (
	DefaultLoadInterval    = 200 * time.Millisecond
	DefaultWorkerLoadFresh = 3 * time.Second
	// workerLoadForget drops a worker that stopped reporting (and holds no
	// block) from the serving load's expected set, as Dynamo forgets a
	// silent source after 10 minutes.
	workerLoadForget = 10 * time.Minute
)

// workerLoads holds each worker's latest report with its local receive
// time. The NATS callback writes, the actor reads.
type workerLoads struct {
	mu sync.Mutex
	m  map[uint64]workerReport
}

type workerReport struct {
	rep wire.WorkerLoad
	at  time.Time
}

func (w *workerLoads) put(rep wire.WorkerLoad, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[uint64]workerReport{}
	}
	w.m[rep.WorkerID] = workerReport{rep: rep, at: at}
}

// servingAggregate is the workers' part of a window.
type servingAggregate struct {
	flags    wire.LoadFlags // LoadServing bits known for every expected worker
	serving  wire.ServingLoad
	workers  uint64
	oldest   time.Time // the oldest report's sender time
	capacity uint64    // declared KV capacity, when every expected worker declared one
}

// aggregate sums the reports of the expected workers: those of the exact
// state (members) and those that reported within workerLoadForget. A
// worker without a fresh report makes the serving load incomplete (no
// flag); one without a declared capacity makes the capacity unknown.
func (w *workerLoads) aggregate(now time.Time, fresh time.Duration, members map[uint64]struct{}) servingAggregate {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, r := range w.m {
		if _, held := members[id]; !held && now.Sub(r.at) > workerLoadForget {
			delete(w.m, id)
		}
	}
	expected := len(w.m)
	for id := range members {
		if _, ok := w.m[id]; !ok {
			expected++
		}
	}
	var a servingAggregate
	if expected == 0 || expected != len(w.m) {
		return a // nobody, or a worker of the exact state that never reported
	}
	a.flags = wire.LoadServing | wire.LoadKV
	// One estimated worker makes the pool's prefill an estimate.
	estimated := false
	for _, r := range w.m {
		estimated = estimated || r.rep.Flags.Has(wire.LoadPrefillEstimated)
		if now.Sub(r.at) > fresh {
			a.flags &^= wire.LoadServing
		}
		a.flags &= r.rep.Flags
		// The sums saturate at the wire's bounds: the window stays valid and
		// a pool past them reads as loaded as a pool can be, never wrapped
		// to idle.
		a.serving.Running = wire.AddLoad(a.serving.Running, r.rep.Serving.Running, wire.MaxLoadRequests)
		a.serving.Waiting = wire.AddLoad(a.serving.Waiting, r.rep.Serving.Waiting, wire.MaxLoadRequests)
		a.serving.ActivePrefillTokens = wire.AddLoad(a.serving.ActivePrefillTokens, r.rep.Serving.ActivePrefillTokens, wire.MaxLoadTokens)
		a.serving.ActiveDecodeBlocks = wire.AddLoad(a.serving.ActiveDecodeBlocks, r.rep.Serving.ActiveDecodeBlocks, wire.MaxLoadBlocks)
		a.capacity = wire.AddLoad(a.capacity, r.rep.KVCapacityBlocks, wire.MaxLoadBlocks)
		if a.oldest.IsZero() || r.rep.Time.Before(a.oldest) {
			a.oldest = r.rep.Time
		}
	}
	if !a.flags.Has(wire.LoadKV) {
		a.capacity = 0
	}
	a.workers = min(uint64(len(w.m)), wire.MaxLoadWorkers)
	a.flags &= wire.LoadServing
	if a.flags == 0 {
		a.serving, a.workers, a.oldest = wire.ServingLoad{}, 0, time.Time{}
		return a
	}
	if !a.flags.Has(wire.LoadRequests) {
		a.serving.Running, a.serving.Waiting = 0, 0
	}
	if !a.flags.Has(wire.LoadPrefill) {
		a.serving.ActivePrefillTokens = 0
	} else if estimated {
		a.flags |= wire.LoadPrefillEstimated
	}
	if !a.flags.Has(wire.LoadDecode) {
		a.serving.ActiveDecodeBlocks = 0
	}
	return a
}

// onWorkerLoad is the NATS callback of the workers' reports.
func (r *Relay) onWorkerLoad(m *nats.Msg) {
	id, err := wire.ParseWorkerLoadSubject(m.Subject, r.cfg.Domain, r.cfg.DC)
	if err != nil {
		r.m.workerLoads.WithLabelValues("bad_subject").Inc()
		return
	}
	rep, err := wire.DecodeWorkerLoad(m.Data)
	if err != nil {
		r.m.workerLoads.WithLabelValues("malformed").Inc()
		r.log.Debug().Err(err).Str("subject", m.Subject).Msg("malformed worker load report; skipped")
		return
	}
	if id != rep.WorkerID {
		r.m.workerLoads.WithLabelValues("bad_subject").Inc()
		return
	}
	r.loads.put(rep, r.now())
	r.m.workerLoads.WithLabelValues("accepted").Inc()
}

// subscribeWorkerLoads subscribes to the pool's worker reports.
func (r *Relay) subscribeWorkerLoads() (*nats.Subscription, error) {
	filter, err := wire.WorkerLoadFilter(r.cfg.Domain, r.cfg.DC)
	if err != nil {
		return nil, err
	}
	return r.nc.Subscribe(filter, r.onWorkerLoad)
}

// buildLoad builds the epoch's next window from the exact state and the
// workers' reports.
func (e *epochRun) buildLoad(now time.Time) wire.PoolLoad {
	r := e.r
	members := map[uint64]struct{}{}
	var used uint64
	for _, mc := range e.state.MemberCounts() {
		members[mc.Member.WorkerID] = struct{}{}
		used = wire.AddLoad(used, uint64(mc.Blocks), wire.MaxLoadBlocks)
	}
	agg := r.loads.aggregate(now, r.cfg.workerLoadFresh(), members)
	e.loadSeq++
	p := wire.PoolLoad{Identity: e.identity, Lease: e.wlease, WindowSequence: e.loadSeq, Time: now,
		WindowMs: uint64(r.cfg.loadInterval().Milliseconds())}
	capacity := min(r.cfg.KVCapacityBlocks, wire.MaxLoadBlocks)
	if capacity == 0 {
		capacity = agg.capacity
	}
	if capacity > 0 {
		p.Flags |= wire.LoadKV
		p.KVUsedBlocks, p.KVCapacityBlocks, p.KVWorkers = used, capacity, min(uint64(len(members)), wire.MaxLoadWorkers)
	}
	if agg.flags != 0 {
		p.Flags |= agg.flags
		p.Serving, p.ServingWorkers, p.ServingTime = agg.serving, agg.workers, agg.oldest
	}
	return p
}

// publishLoad publishes one window. Core NATS: a lost window is replaced
// by the next one, and a reader never takes missing load for zero load.
// A failed publish is counted, it never ends the epoch.
func (e *epochRun) publishLoad() {
	r := e.r
	p := e.buildLoad(r.now())
	b, err := wire.AppendPoolLoad(e.loadBuf[:0], &p)
	if err != nil {
		r.m.loadWindows.WithLabelValues("encode_error").Inc()
		r.log.Error().Err(err).Msg("load window does not encode")
		return
	}
	e.loadBuf = b
	r.lastLoad.Store(&p)
	if err := r.nc.Publish(e.loadSubject, b); err != nil {
		r.m.loadWindows.WithLabelValues("publish_error").Inc()
		return
	}
	r.m.loadWindows.WithLabelValues("published").Inc()
}

// kvPoolLoad is the §6.3 view of the last window: occupancy only when the
// capacity is known; the relay's exact state covers every worker, so the
// ranks observed are the ranks expected.
func kvPoolLoad(p *wire.PoolLoad) server.PoolLoad {
	if p == nil || !p.Flags.Has(wire.LoadKV) {
		return server.PoolLoad{}
	}
	ranks := uint32(min(max(p.KVWorkers, 1), 1<<32-1))
	return server.PoolLoad{UsedBlocks: p.KVUsedBlocks, TotalBlocks: p.KVCapacityBlocks, ObservedRanks: ranks, ExpectedRanks: ranks}
}

// servingPoolLoad is the §6.4 pool view of the last window: complete only
// with both token gauges (a pool's view carries no request counts), and
// marked when any worker estimated its prefill, which the server exports
// as DEGRADED rather than COMPLETE.
func servingPoolLoad(p *wire.PoolLoad, maxAge time.Duration, now time.Time) (server.ServingLoad, bool) {
	if p == nil || !p.Flags.Has(wire.LoadPrefill|wire.LoadDecode) || now.Sub(p.Time) > maxAge {
		return server.ServingLoad{}, false
	}
	return server.ServingLoad{ActivePrefillTokens: p.Serving.ActivePrefillTokens, ActiveDecodeBlocks: p.Serving.ActiveDecodeBlocks,
		SourceTime: p.ServingTime, Workers: p.ServingWorkers, PrefillEstimated: p.Flags.Has(wire.LoadPrefillEstimated)}, true
}
