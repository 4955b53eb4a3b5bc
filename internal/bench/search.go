package bench

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
)

// SearchConfig sizes the prefix-search pairs.
type SearchConfig struct {
	// Buckets is the bucket count of every lane (a power of two; default
	// 1<<22, Dynamo's 16-DC shape).
	Buckets uint64
	// Blocks is the query length (default 128).
	Blocks int
	// Queries is the number of distinct queries of the cold set (default
	// 65,536): their probed rows (~100 MB at 128 blocks) are far beyond
	// L3, so each query meets cold rows as a router seeing new prompts does.
	Queries int
	// HotQueries is the hot set, the first HotQueries of the same queries
	// cycled through (default 64: shared system prompts whose rows stay in
	// L2).
	HotQueries int
	// ChainBlocks sets the depth distribution: every lane holds each query
	// chain to a depth drawn uniformly from 0..ChainBlocks, clipped to
	// Blocks (default 4×Blocks, as in pkg/consumer's
	// BenchmarkFindPrefixMatches: most lanes then match the whole query and
	// the rest stop at scattered depths). ChainBlocks = Blocks spreads the
	// lanes' depths over the whole query, the search's worst case.
	ChainBlocks int
	// IngestRate is the paced rate, in images/s, at which a consumer.Pool
	// applies deltas while QueryUnderIngest times cold queries (default 1M).
	IngestRate float64
	// PoolMaxDirtyAge overrides the fixture pool's MaxDirtyToAppliedAge
	// (0: the default, 10ms). Tests under the race detector on one core
	// raise it: a goroutine there may wait a whole 10ms time slice.
	PoolMaxDirtyAge time.Duration
	// PercentileSamples is the number of queries timed one by one behind
	// each p50 and p99 (default 20,000, or Queries when larger). Tests
	// checking the report's shape use a few hundred: under the race
	// detector 20,000 linear probes of a 128-block query take minutes.
	PercentileSamples int
	// Seed makes the table and the queries reproducible.
	Seed uint64
}

func (c SearchConfig) withDefaults() SearchConfig {
	if c.Buckets == 0 {
		c.Buckets = 1 << 22
	}
	if c.IngestRate == 0 {
		c.IngestRate = 1e6
	}
	if c.Blocks == 0 {
		c.Blocks = 128
	}
	if c.Queries == 0 {
		c.Queries = 65536
	}
	if c.HotQueries == 0 {
		c.HotQueries = min(64, c.Queries)
	}
	if c.ChainBlocks == 0 {
		c.ChainBlocks = 4 * c.Blocks
	}
	if c.PercentileSamples == 0 {
		c.PercentileSamples = defaultPercentileSamples
	}
	return c
}

// SearchPairs returns the hot and the cold pair: consumer.Indexer's
// FindPrefixMatches on a full 16-lane table against a linear probe of every
// query position on every lane, over the same words in the same transposed
// layout, cycling through HotQueries and through all Queries queries. The
// fixture (two tables of Buckets×16 words) is built on first use and shared
// by all four bodies.
func SearchPairs(cfg SearchConfig) (hot, cold Pair) {
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
	pair := func(name string, n int) Pair {
		return Pair{
			Name:     name,
			Subject:  func(b *testing.B) { f := get(b); f.BenchFindPrefixMatches(b, f.queries[:n]) },
			Baseline: func(b *testing.B) { f := get(b); f.BenchLinearProbe(b, f.queries[:n]) },
		}
	}
	return pair("search hot", cfg.HotQueries), pair("search cold", cfg.Queries)
}

// SearchFixture is a 16-lane consumer indexer and an identical linear-probe
// table, plus the queries. Each query chain is present on each lane to a
// lane-specific random depth, over an 80% random background occupancy.
type SearchFixture struct {
	cfg     SearchConfig
	ix      *consumer.Indexer
	pool    *consumer.Pool
	ids     [ckf.LaneCount]ckf.ProducerIdentity
	leases  [ckf.LaneCount]ckf.LaneLease
	linear  *LinearProbe
	queries [][]ckf.LocalBlockHash
}

