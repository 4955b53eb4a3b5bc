package bench

import (
	"fmt"
	"sync"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// ProducerConfig sizes the producer pair.
type ProducerConfig struct {
	// ExpectedBlocks sizes the CKF (ckf.NewConfig; default 1<<20).
	ExpectedBlocks uint64
	// Load is the target share of occupied physical slots (default 0.8).
	Load float64
	// Members spreads events over this many workers (default 64).
	Members uint64
	// BlocksPerEvent is the size of every store and remove (default 16).
	BlocksPerEvent int
}

func (c ProducerConfig) withDefaults() ProducerConfig {
	if c.ExpectedBlocks == 0 {
		c.ExpectedBlocks = 1 << 20
	}
	if c.Load == 0 {
		c.Load = 0.8
	}
	if c.Members == 0 {
		c.Members = 64
	}
	if c.BlocksPerEvent == 0 {
		c.BlocksPerEvent = 16
	}
	return c
}

// ProducerPair compares canonical-mode producer.State.ApplyEvent with an
// exact refcount map (map[uint64]uint32, no lineage, no CKF). One op is one
// store of a fresh event plus the removal of the oldest live one, so both
// sides stay at the configured load. Each side is filled once, on first
// use, and keeps its steady state across runs.
func ProducerPair(cfg ProducerConfig) Pair {
	cfg = cfg.withDefaults()
	var (
		stateOnce, mapOnce sync.Once
		sd                 *StateDriver
		md                 *RefcountDriver
		err                error
	)
	return Pair{
		Name: "producer",
		Subject: func(b *testing.B) {
			stateOnce.Do(func() { sd, err = NewStateDriver(cfg) })
			if err != nil {
				b.Fatal(err)
			}
			sd.Bench(b)
		},
		Baseline: func(b *testing.B) {
			mapOnce.Do(func() { md = NewRefcountDriver(cfg) })
			md.Bench(b)
		},
	}
}

// eventStream generates 16-block events with fresh, well-mixed hashes for
// rotating members and replays the removal of the oldest one.
type eventStream struct {
	members, blocks uint64
	next, oldest    uint64 // ids of the next event to store and the oldest live one
}

func (e *eventStream) hash(id uint64, i int) uint64 { return mix64(id*e.blocks + uint64(i)) }

func (e *eventStream) liveBlocks() uint64 { return (e.next - e.oldest) * e.blocks }

func mix64(v uint64) uint64 {
	v += 0x9E3779B97F4A7C15
	v = (v ^ v>>30) * 0xBF58476D1CE4E5B9
	v = (v ^ v>>27) * 0x94D049BB133111EB
	return v ^ v>>31
}

// fillTarget is the number of live blocks at the configured load.
func fillTarget(cfg ProducerConfig) (uint64, error) {
	buckets, err := ckf.BucketCount(cfg.ExpectedBlocks)
	if err != nil {
		return 0, err
	}
	return uint64(float64(buckets*uint64(ckf.SlotsPerBucket)) * cfg.Load), nil
}

// StateDriver drives a canonical-mode producer.State. Its two events are
// reused, so the loop itself allocates nothing.
type StateDriver struct {
	eventStream
	s        *producer.State
	store    routerevent.RouterEvent
	removeEv routerevent.RouterEvent
	failures uint64
}

// NewStateDriver builds the state and fills it to cfg.Load.
func NewStateDriver(cfg ProducerConfig) (*StateDriver, error) {
	cfg = cfg.withDefaults()
	c := ckf.NewConfig(cfg.ExpectedBlocks)
	c.Mode = ckf.HashModeCanonical
	s, err := producer.NewState(c)
	if err != nil {
		return nil, err
	}
	d := &StateDriver{eventStream: eventStream{members: cfg.Members, blocks: uint64(cfg.BlocksPerEvent)}, s: s}
	d.store.Event.Data = routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{Blocks: make([]routerevent.StoredBlock, cfg.BlocksPerEvent)}}
	d.removeEv.Event.Data = routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{BlockHashes: make([]uint64, cfg.BlocksPerEvent)}}
	target, err := fillTarget(cfg)
	if err != nil {
		return nil, err
	}
	for d.liveBlocks() < target {
		d.storeNext()
	}
	d.s.Flush()
	return d, nil
}

func (d *StateDriver) storeNext() {
	id := d.next
	d.next++
	d.store.WorkerID = id % d.members
	for i := range d.store.Event.Data.Stored.Blocks {
		h := d.hash(id, i)
		d.store.Event.Data.Stored.Blocks[i] = routerevent.StoredBlock{BlockHash: h, TokensHash: h ^ 0x5555}
	}
	if out := d.s.ApplyEvent(&d.store); out.FirstError != nil {
		d.failures++
	}
}

func (d *StateDriver) removeOldest() error {
	id := d.oldest
	d.oldest++
	d.removeEv.WorkerID = id % d.members
	for i := range d.removeEv.Event.Data.Removed.BlockHashes {
		d.removeEv.Event.Data.Removed.BlockHashes[i] = d.hash(id, i)
	}
	if out := d.s.ApplyEvent(&d.removeEv); out.FirstError != nil || out.UnknownRemovals != 0 {
		return fmt.Errorf("bench: remove event %d: %v (%d unknown)", id, out.FirstError, out.UnknownRemovals)
	}
	return nil
}

// Load is the share of occupied physical slots (O(buckets)).
func (d *StateDriver) Load() float64 {
	st := d.s.Stats()
	return float64(st.OccupiedSlots) / float64(st.BucketCount*uint64(ckf.SlotsPerBucket))
}

// Bench measures one store+remove pair per op.
func (d *StateDriver) Bench(b *testing.B) {
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		d.storeNext()
		if err := d.removeOldest(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*2*float64(d.blocks)/b.Elapsed().Seconds(), "blocks/s")
	b.ReportMetric(float64(d.failures), "capacity_failures")
}

// RefcountDriver is the baseline: the exact per-block refcount a relay
// would keep without a CKF projection (and without canonical lineage).
type RefcountDriver struct {
	eventStream
	refs map[uint64]uint32
}

// NewRefcountDriver fills the map with as many live blocks as the state.
func NewRefcountDriver(cfg ProducerConfig) *RefcountDriver {
	cfg = cfg.withDefaults()
	target, _ := fillTarget(cfg) // NewStateDriver reports a bad size
	d := &RefcountDriver{eventStream: eventStream{members: cfg.Members, blocks: uint64(cfg.BlocksPerEvent)}, refs: make(map[uint64]uint32)}
	for d.liveBlocks() < target {
		d.storeNext()
	}
	return d
}

func (d *RefcountDriver) storeNext() {
	id := d.next
	d.next++
	for i := range int(d.blocks) {
		d.refs[d.hash(id, i)]++
	}
}

func (d *RefcountDriver) removeOldest() {
	id := d.oldest
	d.oldest++
	for i := range int(d.blocks) {
		h := d.hash(id, i)
		if c := d.refs[h]; c > 1 {
			d.refs[h] = c - 1
		} else {
			delete(d.refs, h)
		}
	}
}

// Len is the number of live blocks.
func (d *RefcountDriver) Len() int { return len(d.refs) }

// Bench measures one store+remove pair per op.
func (d *RefcountDriver) Bench(b *testing.B) {
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		d.storeNext()
		d.removeOldest()
	}
	b.ReportMetric(float64(b.N)*2*float64(d.blocks)/b.Elapsed().Seconds(), "blocks/s")
}
