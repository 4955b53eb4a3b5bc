package consumer_test

import (
	"errors"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
)

// firstStoreWord is the bucket-0 word after storing full hash 41 into
// ckf.NewConfig(128) with the default seed (spec §18.6).
const firstStoreWord uint64 = 0x0000000000001A3A

func checkFirstPublication(t *testing.T, p *pipeline) {
	t.Helper()
	result, err := p.apply(stored(1, 41))
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if result.FirstError != nil {
		t.Fatalf("FirstError = %v, want nil", result.FirstError)
	}
	if p := result.Publication; p == nil || p.Kind != producer.EmitPublished || p.Sequence != 1 || p.ImageCount != 1 {
		t.Fatalf("Publication = %+v, want published sequence 1 with 1 image", p)
	}
	terminal, _, err := p.drain()
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if terminal != 1 {
		t.Fatalf("terminal sequence = %d, want 1", terminal)
	}
	if p.indexer().ReadyLanes() != 1<<seedLane {
		t.Fatalf("ReadyLanes = %#x, want lane %d", p.indexer().ReadyLanes(), seedLane)
	}
	if got := p.indexer().LaneWords(seedLane, nil)[0]; got != firstStoreWord {
		t.Fatalf("consumer bucket 0 = %#016x, want %#016x", got, firstStoreWord)
	}
	assertLaneConverged(t, p)
}

func TestActorPublicationAndExactConsumerDrainConverge(t *testing.T) {
	p := buildPipeline(t, verbatim(ckf.NewConfig(128)))
	checkFirstPublication(t, p)
}

func TestActorPublicationAndExactConsumerDrainConvergeCanonical(t *testing.T) {
	p := buildPipeline(t, ckf.NewConfig(128))
	checkFirstPublication(t, p)

	// A root block's canonical hash is its tokens_hash, so the one-block
	// query 41 hits lane 3 at depth 1.
	var s consumer.QueryScratch
	var out consumer.QueryResult
	if err := p.indexer().FindPrefixMatches([]ckf.LocalBlockHash{41}, &s, &out); err != nil {
		t.Fatalf("FindPrefixMatches: %v", err)
	}
	if m := out.Lanes[seedLane]; !m.Present || m.Depth != 1 {
		t.Fatalf("lane %d match = %+v, want depth 1", seedLane, m)
	}
}