// NewSearchFixture builds the tables and the queries. The consumer table is
// filled through the public path: a consumer.Pool owns every lane, which is
// assigned and given a snapshot of its words. Close releases the pool.
func NewSearchFixture(cfg SearchConfig) (*SearchFixture, error) {
	cfg = cfg.withDefaults()
	if cfg.Blocks <= 0 || cfg.Queries <= 0 || cfg.HotQueries <= 0 || cfg.HotQueries > cfg.Queries || cfg.ChainBlocks < cfg.Blocks || cfg.PercentileSamples < 0 {
		return nil, fmt.Errorf("bench: search needs positive blocks and queries, at most as many hot queries as queries, chains at least as long as queries and no negative sample count, got %d, %d, %d, %d and %d", cfg.Blocks, cfg.Queries, cfg.HotQueries, cfg.ChainBlocks, cfg.PercentileSamples)
	}
	fx := &SearchFixture{cfg: cfg}
	// Expected stored positions per lane: E[min(U(0..chain), blocks)].
	b, c := float64(cfg.Blocks), float64(cfg.ChainBlocks)
	perChain := (b*(b+1)/2 + b*(c-b)) / (c + 1)
	if need, slots := float64(cfg.Queries)*perChain, 0.6*float64(cfg.Buckets)*float64(ckf.SlotsPerBucket); need > slots {
		return nil, fmt.Errorf("bench: %d queries store about %.0f positions per lane, more than 60%% of %d buckets' slots: raise --buckets or lower --queries", cfg.Queries, need, cfg.Buckets)
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
	pcfg := consumer.DefaultPoolConfig()
	if cfg.PoolMaxDirtyAge > 0 {
		pcfg.MaxDirtyToAppliedAge = cfg.PoolMaxDirtyAge
	}
	pool, err := consumer.NewPool(ix, pcfg)
	if err != nil {
		return nil, err
	}
	fx.pool = pool
	ok := false
	defer func() {
		if !ok {
			_ = pool.Close()
		}
	}()
	linear := NewLinearProbe(addressing)

	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Buckets))
	queries := make([][]ckf.LocalBlockHash, cfg.Queries)
	seqs := make([][]ckf.SequenceHash, cfg.Queries)
	for i := range queries {
		q := make([]ckf.LocalBlockHash, cfg.Blocks)
		for j := range q {
			q[j] = ckf.LocalBlockHash(rng.Uint64())
		}
		queries[i], seqs[i] = q, ckf.SequenceHashes(nil, q)
	}
	words := make([]uint64, cfg.Buckets)
	for l := range ckf.LaneCount {
		fillLane(words, addressing, seqs, cfg.ChainBlocks, rng)
		id := ckf.ProducerIdentity{Pool: *pools[l], ProducerIncarnation: 1, LayoutGeneration: 1, Format: format}
		lease := ckf.LaneLease{ConsumerInstance: instance, PhysicalLane: uint8(l), AssignmentEpoch: 1}
		fx.ids[l], fx.leases[l] = id, lease
		if err := pool.Assign(id, lease); err != nil {
			return nil, err
		}
		if out, err := pool.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: words}); err != nil || out.Kind != consumer.OutcomeSnapshotInstalled {
			return nil, fmt.Errorf("bench: install lane %d: %v %w", l, out, err)
		}
		linear.setLane(l, words)
	}
	if ix.ReadyLanes() != ckf.LaneMask {
		return nil, fmt.Errorf("bench: ready lanes %016b after installing all 16", ix.ReadyLanes())
	}
	fx.ix, fx.linear, fx.queries = ix, linear, queries
	ok = true
	return fx, nil
}

// Close stops the fixture's ingestion pool (its lanes are retired).
func (f *SearchFixture) Close() error { return f.pool.Close() }

