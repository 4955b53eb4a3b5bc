package routesim

import (
	"github.com/inference-sim/inference-sim/sim"

	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// kvBlock is one KV block of a worker. A registered block is in the
// worker's prefix cache (its hash is known to the relay); an unregistered
// one holds a request's fresh prompt blocks before they are computed.
type kvBlock struct {
	pos        int // position in the prompt of the request that filled it
	seq        uint64
	engine     uint64
	ref        int
	registered bool
	prev, next *kvBlock // LRU list of free registered blocks
}

// simReq is one request in flight.
type simReq struct {
	tr      *traceReq
	idx     int
	arrival int64 // µs the router received it
	dc, wkr int
	// estTokens is what the router expected to prefill (for its own load
	// accounting); estHit the DC router's overlap when it picked the worker.
	estTokens int
	estHit    int

	hitBlocks int
	progress  int // prompt tokens done (cached ones included)
	decoded   int
	chunk     int // tokens of the current step
	held      []*kvBlock
	decodeRes int // decode blocks reserved

	admitted    bool
	completions int
	firstToken  int64
	done        int64
	blis        sim.Request
}

// worker is one engine: a vLLM-style scheduler (FCFS waiting queue,
// continuous batching with chunked prefill under a token budget), a prefix
// cache with LRU eviction of free blocks, and BLIS's step-time model.
type worker struct {
	f       *fleet
	dc, idx int
	id      uint64 // WorkerID of its KV events

	capacity  int // blocks
	allocated int // blocks referenced by requests or reserved for decode
	cached    map[uint64]*kvBlock
	lru       kvBlock // sentinel: lru.next is the most recent free registered block
	free      int     // length of the LRU list

	waiting []*simReq
	running []*simReq
	batch   []*sim.Request
	members []*simReq
	busy    bool

	// maxUsed is the most blocks ever resident (allocated + cached free).
	maxUsed int
	// donePrompt and doneRequests are the engine's counters of finished
	// requests (vLLM's prompt tokens and request success totals).
	donePrompt   int64
	doneRequests int64
}

func newWorker(f *fleet, dc, idx, capacity int) *worker {
	w := &worker{f: f, dc: dc, idx: idx, id: uint64(dc+1)*1000 + uint64(idx), capacity: capacity,
		cached: make(map[uint64]*kvBlock)}
	w.lru.next, w.lru.prev = &w.lru, &w.lru
	return w
}

func (w *worker) unlink(b *kvBlock) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
	w.free--
}

func (w *worker) pushFront(b *kvBlock) {
	b.prev, b.next = &w.lru, w.lru.next
	w.lru.next.prev = b
	w.lru.next = b
	w.free++
}

// overlap is the number of leading blocks of t the worker's cache holds.
func (w *worker) overlap(t *traceReq) int {
	n := 0
	for n < len(t.seqs) && w.cached[uint64(t.seqs[n])] != nil {
		n++
	}
	return n
}

// pendingPrefill is the prompt tokens the worker still has to compute.
func (w *worker) pendingPrefill() int {
	n := 0
	for _, r := range w.waiting {
		n += max(r.tr.input-r.estHit*w.f.cfg.BlockSize, 1)
	}
	for _, r := range w.running {
		if r.progress < r.tr.input {
			n += r.tr.input - r.progress
		}
	}
	return n
}

// decodeBlocks is the blocks held by requests in decode.
func (w *worker) decodeBlocks() int {
	n := 0
	for _, r := range w.running {
		if r.progress >= r.tr.input {
			n += len(r.held) + r.decodeRes
		}
	}
	return n
}

// evictOne frees the least recently used free registered block.
func (w *worker) evictOne() {
	b := w.lru.prev
	w.unlink(b)
	delete(w.cached, b.seq)
	w.f.removed(w, b)
}

// admit tries to give r its blocks: the cached prefix is referenced, the
// rest and the decode reservation are allocated, evicting as needed.
func (w *worker) admit(r *simReq) bool {
	t := r.tr
	bs := w.f.cfg.BlockSize
	hit := w.overlap(t)
	inLRU := 0
	for k := range hit {
		if w.cached[uint64(t.seqs[k])].ref == 0 {
			inLRU++
		}
	}
	need := len(t.seqs) - hit
	totalBlocks := (t.input + t.output + bs - 1) / bs
	decode := max(totalBlocks-len(t.seqs), 0)
	avail := w.capacity - w.allocated - w.free + (w.free - inLRU)
	if need+decode > avail {
		return false
	}
	r.held = make([]*kvBlock, 0, len(t.seqs))
	for k := range hit {
		b := w.cached[uint64(t.seqs[k])]
		if b.ref == 0 {
			w.unlink(b)
			w.allocated++
		}
		b.ref++
		r.held = append(r.held, b)
	}
	for k := hit; k < len(t.seqs); k++ {
		for w.capacity-w.allocated-w.free < 1 {
			w.evictOne()
		}
		w.allocated++
		r.held = append(r.held, &kvBlock{pos: k, seq: uint64(t.seqs[k]), engine: t.engines[k], ref: 1})
	}
	for w.capacity-w.allocated-w.free < decode {
		w.evictOne()
	}
	w.allocated += decode
	r.decodeRes = decode
	r.hitBlocks = hit
	// vLLM computes at least the last prompt token.
	r.progress = min(hit*bs, t.input-1)
	r.admitted = true
	w.maxUsed = max(w.maxUsed, w.allocated+w.free)
	return true
}

