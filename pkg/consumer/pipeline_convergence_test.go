package consumer_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// The randomized convergence test drives two DC producers (two lanes of one
// pool and indexer) with chains of stored blocks, leaf removals, rank clears,
// ignored non-device events and unknown removals, and checks after every
// exact drain that (1) each consumer lane equals its producer's lane word for
// word, (2) the producer's exact ownership equals an independent model of the
// members' chains and (3) no tracked block's chain query misses its lane.
// One DC loses a delta mid-run: its drain must fail and a snapshot recovery
// must restore convergence, while the other lane is unaffected.

const (
	tokenBlockSize  = 16
	convMembers     = 6 // workers, each with convRanks dp ranks
	convRanks       = 2
	convPrompts     = 96
	convMaxHeld     = 400 // per member; above it the driver only removes
	convEvents      = 2400
	convCheckpoint  = 400
	convDropAtEvent = 1050 // on DC A; the next checkpoint is 1200
)

// promptChain is one token prompt cut into blocks: its local hashes and the
// rolling sequence hashes Dynamo queries with.
type promptChain struct {
	locals []ckf.LocalBlockHash
	seqs   []ckf.SequenceHash
}

// makePrompts builds prompts that share prefixes the way real traffic does:
// most prompts extend a prefix of an earlier one.
func makePrompts(rng *rand.Rand) []promptChain {
	prompts := make([]promptChain, 0, convPrompts)
	tokens := make([][]uint32, 0, convPrompts)
	for j := range convPrompts {
		var toks []uint32
		shared := 0
		if j > 0 && rng.IntN(10) < 7 {
			base := tokens[rng.IntN(j)]
			shared = rng.IntN(len(base)/tokenBlockSize + 1)
			toks = append(toks, base[:shared*tokenBlockSize]...)
		}
		blocks := shared + 1 + rng.IntN(24)
		for len(toks) < blocks*tokenBlockSize {
			toks = append(toks, rng.Uint32())
		}
		locals := ckf.LocalBlockHashes(nil, toks, tokenBlockSize)
		prompts = append(prompts, promptChain{locals: locals, seqs: ckf.SequenceHashes(nil, locals)})
		tokens = append(tokens, toks)
	}
	return prompts
}

// engineHash is the external block hash an engine would publish in
// canonical mode: a deterministic function of the block's prefix that is not
// Dynamo's sequence hash.
func engineHash(s ckf.SequenceHash) uint64 {
	z := uint64(s) ^ 0xA5A5_5A5A_C3C3_3C3C
	z = (z ^ z>>30) * 0xBF58_476D_1CE4_E5B9
	z = (z ^ z>>27) * 0x94D0_49BB_1331_11EB
	return z ^ z>>31
}

type blockRef struct{ prompt, pos int }

// memberModel is one (worker, dp_rank)'s chains: every held block's parent
// is held too, and only leaves are removed.
type memberModel struct {
	worker   uint64
	rank     uint32
	order    []ckf.SequenceHash // deterministic iteration order
	index    map[ckf.SequenceHash]int
	ref      map[ckf.SequenceHash]blockRef
	children map[ckf.SequenceHash]int
}

func newMemberModel(worker uint64, rank uint32) *memberModel {
	m := &memberModel{worker: worker, rank: rank}
	m.reset()
	return m
}

func (m *memberModel) reset() {
	m.order = m.order[:0]
	m.index = make(map[ckf.SequenceHash]int)
	m.ref = make(map[ckf.SequenceHash]blockRef)
	m.children = make(map[ckf.SequenceHash]int)
}

func (m *memberModel) holds(s ckf.SequenceHash) bool { _, ok := m.index[s]; return ok }

func (m *memberModel) add(prompts []promptChain, r blockRef) {
	s := prompts[r.prompt].seqs[r.pos]
	if m.holds(s) {
		return
	}
	m.index[s] = len(m.order)
	m.order = append(m.order, s)
	m.ref[s] = r
	if r.pos > 0 {
		m.children[prompts[r.prompt].seqs[r.pos-1]]++
	}
}