func TestDeliveryFailureFencesPublisherAndRecoversWithNewLeaseSnapshot(t *testing.T) {
	p := buildPipeline(t, verbatim(ckf.NewConfig(128)))
	p.sink.failNext = true
	_, err := p.apply(stored(1, 41))
	if !errors.Is(err, producer.ErrEnqueue) || !errors.Is(err, errInjectedDeliveryFailure) {
		t.Fatalf("apply error = %v, want enqueue(injected failure)", err)
	}
	if reason, ok := p.pub.FenceReason(); !ok || reason != producer.FenceDeliveryUncertain {
		t.Fatalf("fence = %v/%v, want delivery_uncertain", reason, ok)
	}
	// A fenced publisher refuses later batches; the state still applies them.
	_, err = p.apply(stored(2, 42))
	if !errors.Is(err, producer.ErrFenced) || !errors.Is(err, producer.FenceDeliveryUncertain) {
		t.Fatalf("apply while fenced = %v, want fenced(delivery_uncertain)", err)
	}

	attempts, sequence, err := p.recoverSnapshot(8)
	if err != nil {
		t.Fatalf("recoverSnapshot: %v", err)
	}
	if attempts != 1 || sequence != 0 || p.lease.AssignmentEpoch != 2 {
		t.Fatalf("recovery = %d attempts, sequence %d, epoch %d; want 1, 0, 2", attempts, sequence, p.lease.AssignmentEpoch)
	}
	if lease, _ := p.pub.Lease(); lease != p.lease {
		t.Fatalf("Lease = %+v, want %+v", lease, p.lease)
	}
	if _, fenced := p.pub.FenceReason(); fenced {
		t.Fatal("publisher still fenced after recovery")
	}
	if p.indexer().ReadyLanes() == 0 {
		t.Fatal("no ready lane after recovery")
	}
	if _, _, err := p.drain(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	// The snapshot carried both events the publisher could not deliver.
	assertLaneConverged(t, p)
	if !p.state.Contains(41) || !p.state.Contains(42) {
		t.Fatal("producer lost an event applied while delivery failed")
	}
}

func TestMissingFinalDeltaIsDetectedByTerminalMarkerAndRecovers(t *testing.T) {
	p := buildPipeline(t, verbatim(ckf.NewConfig(128)))
	p.sink.dropNext = true
	if _, err := p.apply(stored(1, 41)); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if p.sink.dropNext {
		t.Fatal("the drop hook was not consumed")
	}
	_, out, err := p.drain()
	if !errors.Is(err, errDrainOutcome) || out.Kind != consumer.OutcomeLaneDeactivated ||
		out.Fault.Kind != consumer.FaultTerminalSequenceMismatch {
		t.Fatalf("drain = %v, want not acknowledged (LaneDeactivated(terminal mismatch))", err)
	}
	if p.indexer().ReadyLanes() != 0 {
		t.Fatal("lane still ready after the terminal mismatch")
	}
	if _, err := p.apply(stored(2, 42)); !errors.Is(err, errAdmissionClosed) {
		t.Fatalf("apply after failed drain = %v, want AdmissionClosed", err)
	}

	_, sequence, err := p.recoverSnapshot(8)
	if err != nil {
		t.Fatalf("recoverSnapshot: %v", err)
	}
	if sequence != 1 {
		t.Fatalf("recovery sequence = %d, want 1", sequence)
	}
	if _, _, err := p.drain(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	assertLaneConverged(t, p)
	if _, err := p.apply(stored(2, 42)); err != nil {
		t.Fatalf("apply after recovery: %v", err)
	}
}

func TestCapacityOmissionDoesNotRetireTheConsumerLane(t *testing.T) {
	cfg := verbatim(ckf.NewConfig(1))
	cfg.MaxKicks = 1
	p := buildPipeline(t, cfg)
	var omitted uint64
	var inserted []uint64
	for hash := uint64(1); hash <= 64; hash++ {
		result, err := p.apply(stored(hash, hash))
		if err != nil {
			t.Fatalf("apply(%d): %v", hash, err)
		}
		if errors.Is(result.FirstError, ckf.ErrCapacityExhausted) {
			omitted = hash
			break
		}
		if result.FirstError != nil {
			t.Fatalf("apply(%d) FirstError = %v", hash, result.FirstError)
		}
		inserted = append(inserted, hash)
	}
	if omitted != 9 {
		t.Fatalf("first capacity omission at hash %d, want 9 (spec §18.6)", omitted)
	}
	if p.indexer().ReadyLanes() == 0 {
		t.Fatal("capacity omission retired the lane")
	}
	if _, fenced := p.pub.FenceReason(); fenced {
		t.Fatal("capacity omission fenced the publisher")
	}
	if _, _, err := p.drain(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	assertLaneConverged(t, p)

	unknown, err := p.apply(removed(100, omitted))
	if err != nil {
		t.Fatalf("remove omitted: %v", err)
	}
	if unknown.UnknownRemovals != 1 {
		t.Fatalf("UnknownRemovals = %d, want 1 (1.4.0 leaves omissions untracked)", unknown.UnknownRemovals)
	}
	if p.indexer().ReadyLanes() == 0 {
		t.Fatal("unknown removal retired the lane")
	}
	for i, hash := range inserted {
		if _, err := p.apply(removed(101+uint64(i), hash)); err != nil {
			t.Fatalf("remove %d: %v", hash, err)
		}
	}
	result, err := p.apply(stored(200, omitted))
	if err != nil || result.FirstError != nil {
		t.Fatalf("re-store omitted = %+v, %v; want success", result, err)
	}
	if _, _, err := p.drain(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	assertLaneConverged(t, p)
}

func TestFlushAndDrainFollowTheStreamSequence(t *testing.T) {
	p := buildPipeline(t, verbatim(ckf.NewConfig(128)))
	if p, err := p.flush(); err != nil || p != nil {
		t.Fatalf("Flush on an empty window = %+v, %v; want nothing", p, err)
	}
	// With cadence 1 both events publish; the removal's delta carries the
	// reverted word, so the terminal sequence is 2.
	if _, err := p.apply(stored(1, 41)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.apply(removed(2, 41)); err != nil {
		t.Fatal(err)
	}
	terminal, _, err := p.drain()
	if err != nil || terminal != 2 {
		t.Fatalf("drain = %d, %v; want terminal 2", terminal, err)
	}
	if p.pub.LastSequence() != 2 {
		t.Fatalf("ProducerSequence = %d, want 2", p.pub.LastSequence())
	}
	assertLaneConverged(t, p)
}
