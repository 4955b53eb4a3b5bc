package bench

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
)

// PoolBenchConfig sizes the ingestion pair.
type PoolBenchConfig struct {
	// ExpectedBlocks sizes every lane (default 1<<16).
	ExpectedBlocks uint64
	// Sets is the number of distinct image sets per lane (default 64).
	Sets int
	// MinImages and MaxImages bound the images per delta (default 16..64).
	MinImages, MaxImages int
}

func (c PoolBenchConfig) withDefaults() PoolBenchConfig {
	if c.ExpectedBlocks == 0 {
		c.ExpectedBlocks = 1 << 16
	}
	if c.Sets == 0 {
		c.Sets = 64
	}
	if c.MinImages == 0 {
		c.MinImages = 16
	}
	if c.MaxImages == 0 {
		c.MaxImages = 64
	}
	return c
}

const poolConsumer = 77

// PoolPair compares deltas submitted by 16 lane goroutines through a
// consumer.Pool (default workers, drained every window) with one goroutine
// applying the same deltas directly with LaneIngestor.ApplyDelta. One op
// is one delta; both report images/s.
func PoolPair(cfg PoolBenchConfig) Pair {
	cfg = cfg.withDefaults()
	var (
		once sync.Once
		fx   *PoolFixture
		err  error
	)
	get := func(b *testing.B) *PoolFixture {
		b.Helper()
		once.Do(func() { fx, err = NewPoolFixture(cfg) })
		if err != nil {
			b.Fatal(err)
		}
		return fx
	}
	return Pair{
		Name:     "pool",
		Subject:  func(b *testing.B) { get(b).BenchPool(b) },
		Baseline: func(b *testing.B) { get(b).BenchDirect(b) },
	}
}

// PoolFixture holds the format, lane identities and the image sets.
type PoolFixture struct {
	format ckf.FormatIdentity
	domain ckf.IndexerDomainID
	pools  [ckf.LaneCount]*ckf.PoolID
	ids    [ckf.LaneCount]ckf.ProducerIdentity
	leases [ckf.LaneCount]ckf.LaneLease
	images [ckf.LaneCount][][]ckf.BucketImage
	// maxImages is the largest delta.
	maxImages int
}

// NewPoolFixture draws every lane's image sets (distinct buckets per set).
func NewPoolFixture(cfg PoolBenchConfig) (*PoolFixture, error) {
	cfg = cfg.withDefaults()
	if cfg.Sets <= 0 || cfg.MinImages <= 0 || cfg.MaxImages < cfg.MinImages {
		return nil, fmt.Errorf("bench: pool config %+v", cfg)
	}
	format, err := ckf.NewConfig(cfg.ExpectedBlocks).Format()
	if err != nil {
		return nil, err
	}
	if uint64(cfg.MaxImages) > format.BucketCount {
		return nil, fmt.Errorf("bench: %d images per delta exceed %d buckets", cfg.MaxImages, format.BucketCount)
	}
	domain, err := ckf.DomainFromName("ckf-bench")
	if err != nil {
		return nil, err
	}
	f := &PoolFixture{format: format, domain: domain, maxImages: cfg.MaxImages}
	rng := rand.New(rand.NewPCG(1, 2))
	for l := range ckf.LaneCount {
		f.pools[l] = &ckf.PoolID{Domain: domain, Dc: ckf.DcID(1000 + l)}
		f.ids[l] = ckf.ProducerIdentity{Pool: *f.pools[l], ProducerIncarnation: 1, LayoutGeneration: 1, Format: format}
		f.leases[l] = ckf.LaneLease{ConsumerInstance: poolConsumer, PhysicalLane: uint8(l), AssignmentEpoch: 1}
		f.images[l] = make([][]ckf.BucketImage, cfg.Sets)
		for s := range cfg.Sets {
			n := cfg.MinImages + rng.IntN(cfg.MaxImages-cfg.MinImages+1)
			seen := make(map[uint64]bool, n)
			set := make([]ckf.BucketImage, 0, n)
			for len(set) < n {
				bk := rng.Uint64N(format.BucketCount)
				if !seen[bk] {
					seen[bk] = true
					set = append(set, ckf.BucketImage{Bucket: bk, Value: rng.Uint64()})
				}
			}
			f.images[l][s] = set
		}
	}
	return f, nil
}

func (f *PoolFixture) newIndexer() (*consumer.Indexer, error) {
	m, err := consumer.NewManifest(poolConsumer, f.domain, f.format, f.pools)
	if err != nil {
		return nil, err
	}
	return consumer.NewIndexer(m, ckf.DefaultPrefixSearchConfig())
}