func (m *memberModel) remove(prompts []promptChain, s ckf.SequenceHash) {
	i := m.index[s]
	last := m.order[len(m.order)-1]
	m.order[i] = last
	m.index[last] = i
	m.order = m.order[:len(m.order)-1]
	delete(m.index, s)
	r := m.ref[s]
	delete(m.ref, s)
	if r.pos > 0 {
		parent := prompts[r.prompt].seqs[r.pos-1]
		if m.children[parent]--; m.children[parent] == 0 {
			delete(m.children, parent)
		}
	}
}

func (m *memberModel) leaves() []ckf.SequenceHash {
	var out []ckf.SequenceHash
	for _, s := range m.order {
		if m.children[s] == 0 {
			out = append(out, s)
		}
	}
	return out
}

// dcDriver owns one pipeline (its single owner) and the model of its members.
type dcDriver struct {
	name    string
	p       *pipeline
	lane    uint8
	mode    ckf.HashMode
	rng     *rand.Rand
	prompts []promptChain
	members []*memberModel
	eventID uint64
	// dropAt arms one dropped delta at that event index (0: never).
	dropAt       int
	dropArmed    bool
	deliveryLost int // publish failures observed after the drop
	recoveries   int
	queries      int
}

func (d *dcDriver) ext(s ckf.SequenceHash) uint64 {
	if d.mode == ckf.HashModeVerbatim {
		return uint64(s) // Dynamo-native publishers: block_hash = sequence hash
	}
	return engineHash(s)
}

func (d *dcDriver) event(m *memberModel, data routerevent.EventData) *routerevent.RouterEvent {
	d.eventID++
	return &routerevent.RouterEvent{WorkerID: m.worker, Event: routerevent.KvCacheEvent{EventID: d.eventID, DpRank: m.rank, Data: data}}
}

// storeEvent builds a stored event extending a chain of prompt p for m and
// the refs it adds. With dup it starts inside the held prefix (re-offers).
func (d *dcDriver) storeEvent(m *memberModel, p int, dup bool) (*routerevent.RouterEvent, []blockRef) {
	pr := d.prompts[p]
	held := 0
	for held < len(pr.seqs) && m.holds(pr.seqs[held]) {
		held++
	}
	start := held
	if dup || held == len(pr.seqs) {
		start = d.rng.IntN(held + 1)
		if start == len(pr.seqs) {
			start--
		}
	}
	end := min(len(pr.seqs), start+1+d.rng.IntN(16))
	data := routerevent.EventData{Kind: routerevent.EventStored}
	if start > 0 {
		parent := d.ext(pr.seqs[start-1])
		data.Stored.ParentHash = &parent
	}
	refs := make([]blockRef, 0, end-start)
	for i := start; i < end; i++ {
		data.Stored.Blocks = append(data.Stored.Blocks, routerevent.StoredBlock{BlockHash: d.ext(pr.seqs[i]), TokensHash: uint64(pr.locals[i])})
		refs = append(refs, blockRef{prompt: p, pos: i})
	}
	return d.event(m, data), refs
}

