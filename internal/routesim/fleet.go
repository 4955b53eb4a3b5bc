package routesim

import (
	"container/heap"
	"encoding/binary"
	"fmt"

	"github.com/inference-sim/inference-sim/sim"
	"github.com/zeebo/xxh3"

	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/internal/routeflags"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/route"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// traceReq is one trace request with its hashes computed once.
type traceReq struct {
	at      int64 // µs in the original trace
	input   int
	output  int
	locals  []ckf.LocalBlockHash
	seqs    []ckf.SequenceHash
	engines []uint64
	key     uint64
}

// engineSeed separates the simulated engines' block-hash chain from the
// token hashes.
const engineSeed = 0x0E41_9E5E_ED00_0024

// Prepare hashes a trace once for any number of runs.
func Prepare(reqs []replay.Request) []traceReq {
	out := make([]traceReq, len(reqs))
	for i, r := range reqs {
		n := len(r.HashIDs)
		t := traceReq{at: r.Timestamp * 1000, input: max(r.InputLength, 1), output: max(r.OutputLength, 1),
			locals: make([]ckf.LocalBlockHash, n), engines: make([]uint64, n)}
		var engine uint64
		for k, id := range r.HashIDs {
			t.locals[k] = replay.LocalHash(id, 0)
			var buf [16]byte
			binary.LittleEndian.PutUint64(buf[:8], engine)
			binary.LittleEndian.PutUint64(buf[8:], uint64(t.locals[k]))
			engine = xxh3.HashSeed(buf[:], engineSeed)
			t.engines[k] = engine
		}
		t.seqs = ckf.SequenceHashes(make([]ckf.SequenceHash, 0, n), t.locals)
		// The product's tie-break key (the indexer's, from the prompt's
		// sequence hashes).
		t.key = route.KeyOf(t.seqs)
		out[i] = t
	}
	return out
}

// event kinds, in the order same-time events run.
const (
	evStepEnd = iota
	evArriveDC
	evArriveRouter
	evFlush
	evScrape
	evWindow
)

type event struct {
	at   int64
	kind int
	a, b int
	seq  int64
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	if q[i].kind != q[j].kind {
		return q[i].kind < q[j].kind
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// fleet is one run: K DCs of W workers, a router with one policy.
type fleet struct {
	cfg      Config
	policy   Policy
	model    sim.LatencyModel
	zeros    []int
	trace    []traceReq
	scale    float64 // original trace µs per simulated µs
	router   *route.Router
	settings routeflags.Settings
	workers  [][]*worker
	ckf      *ckfIndex
	// exact[dc] counts the workers of dc holding each registered block.
	exact []map[uint64]int

	now    int64
	events eventQueue
	seq    int64
	reqs   []simReq
	left   int

	plane   loadPlane
	faultAt int64 // µs the faulted DC's relay goes silent (0: none)

	cands    []route.Candidate
	decision route.Decision
	depthBuf []int
	halfRTT  []int64

	// measures
	eventCount int
	// overReports and underReports count CKF depths above and below the
	// exact depth at route time (false positives and update lag).
	overReports, underReports int
	oracleMismatch            int
	eventID                   uint64
}

func (f *fleet) schedule(at int64, kind, a, b int) {
	f.seq++
	heap.Push(&f.events, &event{at: at, kind: kind, a: a, b: b, seq: f.seq})
}

func newFleet(cfg Config, p Policy, trace []traceReq, scale float64, model sim.LatencyModel, zeros []int) (*fleet, error) {
	k := len(cfg.DCs)
	f := &fleet{cfg: cfg, policy: p, model: model, zeros: zeros, trace: trace, scale: scale,
		exact: make([]map[uint64]int, k), cands: make([]route.Candidate, k), depthBuf: make([]int, k), halfRTT: make([]int64, k)}
	f.decision.Ranked = make([]route.Scored, 0, k)
	for d, dc := range cfg.DCs {
		f.halfRTT[d] = dc.RTT.Microseconds() / 2
		f.exact[d] = make(map[uint64]int)
		var ws []*worker
		for w := range cfg.WorkersPerDC {
			ws = append(ws, newWorker(f, d, w, cfg.KVBlocks))
		}
		f.workers = append(f.workers, ws)
	}
	rs, err := cfg.RouterSettings()
	if err != nil {
		return nil, err
	}
	f.settings = rs
	// As the indexer builds its router (pkg/follow newRouting): the
	// load age bound is the load plane's, not the policy's.
	pc := rs.Route.Policy
	pc.MaxLoadAge = 0
	f.router = route.New(pc)
	if err := f.plane.init(f); err != nil {
		return nil, err
	}
	if p.usesCKF() {
		f.ckf, err = newCKFIndex(k, uint64(cfg.WorkersPerDC*cfg.KVBlocks), &f.now, f.halfRTT)
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}

// run plays the trace through the fleet until every request completed.
func (f *fleet) run() error {
	f.reqs = make([]simReq, len(f.trace))
	f.left = len(f.trace)
	t0 := f.trace[0].at
	for i := range f.trace {
		r := &f.reqs[i]
		r.tr, r.idx = &f.trace[i], i
		r.arrival = int64(float64(f.trace[i].at-t0) / f.scale)
		f.schedule(r.arrival, evArriveRouter, i, 0)
	}
	if f.cfg.FaultDC >= 0 {
		f.faultAt = f.reqs[len(f.reqs)/2].arrival
	}
	for d := range f.cfg.DCs {
		f.schedule(0, evFlush, d, 0)
		f.plane.start(d)
	}
	for f.left > 0 {
		if len(f.events) == 0 {
			return fmt.Errorf("routesim: %d requests never completed", f.left)
		}
		e := heap.Pop(&f.events).(*event)
		f.now = e.at
		f.eventCount++
		switch e.kind {
		case evArriveRouter:
			f.routeRequest(&f.reqs[e.a])
		case evArriveDC:
			f.arriveDC(&f.reqs[e.a])
		case evStepEnd:
			f.workers[e.a][e.b].endStep(f.now)
		case evFlush:
			if f.faultAt > 0 && e.a == f.cfg.FaultDC && f.now >= f.faultAt && f.ckf != nil {
				f.ckf.sinks[e.a].cut = true
			}
			if f.faultAt == 0 || e.a != f.cfg.FaultDC || f.now < f.faultAt {
				if f.ckf != nil {
					f.ckf.flush(e.a)
				}
				f.schedule(f.now+f.cfg.FlushInterval.Microseconds(), evFlush, e.a, 0)
			}
		case evScrape:
			f.plane.scrape(e.a)
			f.schedule(f.now+f.cfg.ScrapeInterval.Microseconds(), evScrape, e.a, 0)
		case evWindow:
			if f.faultAt == 0 || e.a != f.cfg.FaultDC || f.now < f.faultAt {
				f.plane.window(e.a)
				f.schedule(f.now+f.cfg.WindowInterval.Microseconds(), evWindow, e.a, 0)
			}
		}
	}
	if f.ckf != nil && (f.ckf.eventErrors > 0 || f.ckf.applyErrors > 0) {
		return fmt.Errorf("routesim: the index rejected %d events and %d deltas", f.ckf.eventErrors, f.ckf.applyErrors)
	}
	return nil
}

// lastHeard is when the router last heard from DC d's relay.
func (f *fleet) lastHeard(d int) int64 {
	if f.ckf != nil {
		return f.ckf.lastHeard[d]
	}
	return f.plane.lastArrival[d]
}

// routeRequest is the router's decision for r.
func (f *fleet) routeRequest(r *simReq) {
	t := r.tr
	f.plane.deliver()
	depths := f.depthBuf
	clear(depths)
	switch {
	case f.ckf != nil:
		f.ckf.deliver(f.now)
		f.ckf.depths(t.seqs, depths)
		if f.cfg.CheckIndex {
			for d := range depths {
				ex := f.exactDepth(d, t)
				if depths[d] > ex {
					f.overReports++
				} else if depths[d] < ex {
					f.underReports++
				}
			}
		}
	case f.policy == Oracle:
		for d := range depths {
			depths[d] = f.exactDepth(d, t)
			if f.cfg.CheckIndex && depths[d] != f.scanDepth(d, t) {
				f.oracleMismatch++
			}
		}
	}
	// The candidates as the indexer's Service.Route builds them: the lane's
	// freshness, its usable load, the configured per-DC rates.
	staleAfter := f.cfg.LaneStaleAfter.Microseconds()
	for d, dc := range f.cfg.DCs {
		c := &f.cands[d]
		*c = route.Candidate{Lane: d, DC: dc.Name, Pool: "sim", Depth: depths[d], Ready: true,
			Stale:               f.now-f.lastHeard(d) > staleAfter,
			PrefillTokensPerSec: f.settings.Route.PrefillRate[dc.Name]}
		f.plane.candidateLoad(d, c, f.router.Config().WaitingRequestTokens)
	}
	f.router.Route(route.Request{Blocks: len(t.seqs), BlockSize: f.cfg.BlockSize, InputTokens: t.input,
		OutputTokens: t.output, Policy: f.policy.routePolicy(), Key: t.key}, f.cands, &f.decision)
	ch := f.decision.Chosen()
	d := 0
	if ch != nil {
		d = ch.Lane
	} else {
		d = int(mix(uint64(r.idx)^f.cfg.Seed) % uint64(len(f.cfg.DCs)))
	}
	r.dc = d
	r.estTokens = max(t.input-depths[d]*f.cfg.BlockSize, 0)
	f.plane.routed(&f.decision, t.input)
	f.schedule(f.now+f.halfRTT[d], evArriveDC, r.idx, 0)
}

// arriveDC is the DC's own router: exact local prefix and load, Dynamo's
// KV-router cost (prefill blocks to compute, queued included, plus decode
// blocks), or round robin.
func (f *fleet) arriveDC(r *simReq) {
	ws := f.workers[r.dc]
	bs := f.cfg.BlockSize
	best, bestCost, bestTie := 0, 0.0, uint64(0)
	for i, w := range ws {
		var cost float64
		if f.cfg.InDC == InDCRoundRobin {
			cost = float64((r.idx - i + len(ws)*1_000_000) % len(ws))
		} else {
			ov := w.overlap(r.tr)
			prefill := float64(w.pendingPrefill()+max(r.tr.input-ov*bs, 0)) / float64(bs)
			cost = prefill + float64(w.decodeBlocks())
		}
		tie := mix(uint64(r.idx)<<8 ^ uint64(i) ^ f.cfg.Seed)
		if i == 0 || cost < bestCost || (cost == bestCost && tie < bestTie) {
			best, bestCost, bestTie = i, cost, tie
		}
	}
	r.wkr = best
	r.estHit = ws[best].overlap(r.tr)
	ws[best].enqueue(r, f.now)
}

func (f *fleet) admitted(*simReq) {}

func (f *fleet) completed(r *simReq) {
	w := f.workers[r.dc][r.wkr]
	w.donePrompt += int64(r.tr.input)
	w.doneRequests++
	r.completions++
	f.left--
}

// stored and removed are the workers' KV events: the exact per-DC truth and
// the DC's relay see them at once.
func (f *fleet) stored(w *worker, sd routerevent.StoreData, t *traceReq, start, end int) {
	ex := f.exact[w.dc]
	for k := start; k < end; k++ {
		ex[uint64(t.seqs[k])]++
	}
	if f.ckf != nil {
		ev := routerevent.RouterEvent{WorkerID: w.id, Event: routerevent.KvCacheEvent{
			EventID: f.nextEventID(), Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: sd}}}
		f.ckf.apply(w.dc, &ev)
	}
}

func (f *fleet) removed(w *worker, b *kvBlock) {
	ex := f.exact[w.dc]
	if ex[b.seq]--; ex[b.seq] <= 0 {
		delete(ex, b.seq)
	}
	if f.ckf != nil {
		ev := routerevent.RouterEvent{WorkerID: w.id, Event: routerevent.KvCacheEvent{
			EventID: f.nextEventID(), Data: routerevent.EventData{Kind: routerevent.EventRemoved,
				Removed: routerevent.RemoveData{BlockHashes: []uint64{b.engine}}}}}
		f.ckf.apply(w.dc, &ev)
	}
}

func (f *fleet) nextEventID() uint64 { f.eventID++; return f.eventID }

// exactDepth is how many leading blocks of t DC d holds now.
func (f *fleet) exactDepth(d int, t *traceReq) int {
	ex := f.exact[d]
	n := 0
	for n < len(t.seqs) && ex[uint64(t.seqs[n])] > 0 {
		n++
	}
	return n
}

// scanDepth recomputes exactDepth from the workers' caches: the leading
// blocks of t each held by at least one worker of d.
func (f *fleet) scanDepth(d int, t *traceReq) int {
	n := 0
	for ; n < len(t.seqs); n++ {
		held := false
		for _, w := range f.workers[d] {
			if w.cached[uint64(t.seqs[n])] != nil {
				held = true
				break
			}
		}
		if !held {
			break
		}
	}
	return n
}

// mix is SplitMix64's finalizer.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
