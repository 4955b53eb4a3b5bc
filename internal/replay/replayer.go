package replay

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/zeebo/xxh3"
)

// Config shapes the simulated fleet.
type Config struct {
	// DCs names the data centers; requests are spread over them.
	DCs []string
	// WorkersPerDC is the number of workers in each DC.
	WorkersPerDC int
	// CapacityBlocks is each worker's KV cache capacity in blocks (LRU).
	CapacityBlocks int
	// Duplication replays the trace this many times in disjoint hash spaces.
	Duplication int
	// Affinity is the share (0..1) of requests routed by prefix affinity;
	// the rest go to a pseudo-random DC and worker.
	Affinity float64
	// Seed makes the pseudo-random routing reproducible.
	Seed uint64
}

// Validate reports a clear error for an unusable config.
func (c Config) Validate() error {
	switch {
	case len(c.DCs) == 0 || len(c.DCs) > ckf.LaneCount:
		return fmt.Errorf("replay: want 1..%d DCs, got %d", ckf.LaneCount, len(c.DCs))
	case c.WorkersPerDC <= 0:
		return errors.New("replay: workers per DC must be positive")
	case c.CapacityBlocks <= 0:
		return errors.New("replay: capacity blocks must be positive")
	case c.Duplication <= 0:
		return errors.New("replay: duplication must be positive")
	case c.Affinity < 0 || c.Affinity > 1:
		return errors.New("replay: affinity must be within 0..1")
	}
	return nil
}

// Step is what one replayed request produced.
type Step struct {
	Index  int
	DC     int
	Worker uint64
	// Locals are the request's local block hashes (what a router queries with).
	Locals []ckf.LocalBlockHash
	// Events are the worker's KV events for this request: at most one
	// Removed (LRU evictions) followed by at most one Stored (new blocks).
	Events []routerevent.RouterEvent
	// DepthBefore is, per DC, the exact prefix depth of this request held
	// before it was served: what a router's query should have found.
	DepthBefore []int
}

// engineSeed separates the simulated engine's own block-hash chain from
// Dynamo's sequence hashes, as vLLM's hashes are separate in reality.
const engineSeed = 0x0E41_9E5E_ED00_0001

// Replayer walks a trace deterministically. Not safe for concurrent use.
type Replayer struct {
	cfg     Config
	reqs    []Request
	next    int
	eventID uint64
	workers [][]*worker        // [dc][w]
	truth   []map[uint64]int32 // per DC: sequence hash -> workers holding it
	rng     uint64
	space   int // first hash space of this pass
}

// New builds a replayer over reqs.
func New(cfg Config, reqs []Request) (*Replayer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, errors.New("replay: no requests")
	}
	r := &Replayer{cfg: cfg, reqs: reqs, rng: cfg.Seed}
	for dc := range cfg.DCs {
		ws := make([]*worker, cfg.WorkersPerDC)
		for w := range ws {
			ws[w] = newWorker(WorkerID(dc, w), cfg.CapacityBlocks)
		}
		r.workers = append(r.workers, ws)
		r.truth = append(r.truth, make(map[uint64]int32))
	}
	return r, nil
}

// WorkerID is the global worker id of worker w in DC dc.
func WorkerID(dc, w int) uint64 { return uint64(dc+1)*1000 + uint64(w) }

// Len is the number of steps the replayer yields in total.
func (r *Replayer) Len() int { return len(r.reqs) * r.cfg.Duplication }

// Timestamp returns the trace timestamp (ms) of step i.
func (r *Replayer) Timestamp(i int) int64 { return r.reqs[i%len(r.reqs)].Timestamp }

// LocalHash is the LocalBlockHash given to a trace hash id in copy dup.
func LocalHash(id uint64, dup int) ckf.LocalBlockHash {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], id+uint64(dup)<<40)
	return ckf.LocalBlockHash(ckf.ComputeBlockHash(b[:]))
}

// Next replays one request; ok is false once the trace is exhausted.
func (r *Replayer) Next() (Step, bool) {
	if r.next >= r.Len() {
		return Step{}, false
	}
	i := r.next
	r.next++
	req := r.reqs[i%len(r.reqs)]
	dup := r.space + i/len(r.reqs)

	n := min(len(req.HashIDs), r.cfg.CapacityBlocks)
	locals := make([]ckf.LocalBlockHash, n)
	for k := range n {
		locals[k] = LocalHash(req.HashIDs[k], dup)
	}
	seqs := ckf.SequenceHashes(make([]ckf.SequenceHash, 0, n), locals)
	dc, w := r.route(req, dup)
	wk := r.workers[dc][w]
	step := Step{Index: i, DC: dc, Worker: wk.id, Locals: locals, DepthBefore: make([]int, len(r.cfg.DCs))}
	for d := range r.cfg.DCs {
		step.DepthBefore[d] = r.Depth(d, seqs)
	}

	evicted, stored, parentEngine, hasParent := wk.serve(seqs, locals)
	truth := r.truth[dc]
	if len(evicted) > 0 {
		hashes := make([]uint64, len(evicted))
		for k, b := range evicted {
			hashes[k] = b.engine
			if truth[b.seq]--; truth[b.seq] <= 0 {
				delete(truth, b.seq)
			}
		}
		r.eventID++
		step.Events = append(step.Events, routerevent.RouterEvent{WorkerID: wk.id, Event: routerevent.KvCacheEvent{
			EventID: r.eventID,
			Data:    routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{BlockHashes: hashes}},
		}})
	}
	if len(stored) > 0 {
		blocks := make([]routerevent.StoredBlock, len(stored))
		for k, b := range stored {
			blocks[k] = routerevent.StoredBlock{BlockHash: b.engine, TokensHash: uint64(b.local)}
			truth[b.seq]++
		}
		sd := routerevent.StoreData{Blocks: blocks}
		if hasParent {
			p := parentEngine
			sd.ParentHash = &p
		}
		r.eventID++
		step.Events = append(step.Events, routerevent.RouterEvent{WorkerID: wk.id, Event: routerevent.KvCacheEvent{
			EventID: r.eventID,
			Data:    routerevent.EventData{Kind: routerevent.EventStored, Stored: sd},
		}})
	}
	return step, true
}