// step applies one random event to the pipeline and the model.
func (d *dcDriver) step(i int) error {
	if d.dropAt != 0 && i == d.dropAt {
		d.p.sink.dropNext = true
		d.dropArmed = true
	}
	m := d.members[d.rng.IntN(len(d.members))]
	op := d.rng.IntN(100)
	if len(m.order) > convMaxHeld && op < 55 {
		op = 60
	}
	if len(m.order) == 0 && op >= 55 && op < 85 {
		op = 0
	}
	var (
		ev          *routerevent.RouterEvent
		apply       func()
		wantUnknown uint64
		ignored     bool
	)
	switch {
	case op < 55 || (op >= 88 && op < 91): // store (3% as re-offers)
		p := d.rng.IntN(len(d.prompts))
		var refs []blockRef
		ev, refs = d.storeEvent(m, p, op >= 88)
		apply = func() {
			for _, r := range refs {
				m.add(d.prompts, r)
			}
		}
	case op < 85, op >= 96: // remove 1..3 leaves; the last band adds an unknown hash
		leaves := m.leaves()
		d.rng.Shuffle(len(leaves), func(a, b int) { leaves[a], leaves[b] = leaves[b], leaves[a] })
		leaves = leaves[:min(len(leaves), 1+d.rng.IntN(3))]
		data := routerevent.EventData{Kind: routerevent.EventRemoved}
		for _, s := range leaves {
			data.Removed.BlockHashes = append(data.Removed.BlockHashes, d.ext(s))
		}
		if op >= 96 {
			data.Removed.BlockHashes = append(data.Removed.BlockHashes, d.rng.Uint64())
			wantUnknown = 1
		}
		ev = d.event(m, data)
		apply = func() {
			for _, s := range leaves {
				m.remove(d.prompts, s)
			}
		}
	case op < 88: // clear the rank
		ev = d.event(m, routerevent.EventData{Kind: routerevent.EventCleared})
		apply = m.reset
	default: // a host-tier store: ignored by the device-tier producer
		ev, _ = d.storeEvent(m, d.rng.IntN(len(d.prompts)), false)
		ev.StorageTier = routerevent.TierHostPinned
		apply = func() {}
		ignored = true
	}

	result, err := d.p.apply(ev)
	if err != nil {
		// After the dropped delta the pool retires the lane on the gap, so
		// deliveries fail and the publisher fences; the state still applied
		// the event and the recovery snapshot covers it.
		if d.dropArmed && (errors.Is(err, producer.ErrEnqueue) || errors.Is(err, producer.ErrFenced)) {
			d.deliveryLost++
			apply()
			return nil
		}
		return fmt.Errorf("event %d: apply: %w", i, err)
	}
	apply()
	if result.FirstError != nil {
		return fmt.Errorf("event %d: FirstError %w", i, result.FirstError)
	}
	if result.UnknownRemovals != wantUnknown {
		return fmt.Errorf("event %d: UnknownRemovals = %d, want %d", i, result.UnknownRemovals, wantUnknown)
	}
	if ignored && result.Publication != nil {
		return fmt.Errorf("event %d: an ignored host-tier event published %+v", i, *result.Publication)
	}
	return nil
}

// checkpoint drains exactly and verifies convergence. A drop armed since the
// last checkpoint must make the drain fail; recovery then restores it.
func (d *dcDriver) checkpoint(full bool) error {
	_, _, err := d.p.drain()
	if d.dropArmed {
		if d.p.sink.dropNext {
			return errors.New("the armed drop was never consumed")
		}
		// The gap shows as an unacknowledged drain, a pool refusal of the
		// drain, or a publish the retired lane refused.
		var pe *producer.PublishError
		var ie *consumer.IngestionError
		if !errors.Is(err, errDrainOutcome) && !errors.As(err, &pe) && !errors.As(err, &ie) {
			return fmt.Errorf("drain after a dropped delta = %v", err)
		}
		if d.p.indexer().ReadyLanes()&(1<<d.lane) != 0 {
			return fmt.Errorf("lane %d still ready after a detected gap", d.lane)
		}
		attempts, sequence, rerr := d.p.recoverSnapshot(3)
		if rerr != nil {
			return fmt.Errorf("recoverSnapshot: %w", rerr)
		}
		if attempts != 1 || sequence != d.p.pub.LastSequence() {
			return fmt.Errorf("recovery = %d attempts at %d, producer sequence %d", attempts, sequence, d.p.pub.LastSequence())
		}
		d.dropArmed = false
		d.recoveries++
		full = true
		_, _, err = d.p.drain()
	}
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if err := d.checkWords(); err != nil {
		return err
	}
	if err := d.checkExactState(); err != nil {
		return err
	}
	if full {
		return d.checkQueries()
	}
	return nil
}

func (d *dcDriver) checkWords() error {
	got := d.p.indexer().LaneWords(int(d.lane), nil)
	want := d.p.state.Words()
	if len(got) != len(want) {
		return fmt.Errorf("lane %d: %d consumer words, %d producer words", d.lane, len(got), len(want))
	}
	for b := range want {
		if got[b] != want[b] {
			return fmt.Errorf("lane %d bucket %d: consumer %#016x, producer %#016x", d.lane, b, got[b], want[b])
		}
	}
	return nil
}