// register puts r's computed prompt blocks into the prefix cache and tells
// the relay, one Stored event per run of newly cached blocks.
func (w *worker) register(r *simReq) {
	t := r.tr
	start := -1
	flush := func(end int) {
		if start < 0 {
			return
		}
		blocks := make([]routerevent.StoredBlock, 0, end-start)
		for k := start; k < end; k++ {
			blocks = append(blocks, routerevent.StoredBlock{BlockHash: t.engines[k], TokensHash: uint64(t.locals[k])})
		}
		sd := routerevent.StoreData{Blocks: blocks}
		if start > 0 {
			p := t.engines[start-1]
			sd.ParentHash = &p
		}
		w.f.stored(w, sd, t, start, end)
		start = -1
	}
	for k := r.hitBlocks; k < len(r.held); k++ {
		b := r.held[k]
		if other := w.cached[b.seq]; other != nil {
			// Another request cached it meanwhile: share that block.
			flush(k)
			if other.ref == 0 {
				w.unlink(other)
				w.allocated++
			}
			other.ref++
			w.allocated--
			r.held[k] = other
			continue
		}
		b.registered = true
		w.cached[b.seq] = b
		if start < 0 {
			start = k
		}
	}
	flush(len(r.held))
}

// release returns r's blocks: registered ones join the LRU list, last
// block first, so a prefix outlives its extensions.
func (w *worker) release(r *simReq) {
	for k := len(r.held) - 1; k >= 0; k-- {
		b := r.held[k]
		b.ref--
		if b.ref > 0 {
			continue
		}
		w.allocated--
		if b.registered {
			w.pushFront(b)
		}
	}
	r.held = nil
	w.allocated -= r.decodeRes
	r.decodeRes = 0
}

// enqueue adds an arrived request and starts a step if the worker is idle.
func (w *worker) enqueue(r *simReq, now int64) {
	w.waiting = append(w.waiting, r)
	if !w.busy {
		w.startStep(now)
	}
}

// startStep forms the next batch (decodes first, then running prefills,
// then waiting requests, FCFS, while the token budget, the running limit
// and the KV cache allow) and schedules its end.
func (w *worker) startStep(now int64) {
	cfg := &w.f.cfg
	budget := cfg.MaxBatchedTokens
	w.batch, w.members = w.batch[:0], w.members[:0]
	for _, r := range w.running {
		if r.progress >= r.tr.input && budget > 0 {
			r.chunk = 1
			budget--
			w.add(r)
		}
	}
	for _, r := range w.running {
		if r.progress < r.tr.input && budget > 0 {
			r.chunk = min(r.tr.input-r.progress, budget)
			budget -= r.chunk
			w.add(r)
		}
	}
	for len(w.waiting) > 0 && budget > 0 && len(w.running) < cfg.MaxRunning {
		r := w.waiting[0]
		if !w.admit(r) {
			break
		}
		w.waiting = w.waiting[1:]
		w.running = append(w.running, r)
		w.f.admitted(r)
		r.chunk = min(r.tr.input-r.progress, budget)
		budget -= r.chunk
		w.add(r)
	}
	if len(w.members) == 0 {
		w.busy = false
		return
	}
	w.busy = true
	d := w.f.model.StepTime(w.batch)
	w.f.schedule(now+max(d, 1), evStepEnd, w.dc, w.idx)
}

func (w *worker) add(r *simReq) {
	t := r.tr
	b := &r.blis
	b.InputTokens = w.f.zeros[:t.input]
	b.OutputTokens = w.f.zeros[:t.output]
	b.NumNewTokens = r.chunk
	if r.progress < t.input {
		b.ProgressIndex = int64(r.progress)
	} else {
		b.ProgressIndex = int64(t.input + r.decoded)
	}
	w.batch = append(w.batch, b)
	w.members = append(w.members, r)
}

// endStep applies the step's progress: a prefill that completes yields the
// first token and caches its prompt; a decode that completes frees it.
func (w *worker) endStep(now int64) {
	for _, r := range w.members {
		t := r.tr
		if r.progress < t.input {
			r.progress += r.chunk
			if r.progress >= t.input {
				r.firstToken = now
				r.decoded = 1
				w.register(r)
			}
		} else {
			r.decoded++
		}
		if r.progress >= t.input && r.decoded >= t.output {
			r.done = now
		}
	}
	n := 0
	for _, r := range w.running {
		if r.done != 0 {
			w.release(r)
			w.f.completed(r)
			continue
		}
		w.running[n] = r
		n++
	}
	clear(w.running[n:])
	w.running = w.running[:n]
	w.startStep(now)
}
