package bench

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
)

// SearchConfig sizes the prefix-search pair.
type SearchConfig struct {
	// Buckets is the bucket count of every lane (a power of two; default 1<<20).
	Buckets uint64
	// Blocks is the query length (default 128).
	Blocks int
	// Queries is the number of distinct queries cycled through (default 64).
	Queries int
	// ChainBlocks is the length of each query's chain in the table; every
	// lane holds a uniformly random prefix of it (default 4×Blocks, as in
	// pkg/consumer's BenchmarkFindPrefixMatches: most lanes then match the
	// whole query and the rest stop at scattered depths). ChainBlocks =
	// Blocks spreads the lanes' depths over the whole query, the search's
	// worst case.
	ChainBlocks int
	// Seed makes the table and the queries reproducible.
	Seed uint64
}

func (c SearchConfig) withDefaults() SearchConfig {
	if c.Buckets == 0 {
		c.Buckets = 1 << 20
	}
	if c.Blocks == 0 {
		c.Blocks = 128
	}
	if c.Queries == 0 {
		c.Queries = 64
	}
	if c.ChainBlocks == 0 {
		c.ChainBlocks = 4 * c.Blocks
	}
	return c
}

// SearchPair compares consumer.Indexer.FindPrefixMatches on a full 16-lane
// table with a linear probe of every query position on every lane, over the
// same words in the same transposed layout. The fixture (two tables of
// Buckets×16 words) is built on first use and shared by both bodies.
func SearchPair(cfg SearchConfig) Pair {
	cfg = cfg.withDefaults()
	var (
		once sync.Once
		fx   *SearchFixture
		err  error
	)
	get := func(b *testing.B) *SearchFixture {
		b.Helper()
		once.Do(func() { fx, err = NewSearchFixture(cfg) })
		if err != nil {
			b.Fatal(err)
		}
		return fx
	}
	return Pair{
		Name:     "search",
		Subject:  func(b *testing.B) { get(b).BenchFindPrefixMatches(b) },
		Baseline: func(b *testing.B) { get(b).BenchLinearProbe(b) },
	}
}

// SearchFixture is a 16-lane consumer indexer and an identical linear-probe
// table, plus the queries. Each query chain is present on each lane to a
// lane-specific random depth, over an 80% random background occupancy.
type SearchFixture struct {
	cfg     SearchConfig
	ix      *consumer.Indexer
	linear  *LinearProbe
	queries [][]ckf.LocalBlockHash
}