func (f *PoolFixture) emptySnapshot(l int) *ckf.Snapshot {
	return &ckf.Snapshot{Identity: f.ids[l], Lease: f.leases[l], Buckets: make([]uint64, f.format.BucketCount)}
}

// BenchPool runs b.N deltas spread over 16 submitting goroutines, each
// waiting for a drain every window deltas so no worker queue overflows.
func (f *PoolFixture) BenchPool(b *testing.B) {
	ix, err := f.newIndexer()
	if err != nil {
		b.Fatal(err)
	}
	cfg := consumer.DefaultPoolConfig()
	// Lag is not under test; a loaded 2-core machine may stall a worker.
	cfg.MaxDirtyToAppliedAge = time.Minute
	p, err := consumer.NewPool(ix, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for l := range ckf.LaneCount {
		if err := p.Assign(f.ids[l], f.leases[l]); err != nil {
			b.Fatal(err)
		}
		if out, err := p.InstallSnapshot(f.emptySnapshot(l)); err != nil || out.Kind != consumer.OutcomeSnapshotInstalled {
			b.Fatalf("install lane %d: %v, %v", l, out, err)
		}
	}
	perWorker := make([]int, cfg.WorkerCount)
	for l := range ckf.LaneCount {
		perWorker[ckf.StickyWorker(poolConsumer, uint8(l), cfg.WorkerCount)]++
	}
	// Outstanding images are bounded by one lane (bucket_count) by default.
	window := max(1, min(32, cfg.QueueCapacity/(slices.Max(perWorker)+1), int(f.format.BucketCount)/f.maxImages))

	imgs := make([]int64, ckf.LaneCount)
	errs := make(chan error, ckf.LaneCount)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for l := range ckf.LaneCount {
		wg.Go(func() {
			perLane := b.N / ckf.LaneCount
			if l < b.N%ckf.LaneCount {
				perLane++
			}
			sets := f.images[l]
			d := ckf.Delta{Identity: f.ids[l], Lease: f.leases[l], Sequence: 1}
			for i := range perLane {
				d.Images = sets[i%len(sets)]
				if err := p.SubmitDelta(&d); err != nil {
					errs <- fmt.Errorf("lane %d delta %d: %w", l, i, err)
					return
				}
				imgs[l] += int64(len(d.Images))
				d.BaseSequence++
				d.Sequence = d.BaseSequence + 1
				if (i+1)%window == 0 || i == perLane-1 {
					out, err := p.CompleteDrain(ckf.DrainMarker{Lease: f.leases[l], ExpectedSequence: d.BaseSequence})
					if err != nil || out.Kind != consumer.OutcomeDrainAcknowledged {
						errs <- fmt.Errorf("lane %d drain at %d: %v, %w", l, d.BaseSequence, out, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	var total int64
	for _, n := range imgs {
		total += n
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "images/s")
}

// BenchDirect applies b.N deltas, round-robin over the 16 lanes, on one
// goroutine straight into the lane ingestors.
func (f *PoolFixture) BenchDirect(b *testing.B) {
	ix, err := f.newIndexer()
	if err != nil {
		b.Fatal(err)
	}
	var ings [ckf.LaneCount]*consumer.LaneIngestor
	var deltas [ckf.LaneCount]ckf.Delta
	for l := range ckf.LaneCount {
		if ings[l], err = ix.ClaimLane(l); err != nil {
			b.Fatal(err)
		}
		if err := ings[l].Assign(f.ids[l], f.leases[l]); err != nil {
			b.Fatal(err)
		}
		if out := ings[l].InstallSnapshot(f.emptySnapshot(l)); out.Kind != consumer.OutcomeSnapshotInstalled {
			b.Fatalf("install lane %d: %v", l, out)
		}
		deltas[l] = ckf.Delta{Identity: f.ids[l], Lease: f.leases[l], Sequence: 1}
	}
	var total int64
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		l := i % ckf.LaneCount
		d := &deltas[l]
		sets := f.images[l]
		d.Images = sets[(i/ckf.LaneCount)%len(sets)]
		if out := ings[l].ApplyDelta(d); out.Kind != consumer.OutcomeDeltaApplied {
			b.Fatalf("lane %d: %v", l, out)
		}
		total += int64(len(d.Images))
		d.BaseSequence++
		d.Sequence = d.BaseSequence + 1
		i++
	}
	b.StopTimer()
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "images/s")
}