// Depth is the exact number of leading blocks of seqs that DC dc holds on
// at least one worker: the ground truth a CKF answer must never undercut.
func (r *Replayer) Depth(dc int, seqs []ckf.SequenceHash) int {
	truth := r.truth[dc]
	for i, s := range seqs {
		if truth[uint64(s)] <= 0 {
			return i
		}
	}
	return len(seqs)
}

// Blocks is the number of distinct blocks DC dc holds.
func (r *Replayer) Blocks(dc int) int { return len(r.truth[dc]) }

func (r *Replayer) route(req Request, dup int) (dc, w int) {
	nDC, nW := uint64(len(r.cfg.DCs)), uint64(r.cfg.WorkersPerDC)
	u := ckf.NextRandom(&r.rng)
	var key uint64
	if float64(u>>11)/float64(1<<53) < r.cfg.Affinity {
		// Conversations share their first user block; route on it.
		id := req.HashIDs[min(1, len(req.HashIDs)-1)]
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:8], id)
		binary.LittleEndian.PutUint64(b[8:], uint64(dup))
		key = xxh3.Hash(b[:])
	} else {
		key = ckf.NextRandom(&r.rng)
	}
	return int(key % nDC), int((key / nDC) % nW)
}

// block is one cached block of a worker.
type block struct {
	seq        uint64
	local      ckf.LocalBlockHash
	engine     uint64
	prev, next *block
}

// worker is an LRU cache of blocks. Ancestors are always touched after
// their descendants, so the LRU tail is a leaf and every cached set stays
// prefix-closed (a Stored event's parent is always still cached).
type worker struct {
	id       uint64
	capacity int
	blocks   map[uint64]*block
	head     block // sentinel: head.next is most recent
}

func newWorker(id uint64, capacity int) *worker {
	w := &worker{id: id, capacity: capacity, blocks: make(map[uint64]*block)}
	w.head.next, w.head.prev = &w.head, &w.head
	return w
}

func (w *worker) unlink(b *block) { b.prev.next, b.next.prev = b.next, b.prev }

func (w *worker) pushFront(b *block) {
	b.prev, b.next = &w.head, w.head.next
	w.head.next.prev = b
	w.head.next = b
}

func (w *worker) serve(seqs []ckf.SequenceHash, locals []ckf.LocalBlockHash) (evicted, stored []*block, parentEngine uint64, hasParent bool) {
	p := 0
	for p < len(seqs) && w.blocks[uint64(seqs[p])] != nil {
		p++
	}
	for k := p - 1; k >= 0; k-- { // cached prefix, children first
		b := w.blocks[uint64(seqs[k])]
		w.unlink(b)
		w.pushFront(b)
	}
	for len(w.blocks)+len(seqs)-p > w.capacity {
		tail := w.head.prev
		w.unlink(tail)
		delete(w.blocks, tail.seq)
		evicted = append(evicted, tail)
	}
	var engine uint64
	if p > 0 {
		engine = w.blocks[uint64(seqs[p-1])].engine
		parentEngine, hasParent = engine, true
	}
	stored = make([]*block, 0, len(seqs)-p)
	for k := p; k < len(seqs); k++ {
		var buf [16]byte
		binary.LittleEndian.PutUint64(buf[:8], engine)
		binary.LittleEndian.PutUint64(buf[8:], uint64(locals[k]))
		engine = xxh3.HashSeed(buf[:], engineSeed)
		b := &block{seq: uint64(seqs[k]), local: locals[k], engine: engine}
		stored = append(stored, b)
		w.blocks[b.seq] = b
	}
	for k := len(stored) - 1; k >= 0; k-- {
		w.pushFront(stored[k])
	}
	for k := p - 1; k >= 0; k-- {
		b := w.blocks[uint64(seqs[k])]
		w.unlink(b)
		w.pushFront(b)
	}
	return evicted, stored, parentEngine, hasParent
}

// SetHashSpace moves the replay into hash space base (and the following
// Duplication-1 spaces), so a repeated pass stores new blocks.
func (r *Replayer) SetHashSpace(base int) { r.space = base }

// Sample returns up to n distinct requests' local hashes spread evenly over
// the trace, in the hash space of the last pass, for verification queries.
func (r *Replayer) Sample(n int) [][]ckf.LocalBlockHash {
	total := r.Len()
	step := max(1, total/max(n, 1))
	var out [][]ckf.LocalBlockHash
	for i := 0; i < total && len(out) < n; i += step {
		req := r.reqs[i%len(r.reqs)]
		dup := r.space + i/len(r.reqs)
		k := min(len(req.HashIDs), r.cfg.CapacityBlocks)
		locals := make([]ckf.LocalBlockHash, k)
		for j := range k {
			locals[j] = LocalHash(req.HashIDs[j], dup)
		}
		out = append(out, locals)
	}
	return out
}