// fillLane clears words, inserts each query chain to a depth drawn from
// 0..chainBlocks (clipped to the query), then tops the lane up to 80% slot
// occupancy with random fingerprints: only occupancy and the fingerprint
// distribution matter for probe cost and false positives, so this stands in
// for millions of hashed chains.
func fillLane(words []uint64, a ckf.Addressing, seqs [][]ckf.SequenceHash, chainBlocks int, rng *rand.Rand) {
	clear(words)
	stored := 0
	for _, seq := range seqs {
		for _, h := range seq[:min(rng.IntN(chainBlocks+1), len(seq))] {
			p := a.Prepare(uint64(h))
			for _, bk := range [2]uint32{p.BucketA, p.BucketB} {
				if s := ckf.FirstEmpty(words[bk]); s >= 0 {
					words[bk] = ckf.WithSlot(words[bk], s, p.Fingerprint)
					stored++
					break
				}
			}
		}
	}
	slots := float64(len(words)) * float64(ckf.SlotsPerBucket)
	occupied := max(0, (0.8*slots-float64(stored))/(slots-float64(stored))) * (1 << 16)
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

// Pair is the subject and baseline over the first n queries.
func (f *SearchFixture) Pair(name string, n int) Pair {
	qs := f.queries[:min(max(n, 1), len(f.queries))]
	return Pair{
		Name:     name,
		Subject:  func(b *testing.B) { f.BenchFindPrefixMatches(b, qs) },
		Baseline: func(b *testing.B) { f.BenchLinearProbe(b, qs) },
	}
}

// Config returns the fixture's configuration, defaults filled in.
func (f *SearchFixture) Config() SearchConfig { return f.cfg }

// TableMemory reports the consumer table's size and huge-page backing.
func (f *SearchFixture) TableMemory() consumer.TableMemory { return f.ix.TableMemory() }

// BenchFindPrefixMatches measures one query per op, cycling through qs;
// steady state must not allocate. A separate pass then times each query on
// its own and reports p50-ns and p99-ns.
func (f *SearchFixture) BenchFindPrefixMatches(b *testing.B, qs [][]ckf.LocalBlockHash) {
	var s consumer.QueryScratch
	var out consumer.QueryResult
	if err := f.ix.FindPrefixMatches(qs[0], &s, &out); err != nil { // grow the scratch
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := f.ix.FindPrefixMatches(qs[i%len(qs)], &s, &out); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.StopTimer()
	var failed error
	lat := TimeEach(max(len(qs), f.cfg.PercentileSamples), func(k int) {
		if err := f.ix.FindPrefixMatches(qs[(i+k)%len(qs)], &s, &out); err != nil {
			failed = err
		}
	})
	if failed != nil {
		b.Fatal(failed)
	}
	reportPercentiles(b, lat)
}

// BenchLinearProbe measures one linear query per op, then its percentiles.
func (f *SearchFixture) BenchLinearProbe(b *testing.B, qs [][]ckf.LocalBlockHash) {
	var depths [ckf.LaneCount]uint32
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		f.linear.Depths(qs[i%len(qs)], &depths)
		i++
	}
	b.StopTimer()
	reportPercentiles(b, TimeEach(max(len(qs), f.cfg.PercentileSamples), func(k int) {
		f.linear.Depths(qs[(i+k)%len(qs)], &depths)
	}))
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

// underIngestMaxTime bounds QueryUnderIngest's timed pass.
const underIngestMaxTime = 5 * time.Second

// underIngestMinTime is the least the queries beside the ingest run, so
// the ingest rate is measured over many deltas: a few small queries on a
// fast machine would end the pass within a delta or two, and the rate
// would be one delta over a millisecond.
const underIngestMinTime = 50 * time.Millisecond

// UnderIngest is a query latency measured while a pool applies deltas.
type UnderIngest struct {
	// TargetImagesPerSec is the paced submission rate, ImagesPerSec the
	// rate the pool admitted over the pass.
	TargetImagesPerSec float64 `json:"target_images_per_sec"`
	ImagesPerSec       float64 `json:"images_per_sec"`
	// Queries is the number of timed queries behind P50Ns and P99Ns: only
	// queries that found all 16 lanes ready before and after count, since
	// a query over fewer lanes does less work.
	Queries int     `json:"queries"`
	P50Ns   float64 `json:"p50_ns"`
	P99Ns   float64 `json:"p99_ns"`
	// Retirements counts the lanes the pool retired during the pass
	// because it fell behind (a lagging or saturated lane is retired, as
	// in production); each was re-armed with a new lease and a snapshot
	// and the pass went on. DegradedQueries were left out of the
	// percentiles because a lane was not ready, and AllReadyFraction is the
	// share of the timed queries' time every lane was ready. A pass with
	// retirements measured a pool that did not keep pace: its figures say
	// so rather than abort the run.
	Retirements      int     `json:"retirements"`
	Faults           int     `json:"faults"`
	DegradedQueries  int     `json:"degraded_queries"`
	AllReadyFraction float64 `json:"all_ready_fraction"`
}

// KeptPace reports whether the pool applied the whole pass without a
// retirement or fault.
func (u UnderIngest) KeptPace() bool { return u.Retirements == 0 && u.Faults == 0 }

// retiredLane reports whether err is the pool retiring or having retired
// lane because it fell behind or its lease is gone, which re-arming (a new
// lease and a snapshot) recovers from; pool closure and worker failure are
// not.
func retiredLane(err error, lane int) bool {
	var ie *consumer.IngestionError
	if !errors.As(err, &ie) || ie.Lane != lane {
		return false
	}
	switch ie.Kind {
	case consumer.ErrLaneRetired, consumer.ErrDirtyToAppliedAgeExceeded, consumer.ErrSaturated,
		consumer.ErrOutstandingImageLimit, consumer.ErrControlTimeout, consumer.ErrAwaitingSnapshot:
		return true
	}
	return false
}

// rearmLane gives lane a lease of the next assignment epoch and installs a
// snapshot of its current words at sequence seq, so deltas resume from seq.
// buf is reused across calls (one lane's words).
func (f *SearchFixture) rearmLane(lane int, seq uint64, buf *[]uint64) error {
	f.leases[lane].AssignmentEpoch++
	id, lease := f.ids[lane], f.leases[lane]
	if err := f.pool.Assign(id, lease); err != nil {
		return fmt.Errorf("bench: re-arm lane %d: assign: %w", lane, err)
	}
	if *buf == nil {
		*buf = make([]uint64, f.cfg.Buckets)
	}
	words := *buf
	for bk := range words {
		words[bk] = f.linear.words[uint64(bk)*ckf.LaneCount+uint64(lane)].Load()
	}
	out, err := f.pool.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: seq, Buckets: words})
	if err != nil {
		return fmt.Errorf("bench: re-arm lane %d: snapshot: %w", lane, err)
	}
	if out.Kind != consumer.OutcomeSnapshotInstalled {
		return fmt.Errorf("bench: re-arm lane %d: snapshot outcome %v", lane, out)
	}
	return nil
}