// NewSearchFixture builds the tables and the queries. The consumer table is
// filled through the public path: every lane is claimed, assigned and given
// a snapshot of its words.
func NewSearchFixture(cfg SearchConfig) (*SearchFixture, error) {
	cfg = cfg.withDefaults()
	if cfg.Blocks <= 0 || cfg.Queries <= 0 || cfg.ChainBlocks < cfg.Blocks {
		return nil, fmt.Errorf("bench: search needs positive blocks and queries and chains at least as long as queries, got %d, %d and %d", cfg.Blocks, cfg.Queries, cfg.ChainBlocks)
	}
	domain, err := ckf.DomainFromName("ckf-bench")
	if err != nil {
		return nil, err
	}
	format := ckf.NewFormatIdentity(ckf.DefaultSeed, cfg.Buckets)
	addressing, err := ckf.NewAddressing(cfg.Buckets, ckf.DefaultSeed)
	if err != nil {
		return nil, fmt.Errorf("bench: search buckets %d: %w", cfg.Buckets, err)
	}
	const instance = 1
	var pools [ckf.LaneCount]*ckf.PoolID
	for l := range ckf.LaneCount {
		pools[l] = &ckf.PoolID{Domain: domain, Dc: ckf.DcID(l + 1)}
	}
	m, err := consumer.NewManifest(instance, domain, format, pools)
	if err != nil {
		return nil, err
	}
	ix, err := consumer.NewIndexer(m, ckf.DefaultPrefixSearchConfig())
	if err != nil {
		return nil, err
	}
	linear := NewLinearProbe(addressing)

	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Buckets))
	queries := make([][]ckf.LocalBlockHash, cfg.Queries)
	seqs := make([][]ckf.SequenceHash, cfg.Queries)
	for i := range queries {
		chain := make([]ckf.LocalBlockHash, cfg.ChainBlocks)
		for j := range chain {
			chain[j] = ckf.LocalBlockHash(rng.Uint64())
		}
		queries[i], seqs[i] = chain[:cfg.Blocks], ckf.SequenceHashes(nil, chain)
	}
	words := make([]uint64, cfg.Buckets)
	for l := range ckf.LaneCount {
		fillLane(words, addressing, seqs, rng)
		ing, err := ix.ClaimLane(l)
		if err != nil {
			return nil, err
		}
		id := ckf.ProducerIdentity{Pool: *pools[l], ProducerIncarnation: 1, LayoutGeneration: 1, Format: format}
		lease := ckf.LaneLease{ConsumerInstance: instance, PhysicalLane: uint8(l), AssignmentEpoch: 1}
		if err := ing.Assign(id, lease); err != nil {
			return nil, err
		}
		if out := ing.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: words}); out.Kind != consumer.OutcomeSnapshotInstalled {
			return nil, fmt.Errorf("bench: install lane %d: %v", l, out)
		}
		linear.setLane(l, words)
	}
	if ix.ReadyLanes() != ckf.LaneMask {
		return nil, fmt.Errorf("bench: ready lanes %016b after installing all 16", ix.ReadyLanes())
	}
	return &SearchFixture{cfg: cfg, ix: ix, linear: linear, queries: queries}, nil
}

// fillLane clears words, inserts each query chain to a random depth, then
// fills every still-empty slot with a random fingerprint with probability
// 0.8: only occupancy and the fingerprint distribution matter for probe cost
// and false positives, so this stands in for millions of hashed chains.
func fillLane(words []uint64, a ckf.Addressing, seqs [][]ckf.SequenceHash, rng *rand.Rand) {
	clear(words)
	for _, seq := range seqs {
		for _, h := range seq[:rng.IntN(len(seq)+1)] {
			p := a.Prepare(uint64(h))
			for _, bk := range [2]uint32{p.BucketA, p.BucketB} {
				if s := ckf.FirstEmpty(words[bk]); s >= 0 {
					words[bk] = ckf.WithSlot(words[bk], s, p.Fingerprint)
					break
				}
			}
		}
	}
	const occupied = 0.8 * (1 << 16)
	for bk, w := range words {
		occ, fps := rng.Uint64(), rng.Uint64()
		for s := range int(ckf.SlotsPerBucket) {
			if ckf.Slot(w, s) != 0 || float64(uint16(occ>>(16*s))) >= occupied {
				continue
			}
			w = ckf.WithSlot(w, s, max(uint16(fps>>(16*s)), 1))
		}
		words[bk] = w
	}
}

// Queries returns the fixture's queries (shared; do not modify).
func (f *SearchFixture) Queries() [][]ckf.LocalBlockHash { return f.queries }

// Search runs FindPrefixMatches for q.
func (f *SearchFixture) Search(q []ckf.LocalBlockHash, s *consumer.QueryScratch, out *consumer.QueryResult) error {
	return f.ix.FindPrefixMatches(q, s, out)
}

// Linear runs the linear probe for q.
func (f *SearchFixture) Linear(q []ckf.LocalBlockHash, depths *[ckf.LaneCount]uint32) {
	f.linear.Depths(q, depths)
}