// checkExactState compares the producer's ownership with the model: in both
// modes the tracked full hash of a chain block is its sequence hash.
func (d *dcDriver) checkExactState() error {
	want := make(map[uint64]uint32)
	for _, m := range d.members {
		for _, s := range m.order {
			want[uint64(s)]++
		}
	}
	n := 0
	for h, own := range d.p.state.ExactBlocks() {
		n++
		if want[h] != own.Refcount || !own.Resident {
			return fmt.Errorf("block %#x: producer %+v, model refcount %d", h, own, want[h])
		}
	}
	if n != len(want) {
		return fmt.Errorf("producer tracks %d blocks, model %d", n, len(want))
	}
	return nil
}

// checkQueries asserts there is no false negative: the query of every held
// block's chain of local hashes reports at least its length on this lane.
func (d *dcDriver) checkQueries() error {
	var (
		s   consumer.QueryScratch
		out consumer.QueryResult
	)
	seen := make(map[ckf.SequenceHash]bool)
	for _, m := range d.members {
		for _, h := range m.order {
			if seen[h] {
				continue
			}
			seen[h] = true
			r := m.ref[h]
			chain := d.prompts[r.prompt].locals[:r.pos+1]
			if err := d.p.indexer().FindPrefixMatches(chain, &s, &out); err != nil {
				return fmt.Errorf("query of %d blocks: %w", len(chain), err)
			}
			d.queries++
			if lm := out.Lanes[d.lane]; !lm.Present || int(lm.Depth) < len(chain) {
				return fmt.Errorf("lane %d: chain of %d blocks matched %+v (false negative)", d.lane, len(chain), lm)
			}
		}
	}
	return nil
}

func (d *dcDriver) run() error {
	for i := 1; i <= convEvents; i++ {
		if err := d.step(i); err != nil {
			return err
		}
		if i%convCheckpoint == 0 {
			if err := d.checkpoint(i == convEvents); err != nil {
				return fmt.Errorf("checkpoint at event %d: %w", i, err)
			}
		}
	}
	return nil
}

func TestRandomizedConvergence(t *testing.T) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		for _, cadence := range []uint64{1, 5, 32} {
			t.Run(fmt.Sprintf("%s/every_%d", mode, cadence), func(t *testing.T) {
				runConvergence(t, mode, cadence, 0xC0FFEE+cadence+uint64(mode)<<8)
			})
		}
	}
}

func runConvergence(t *testing.T, mode ckf.HashMode, cadence, seed uint64) {
	cfg := ckf.NewConfig(4096)
	cfg.Mode = mode
	cfg.PublishEveryNEvents = cadence
	lanes := []laneSpec{{lane: 3, dc: 11}, {lane: 9, dc: 12}}
	pool := newSharedPool(t, cfg, poolOptions{workers: 2, queue: 1024, imagesPerLane: 1024}, lanes...)
	prompts := makePrompts(rand.New(rand.NewPCG(seed, 1)))

	drivers := make([]*dcDriver, len(lanes))
	for i, l := range lanes {
		p := newPipeline(t, cfg, fixtureIdentity(t, cfg, l.dc), fixtureLease(l.lane, 1), pool)
		d := &dcDriver{name: fmt.Sprintf("dc%d", l.dc), p: p, lane: l.lane, mode: mode,
			rng: rand.New(rand.NewPCG(seed, uint64(l.dc))), prompts: prompts}
		for w := range convMembers {
			for r := range convRanks {
				d.members = append(d.members, newMemberModel(100+uint64(w), uint32(r)))
			}
		}
		drivers[i] = d
	}
	drivers[0].dropAt = convDropAtEvent

	// One goroutine per DC: each pipeline keeps its single owner while both
	// share the pool and the indexer.
	errs := make([]error, len(drivers))
	var wg sync.WaitGroup
	for i, d := range drivers {
		wg.Go(func() { errs[i] = d.run() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s (lane %d): %v", drivers[i].name, drivers[i].lane, err)
		}
	}
	if t.Failed() {
		return
	}
	if drivers[0].recoveries != 1 {
		t.Errorf("%s recovered %d times, want 1", drivers[0].name, drivers[0].recoveries)
	}
	if drivers[1].recoveries != 0 {
		t.Errorf("%s recovered %d times, want 0 (its lane never lost a delta)", drivers[1].name, drivers[1].recoveries)
	}
	if got := pool.Indexer().ReadyLanes(); got != 1<<3|1<<9 {
		t.Errorf("ReadyLanes = %#x, want lanes 3 and 9", got)
	}
	for _, d := range drivers {
		if d.queries == 0 {
			t.Errorf("%s checked no query", d.name)
		}
		st := d.p.state.Stats()
		t.Logf("%s: seq %d, %d unique blocks, %d members, %d queries, %d deliveries lost after the drop",
			d.name, d.p.pub.LastSequence(), st.UniqueBlocks, st.Members, d.queries, d.deliveryLost)
	}
}

// BenchmarkPipelineApplyEvent measures 16-block stored events end to end:
// producer state, publisher, image copy, pool admission and the worker's
// application, including an exact drain every benchDrainEvery iterations so
// the bounded lane FIFO never saturates. To hold occupancy steady each
// iteration also removes the chain stored benchWindow iterations earlier;
// blocks/s counts stored blocks only.
func BenchmarkPipelineApplyEvent(b *testing.B) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		b.Run(mode.String(), func(b *testing.B) { benchApply(b, mode) })
	}
}