// underIngestRing is the number of deltas QueryUnderIngest cycles through.
// The pool reads a submitted delta's images until a worker applies it, and
// it admits at most WorkerCount × QueueCapacity deltas (4 × 256) beyond the
// ones being applied, so a slot is free again 4,096 submissions later.
const underIngestRing = 4096

// QueryUnderIngest times the first n queries one by one (cycling, so a
// set larger than the caches stays cold) on one goroutine while another
// submits 64-image deltas round-robin over the 16 lanes to the fixture's
// consumer.Pool, paced at rate images/s, and the pool's workers apply
// them. Each image rewrites its bucket's current word, so answers do not
// change but every store and cache-line invalidation is real. A lane the
// pool retires for falling behind is re-armed and counted (see
// UnderIngest); any other refused submission ends the pass with an error.
func (f *SearchFixture) QueryUnderIngest(n, samples int, rate float64) (UnderIngest, error) {
	if rate <= 0 {
		return UnderIngest{}, fmt.Errorf("bench: ingest rate %v must be positive", rate)
	}
	qs := f.queries[:min(max(n, 1), len(f.queries))]
	const perDelta = 64
	stop := make(chan struct{})
	done := make(chan error, 1)
	var images int64
	var elapsed time.Duration
	retirements := 0
	ring := make([]ckf.Delta, underIngestRing)
	for i := range ring {
		ring[i].Images = make([]ckf.BucketImage, perDelta)
	}
	var seq [ckf.LaneCount]uint64
	for l := range seq {
		seq[l] = 1 // the snapshot's sequence
	}
	go func() {
		rng := rand.New(rand.NewPCG(9, 9))
		var laneBuf []uint64
		t0 := time.Now()
		for i := 0; ; i++ {
			select {
			case <-stop:
				elapsed = time.Since(t0)
				done <- nil
				return
			default:
			}
			// Pace: submit while behind the target, else yield briefly.
			if float64(images) >= rate*time.Since(t0).Seconds() {
				time.Sleep(20 * time.Microsecond)
				continue
			}
			l := i % ckf.LaneCount
			d := &ring[i%len(ring)]
			d.Identity, d.Lease = f.ids[l], f.leases[l]
			d.BaseSequence, d.Sequence = seq[l], seq[l]+1
			// Distinct buckets: a random run of perDelta consecutive ones.
			start := rng.Uint64N(f.cfg.Buckets - perDelta)
			for k := range d.Images {
				bk := start + uint64(k)
				d.Images[k] = ckf.BucketImage{Bucket: bk, Value: f.linear.words[bk*ckf.LaneCount+uint64(l)].Load()}
			}
			if err := f.pool.SubmitDelta(d); err != nil {
				if retiredLane(err, l) {
					// The deltas the retirement discarded never
					// applied, but each rewrote its bucket's current
					// word: the snapshot at seq[l] is the lane.
					retirements++
					if err = f.rearmLane(l, seq[l], &laneBuf); err == nil {
						continue
					}
				}
				elapsed = time.Since(t0)
				done <- fmt.Errorf("bench: ingest lane %d: %w", l, err)
				return
			}
			seq[l]++
			images += perDelta
		}
	}()
	var s consumer.QueryScratch
	var out consumer.QueryResult
	var failed error
	// Bounded in time as well as count: under the race detector every
	// atomic shared with the ingesting goroutine is tracked, and the pass
	// would otherwise take minutes.
	total := max(samples, len(qs))
	lat := make(Latencies, 0, total)
	begin := time.Now()
	deadline := begin.Add(underIngestMaxTime)
	degraded := 0
	var readyTime, loopTime time.Duration
	for k := 0; (k < total || time.Since(begin) < underIngestMinTime) && (k < 100 || time.Now().Before(deadline)); k++ {
		before := f.ix.ReadyLanes()
		t0 := time.Now()
		if err := f.ix.FindPrefixMatches(qs[k%len(qs)], &s, &out); err != nil && !errors.Is(err, consumer.ErrUnavailable) {
			failed = err
		}
		d := time.Since(t0)
		loopTime += d
		if before != ckf.LaneMask || f.ix.ReadyLanes() != ckf.LaneMask {
			degraded++
			continue
		}
		readyTime += d
		lat = append(lat, d)
	}
	slices.Sort(lat)
	close(stop)
	if err := <-done; err != nil {
		return UnderIngest{}, err
	}
	if failed != nil {
		return UnderIngest{}, failed
	}
	faults := 0
	for {
		if _, ok := f.pool.TryRecvFault(); !ok {
			break
		}
		faults++
	}
	// A lane the watchdog retired after the last submission to it is
	// re-armed here, so the next pass starts with every lane ready.
	var laneBuf []uint64
	for l := range ckf.LaneCount {
		if f.ix.ReadyLanes()&(1<<l) != 0 {
			continue
		}
		retirements++
		if err := f.rearmLane(l, seq[l], &laneBuf); err != nil {
			return UnderIngest{}, err
		}
	}
	// With no query over all 16 lanes (a pool lagging all the time),
	// Queries is 0 and so are the percentiles.
	var p50, p99 float64
	if len(lat) > 0 {
		p50, p99 = float64(lat.Quantile(0.5).Nanoseconds()), float64(lat.Quantile(0.99).Nanoseconds())
	}
	allReady := 0.0
	if loopTime > 0 {
		allReady = readyTime.Seconds() / loopTime.Seconds()
	}
	return UnderIngest{
		TargetImagesPerSec: rate,
		ImagesPerSec:       float64(images) / elapsed.Seconds(),
		Queries:            len(lat),
		P50Ns:              p50,
		P99Ns:              p99,
		Retirements:        retirements,
		Faults:             faults,
		DegradedQueries:    degraded,
		AllReadyFraction:   allReady,
	}, nil
}