// BenchFindPrefixMatches measures one query per op; steady state must not
// allocate.
func (f *SearchFixture) BenchFindPrefixMatches(b *testing.B) {
	var s consumer.QueryScratch
	var out consumer.QueryResult
	for _, q := range f.queries { // grow the scratch
		if err := f.ix.FindPrefixMatches(q, &s, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if err := f.ix.FindPrefixMatches(f.queries[i%len(f.queries)], &s, &out); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchLinearProbe measures one linear query per op.
func (f *SearchFixture) BenchLinearProbe(b *testing.B) {
	var depths [ckf.LaneCount]uint32
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		f.linear.Depths(f.queries[i%len(f.queries)], &depths)
		i++
	}
}

// CompareDepths runs every query through both algorithms. The search may
// only exceed the linear depth (a false positive it did not re-check),
// never undercut it; it returns how many lane answers were equal.
func (f *SearchFixture) CompareDepths() (equal, total int, err error) {
	var s consumer.QueryScratch
	var out consumer.QueryResult
	var lin [ckf.LaneCount]uint32
	var errs []error
	for qi, q := range f.queries {
		if err := f.ix.FindPrefixMatches(q, &s, &out); err != nil {
			return 0, 0, err
		}
		f.linear.Depths(q, &lin)
		for l := range ckf.LaneCount {
			got := out.Lanes[l].Depth
			total++
			switch {
			case got == lin[l]:
				equal++
			case got < lin[l]:
				errs = append(errs, fmt.Errorf("query %d lane %d: search depth %d below linear %d", qi, l, got, lin[l]))
			}
		}
	}
	return equal, total, errors.Join(errs...)
}

// LinearProbe is the naive prefix search the spec's §11 search replaces:
// every position of the query is hashed, prepared and probed on all 16
// lanes of a transposed table laid out like the consumer's (bucket-major
// rows of 16 atomic words), and a lane's depth is its first miss.
type LinearProbe struct {
	a     ckf.Addressing
	words []atomic.Uint64
}

// NewLinearProbe allocates an empty 16-lane table for a's bucket count.
func NewLinearProbe(a ckf.Addressing) *LinearProbe {
	return &LinearProbe{a: a, words: make([]atomic.Uint64, a.BucketCount()*ckf.LaneCount)}
}

func (t *LinearProbe) setLane(lane int, words []uint64) {
	for bk, w := range words {
		t.words[uint64(bk)*ckf.LaneCount+uint64(lane)].Store(w)
	}
}

// SWAR constants of the packed-bucket zero-slot test (spec §4.1).
const (
	slotsLo uint64 = 0x0001_0001_0001_0001
	slotsHi uint64 = 0x8000_8000_8000_8000
)

func (t *LinearProbe) probe(p ckf.Probe) uint16 {
	ia, ib := uint64(p.BucketA)*ckf.LaneCount, uint64(p.BucketB)*ckf.LaneCount
	a := (*[ckf.LaneCount]atomic.Uint64)(t.words[ia : ia+ckf.LaneCount])
	b := (*[ckf.LaneCount]atomic.Uint64)(t.words[ib : ib+ckf.LaneCount])
	fp := uint64(p.Fingerprint) * slotsLo
	var mask uint64
	for l := range ckf.LaneCount {
		da, db := a[l].Load()^fp, b[l].Load()^fp
		hit := (da-slotsLo)&^da&slotsHi | (db-slotsLo)&^db&slotsHi
		mask |= ((hit | -hit) >> 63) << l
	}
	return uint16(mask)
}

// Depths computes every lane's linear depth for locals: all positions are
// probed (no early exit), as the spec's linear reference does.
func (t *LinearProbe) Depths(locals []ckf.LocalBlockHash, depths *[ckf.LaneCount]uint32) {
	active := ckf.LaneMask
	var h ckf.SequenceHash
	for i, local := range locals {
		if i == 0 {
			h = ckf.SequenceHash(local)
		} else {
			h = ckf.NextSequenceHash(h, local)
		}
		hits := t.probe(t.a.Prepare(uint64(h)))
		for lost := active &^ hits; lost != 0; lost &= lost - 1 {
			depths[bits.TrailingZeros16(lost)] = uint32(i)
		}
		active &= hits
	}
	for ; active != 0; active &= active - 1 {
		depths[bits.TrailingZeros16(active)] = uint32(len(locals))
	}
}
