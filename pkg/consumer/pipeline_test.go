package consumer_test

// The producer → pool pipeline in one process (spec §10, LocalCkfAdapter
// upstream): a producer State and a Publisher whose sink submits each delta
// to a shared Pool, with the relay's recovery (a fresh lease and a barrier
// snapshot). The product never composes it, since the relay and the global
// indexer meet over JetStream; it is the fixture that checks the pool's side
// of the producer's contract without NATS.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

var (
	// errInjectedDeliveryFailure is the sink error of failNext.
	errInjectedDeliveryFailure = errors.New("pipeline: injected delta-delivery failure")
	// errAdmissionClosed refuses events after a failed drain or recovery.
	errAdmissionClosed = errors.New("pipeline: admission closed")
	// errDrainOutcome: the pool did not acknowledge the terminal sequence.
	errDrainOutcome = errors.New("pipeline: exact drain not acknowledged")
)

// poolSink is the publisher's Sink. The pool's worker reads Delta.Images
// asynchronously while the State reuses its publication buffer at the next
// cut, so the images are copied first. failNext and dropNext inject one
// fault each: a failed hand-off, or a lost delta reported as delivered.
type poolSink struct {
	pool     *consumer.Pool
	failNext bool
	dropNext bool
}

func (s *poolSink) Enqueue(delta ckf.Delta) error {
	if s.failNext {
		s.failNext = false
		return errInjectedDeliveryFailure
	}
	if s.dropNext {
		s.dropNext = false
		return nil
	}
	delta.Images = slices.Clone(delta.Images)
	return s.pool.SubmitDelta(&delta)
}

// pipeline is one DC lane's producer feeding a shared pool. It has a single
// owner (the test goroutine); several pipelines may share one Pool.
type pipeline struct {
	state  *producer.State
	pub    *producer.Publisher
	sink   *poolSink
	pool   *consumer.Pool
	lease  ckf.LaneLease // the last lease tried: a recovery takes the next epoch
	closed bool
}

// applied is what one event did: the state's first error and unknown
// removals, and the emit outcome when it cut a batch.
type applied struct {
	FirstError      error
	UnknownRemovals uint64
	Publication     *producer.EmitOutcome
}

// newPipeline assigns lease on pool and activates the lane from a barrier
// snapshot of an empty producer.
func newPipeline(t testing.TB, cfg ckf.Config, id ckf.ProducerIdentity, lease ckf.LaneLease, pool *consumer.Pool) *pipeline {
	t.Helper()
	state, err := producer.NewState(cfg)
	if err != nil {
		t.Fatalf("NewState: %v", err)
	}
	sink := &poolSink{pool: pool}
	p := &pipeline{state: state, pub: producer.NewPublisher(id, 0, sink), sink: sink, pool: pool, lease: lease}
	if err := p.install(lease); err != nil {
		t.Fatalf("first snapshot: %v", err)
	}
	return p
}

func (p *pipeline) indexer() *consumer.Indexer { return p.pool.Indexer() }

// apply applies ev and hands any batch it cut to the pool. A publish error
// comes after the state applied the event: the next snapshot covers it.
func (p *pipeline) apply(ev *routerevent.RouterEvent) (applied, error) {
	if p.closed {
		return applied{}, errAdmissionClosed
	}
	out := p.state.ApplyEvent(ev)
	res := applied{FirstError: out.FirstError, UnknownRemovals: out.UnknownRemovals}
	if out.HasPublication() {
		emitted, err := p.pub.Publish(out.Publication)
		if err != nil {
			return applied{}, err
		}
		res.Publication = &emitted
	}
	return res, nil
}

// flush publishes the pending tail; nil when nothing changed.
func (p *pipeline) flush() (*producer.EmitOutcome, error) {
	batch := p.state.Flush()
	if batch.Empty() {
		return nil, nil
	}
	emitted, err := p.pub.Publish(batch)
	if err != nil {
		return nil, err
	}
	return &emitted, nil
}

// drain flushes and waits until the pool applied exactly the terminal
// sequence, which it returns. The marker travels the lane FIFO, so a lost
// final delta is seen: the error is errDrainOutcome and out says what the
// pool returned. Admission stays closed until a drain or a recovery
// succeeds.
func (p *pipeline) drain() (terminal uint64, out consumer.IngestOutcome, err error) {
	p.closed = true
	if _, err := p.flush(); err != nil {
		return 0, out, err
	}
	marker, ok := p.pub.ExactDrainMarker()
	if !ok {
		return 0, out, errors.New("pipeline: exact drain without a lease")
	}
	if out, err = p.pool.CompleteDrain(marker); err != nil {
		return 0, out, err
	}
	if out != (consumer.IngestOutcome{Kind: consumer.OutcomeDrainAcknowledged, InstalledSequence: marker.ExpectedSequence}) {
		return 0, out, fmt.Errorf("%w: %v", errDrainOutcome, out)
	}
	p.closed = false
	return marker.ExpectedSequence, out, nil
}

// recoverSnapshot retires the lease and installs a barrier snapshot of the
// same producer under the next epoch, up to attempts times. It returns the
// 1-based attempt that succeeded and the snapshot's sequence.
func (p *pipeline) recoverSnapshot(attempts int) (attempt int, sequence uint64, err error) {
	p.closed = true
	for attempt = 1; attempt <= attempts; attempt++ {
		if p.lease.AssignmentEpoch == math.MaxUint64 {
			return attempt, 0, errors.New("pipeline: assignment epoch exhausted")
		}
		p.lease.AssignmentEpoch++
		p.pub.RetireLease()
		if err = p.install(p.lease); err == nil {
			p.closed = false
			return attempt, p.pub.LastSequence(), nil
		}
	}
	return attempts, 0, err
}

// install assigns lease and installs a barrier snapshot under it.
func (p *pipeline) install(lease ckf.LaneLease) error {
	if err := p.pool.Assign(p.pub.Identity(), lease); err != nil {
		return err
	}
	snap, err := p.pub.SnapshotAfterBarrier(p.state, lease)
	if err != nil {
		return err
	}
	out, err := p.pool.InstallSnapshot(snap)
	if err != nil {
		return err
	}
	if out != (consumer.IngestOutcome{Kind: consumer.OutcomeSnapshotInstalled, Sequence: snap.Sequence}) {
		return fmt.Errorf("pipeline: snapshot %d not installed: %v", snap.Sequence, out)
	}
	return nil
}

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

// buildPipeline is the seed's build_adapter: cadence 1 and one lane.
func buildPipeline(t testing.TB, cfg ckf.Config) *pipeline {
	t.Helper()
	cfg.PublishEveryNEvents = 1
	pool := newSharedPool(t, cfg, seedPoolOptions(), laneSpec{lane: seedLane, dc: seedDc})
	return newPipeline(t, cfg, fixtureIdentity(t, cfg, seedDc), fixtureLease(seedLane, 1), pool)
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
func assertLaneConverged(t testing.TB, p *pipeline) {
	t.Helper()
	lease, ok := p.pub.Lease()
	if !ok {
		t.Fatal("the publisher holds no lease")
	}
	got := p.indexer().LaneWords(int(lease.PhysicalLane), nil)
	want := p.state.Words()
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
