package adapter_test

import (
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/adapter"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// The seed's fixture: lane 3, consumer 17, DC 11, incarnation 19, layout 1
// and explicit domain digests [7;16]/[13;16].
const (
	seedLane        = 3
	seedConsumer    = ckf.ConsumerInstanceID(17)
	seedDc          = ckf.DcID(11)
	seedIncarnation = 19
)

func fixtureDomain() ckf.IndexerDomainID {
	var sem, scope ckf.Digest16
	for i := range sem {
		sem[i], scope[i] = 7, 13
	}
	return ckf.IndexerDomainID{
		CacheSemantics: ckf.CacheSemanticsID{Digest: sem, Source: ckf.SourceExplicit},
		RoutingScope:   ckf.RoutingScopeID{Digest: scope, Source: ckf.SourceExplicit},
	}
}

// laneSpec configures one lane of a shared pool.
type laneSpec struct {
	lane uint8
	dc   ckf.DcID
}

// poolOptions are the timing knobs of a test pool. The seed uses 1s for the
// control timeout and the dirty-to-applied age; tests here allow more so a
// loaded -race run cannot retire a lane behind a slow worker.
type poolOptions struct {
	workers       int
	queue         int
	imagesPerLane uint64 // multiple of bucket_count
}

func seedPoolOptions() poolOptions { return poolOptions{workers: 1, queue: 32, imagesPerLane: 64} }

// newSharedPool builds a manifest with one pool per spec, its indexer and an
// ingestion pool closed at cleanup.
func newSharedPool(t testing.TB, cfg ckf.Config, opts poolOptions, lanes ...laneSpec) *consumer.Pool {
	t.Helper()
	format, err := cfg.Format()
	if err != nil {
		t.Fatalf("Format: %v", err)
	}
	var table [ckf.LaneCount]*ckf.PoolID
	for _, l := range lanes {
		table[l.lane] = &ckf.PoolID{Domain: fixtureDomain(), Dc: l.dc}
	}
	manifest, err := consumer.NewManifest(seedConsumer, fixtureDomain(), format, table)
	if err != nil {
		t.Fatalf("NewManifest: %v", err)
	}
	indexer, err := consumer.NewIndexer(manifest, cfg.Search)
	if err != nil {
		t.Fatalf("NewIndexer: %v", err)
	}
	pool, err := consumer.NewPool(indexer, consumer.PoolConfig{
		WorkerCount:                 opts.workers,
		QueueCapacity:               opts.queue,
		ControlTimeout:              10 * time.Second,
		MaxOutstandingImagesPerLane: format.BucketCount * opts.imagesPerLane,
		OutstandingImageBoundSet:    true,
		MaxDirtyToAppliedAge:        time.Minute,
	})
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	return pool
}

func fixtureIdentity(t testing.TB, cfg ckf.Config, dc ckf.DcID) ckf.ProducerIdentity {
	t.Helper()
	format, err := cfg.Format()
	if err != nil {
		t.Fatalf("Format: %v", err)
	}
	return ckf.ProducerIdentity{
		Pool:                ckf.PoolID{Domain: fixtureDomain(), Dc: dc},
		ProducerIncarnation: seedIncarnation,
		LayoutGeneration:    1,
		Format:              format,
	}
}

func fixtureLease(lane uint8, epoch uint64) ckf.LaneLease {
	return ckf.LaneLease{ConsumerInstance: seedConsumer, PhysicalLane: lane, AssignmentEpoch: epoch}
}

// buildAdapter is the seed's build_adapter: cadence 1, one lane, and a
// recovery policy of 8 attempts without backoff.
func buildAdapter(t testing.TB, cfg ckf.Config) *adapter.LocalAdapter {
	t.Helper()
	cfg.PublishEveryNEvents = 1
	pool := newSharedPool(t, cfg, seedPoolOptions(), laneSpec{lane: seedLane, dc: seedDc})
	a, err := adapter.New(cfg, fixtureIdentity(t, cfg, seedDc), fixtureLease(seedLane, 1), pool,
		adapter.RecoveryPolicy{MaxAttempts: 8})
	if err != nil {
		t.Fatalf("adapter.New: %v", err)
	}
	return a
}

func verbatim(cfg ckf.Config) ckf.Config {
	cfg.Mode = ckf.HashModeVerbatim
	return cfg
}

// stored is the seed's fixture event: one parentless block whose block_hash
// and tokens_hash are both hash, from worker 1 rank 0. Its canonical hash is
// hash too (a root block's canonical hash is its tokens_hash).
func stored(eventID, hash uint64) *routerevent.RouterEvent {
	return &routerevent.RouterEvent{WorkerID: 1, Event: routerevent.KvCacheEvent{EventID: eventID,
		Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{
			Blocks: []routerevent.StoredBlock{{BlockHash: hash, TokensHash: hash}}}}}}
}

func removed(eventID, hash uint64) *routerevent.RouterEvent {
	return &routerevent.RouterEvent{WorkerID: 1, Event: routerevent.KvCacheEvent{EventID: eventID,
		Data: routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{BlockHashes: []uint64{hash}}}}}
}

// assertLaneConverged checks that the consumer's words of lane equal the
// producer's lane.
func assertLaneConverged(t testing.TB, a *adapter.LocalAdapter) {
	t.Helper()
	lease, ok := a.Lease()
	if !ok {
		t.Fatal("adapter holds no lease")
	}
	got := a.Indexer().LaneWords(int(lease.PhysicalLane), nil)
	want := a.State().Words()
	if len(got) != len(want) {
		t.Fatalf("lane %d: consumer has %d words, producer %d", lease.PhysicalLane, len(got), len(want))
	}
	diffs := 0
	for b := range want {
		if got[b] != want[b] {
			if diffs < 5 {
				t.Errorf("lane %d bucket %d: consumer %#016x, producer %#016x", lease.PhysicalLane, b, got[b], want[b])
			}
			diffs++
		}
	}
	if diffs != 0 {
		t.Fatalf("lane %d: %d of %d words differ", lease.PhysicalLane, diffs, len(want))
	}
}