const (
	benchBlocks     = 16
	benchChains     = 1024
	benchWindow     = benchChains / 2
	benchDrainEvery = 128
)

func benchApply(b *testing.B, mode ckf.HashMode) {
	cfg := ckf.NewConfig(benchWindow * benchBlocks * 2)
	cfg.Mode = mode
	pool := newSharedPool(b, cfg, poolOptions{workers: 1, queue: 1024, imagesPerLane: 64}, laneSpec{lane: seedLane, dc: seedDc})
	p := newPipeline(b, cfg, fixtureIdentity(b, cfg, seedDc), fixtureLease(seedLane, 1), pool)

	rng := rand.New(rand.NewPCG(7, 13))
	stores := make([]*routerevent.RouterEvent, benchChains)
	removes := make([]*routerevent.RouterEvent, benchChains)
	for j := range benchChains {
		locals := make([]ckf.LocalBlockHash, benchBlocks)
		for i := range locals {
			locals[i] = ckf.LocalBlockHash(rng.Uint64())
		}
		seqs := ckf.SequenceHashes(nil, locals)
		blocks := make([]routerevent.StoredBlock, benchBlocks)
		hashes := make([]uint64, benchBlocks)
		for i, s := range seqs {
			ext := uint64(s)
			if mode == ckf.HashModeCanonical {
				ext = engineHash(s)
			}
			blocks[i] = routerevent.StoredBlock{BlockHash: ext, TokensHash: uint64(locals[i])}
			hashes[i] = ext
		}
		stores[j] = &routerevent.RouterEvent{WorkerID: 1, Event: routerevent.KvCacheEvent{
			Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{Blocks: blocks}}}}
		removes[j] = &routerevent.RouterEvent{WorkerID: 1, Event: routerevent.KvCacheEvent{
			Data: routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{BlockHashes: hashes}}}}
	}

	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		res, err := p.apply(stores[i%benchChains])
		if err != nil || res.FirstError != nil {
			b.Fatalf("store %d: %+v, %v", i, res, err)
		}
		if i >= benchWindow {
			if _, err := p.apply(removes[(i-benchWindow)%benchChains]); err != nil {
				b.Fatalf("remove %d: %v", i, err)
			}
		}
		if i%benchDrainEvery == benchDrainEvery-1 {
			if _, _, err := p.drain(); err != nil {
				b.Fatalf("drain at %d: %v", i, err)
			}
		}
	}
	if _, _, err := p.drain(); err != nil {
		b.Fatalf("final drain: %v", err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchBlocks)/b.Elapsed().Seconds(), "blocks/s")
	assertLaneConverged(b, p)
}
