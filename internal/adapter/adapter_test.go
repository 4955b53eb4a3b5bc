package adapter_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/adapter"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
)

// firstStoreWord is the bucket-0 word after storing full hash 41 into
// ckf.NewConfig(128) with the default seed (spec §18.6).
const firstStoreWord uint64 = 0x0000000000001A3A

func checkFirstPublication(t *testing.T, a *adapter.LocalAdapter) {
	t.Helper()
	result, err := a.ApplyEvent(stored(1, 41))
	if err != nil {
		t.Fatalf("ApplyEvent: %v", err)
	}
	if result.FirstError != nil {
		t.Fatalf("FirstError = %v, want nil", result.FirstError)
	}
	if p := result.Publication; p == nil || p.Kind != producer.EmitPublished || p.Sequence != 1 || p.ImageCount != 1 {
		t.Fatalf("Publication = %+v, want published sequence 1 with 1 image", p)
	}
	report, err := a.ExactConsumerDrain()
	if err != nil {
		t.Fatalf("ExactConsumerDrain: %v", err)
	}
	if report.TerminalSequence != 1 {
		t.Fatalf("TerminalSequence = %d, want 1", report.TerminalSequence)
	}
	if a.Indexer().ReadyLanes() != 1<<seedLane {
		t.Fatalf("ReadyLanes = %#x, want lane %d", a.Indexer().ReadyLanes(), seedLane)
	}
	if got := a.Indexer().LaneWords(seedLane, nil)[0]; got != firstStoreWord {
		t.Fatalf("consumer bucket 0 = %#016x, want %#016x", got, firstStoreWord)
	}
	assertLaneConverged(t, a)
}

func TestActorPublicationAndExactConsumerDrainConverge(t *testing.T) {
	a := buildAdapter(t, verbatim(ckf.NewConfig(128)))
	checkFirstPublication(t, a)
}

func TestActorPublicationAndExactConsumerDrainConvergeCanonical(t *testing.T) {
	a := buildAdapter(t, ckf.NewConfig(128))
	checkFirstPublication(t, a)

	// A root block's canonical hash is its tokens_hash, so the one-block
	// query 41 hits lane 3 at depth 1.
	var s consumer.QueryScratch
	var out consumer.QueryResult
	if err := a.Indexer().FindPrefixMatches([]ckf.LocalBlockHash{41}, &s, &out); err != nil {
		t.Fatalf("FindPrefixMatches: %v", err)
	}
	if m := out.Lanes[seedLane]; !m.Present || m.Depth != 1 {
		t.Fatalf("lane %d match = %+v, want depth 1", seedLane, m)
	}
}

func TestDeliveryFailureFencesPublisherAndRecoversWithNewLeaseSnapshot(t *testing.T) {
	a := buildAdapter(t, verbatim(ckf.NewConfig(128)))
	a.FailNextDeltaDelivery()
	_, err := a.ApplyEvent(stored(1, 41))
	var ae *adapter.Error
	if !errors.As(err, &ae) || ae.Kind != adapter.ErrDeltaDelivery || !errors.Is(err, adapter.ErrInjectedDeliveryFailure) {
		t.Fatalf("ApplyEvent error = %v, want DeltaDelivery(injected failure)", err)
	}
	if reason, ok := a.PublisherFenceReason(); !ok || reason != producer.FenceDeliveryUncertain {
		t.Fatalf("fence = %v/%v, want delivery_uncertain", reason, ok)
	}
	// A fenced publisher refuses later batches; the state still applies them.
	_, err = a.ApplyEvent(stored(2, 42))
	if !errors.Is(err, adapter.ErrPublisherFenced) || !errors.Is(err, producer.FenceDeliveryUncertain) {
		t.Fatalf("ApplyEvent while fenced = %v, want PublisherFenced(delivery_uncertain)", err)
	}

	recovery, err := a.RecoverSnapshot()
	if err != nil {
		t.Fatalf("RecoverSnapshot: %v", err)
	}
	if recovery.Attempts != 1 || recovery.Sequence != 0 || recovery.Lease.AssignmentEpoch != 2 {
		t.Fatalf("recovery = %+v, want 1 attempt, sequence 0, epoch 2", recovery)
	}
	if lease, _ := a.Lease(); lease != recovery.Lease {
		t.Fatalf("Lease = %+v, want %+v", lease, recovery.Lease)
	}
	if _, fenced := a.PublisherFenceReason(); fenced {
		t.Fatal("publisher still fenced after recovery")
	}
	if a.Indexer().ReadyLanes() == 0 {
		t.Fatal("no ready lane after recovery")
	}
	if _, err := a.ExactConsumerDrain(); err != nil {
		t.Fatalf("ExactConsumerDrain: %v", err)
	}
	// The snapshot carried both events the publisher could not deliver.
	assertLaneConverged(t, a)
	if !a.State().Contains(41) || !a.State().Contains(42) {
		t.Fatal("producer lost an event applied while delivery failed")
	}
}

func TestMissingFinalDeltaIsDetectedByTerminalMarkerAndRecovers(t *testing.T) {
	a := buildAdapter(t, verbatim(ckf.NewConfig(128)))
	a.DropNextDeltaDelivery()
	if _, err := a.ApplyEvent(stored(1, 41)); err != nil {
		t.Fatalf("ApplyEvent: %v", err)
	}
	if a.DeliveryFaultPending() {
		t.Fatal("the drop hook was not consumed")
	}
	_, err := a.ExactConsumerDrain()
	var ae *adapter.Error
	if !errors.As(err, &ae) || ae.Kind != adapter.ErrConsumerDrainOutcome ||
		ae.Outcome.Kind != consumer.OutcomeLaneDeactivated ||
		ae.Outcome.Fault.Kind != consumer.FaultTerminalSequenceMismatch {
		t.Fatalf("ExactConsumerDrain = %v, want ConsumerDrainOutcome(LaneDeactivated(terminal mismatch))", err)
	}
	if a.Indexer().ReadyLanes() != 0 {
		t.Fatal("lane still ready after the terminal mismatch")
	}
	if _, err := a.ApplyEvent(stored(2, 42)); !errors.Is(err, adapter.ErrAdmissionClosed) {
		t.Fatalf("ApplyEvent after failed drain = %v, want AdmissionClosed", err)
	}

	recovery, err := a.RecoverSnapshot()
	if err != nil {
		t.Fatalf("RecoverSnapshot: %v", err)
	}
	if recovery.Sequence != 1 {
		t.Fatalf("recovery sequence = %d, want 1", recovery.Sequence)
	}
	if _, err := a.ExactConsumerDrain(); err != nil {
		t.Fatalf("ExactConsumerDrain: %v", err)
	}
	assertLaneConverged(t, a)
	if _, err := a.ApplyEvent(stored(2, 42)); err != nil {
		t.Fatalf("ApplyEvent after recovery: %v", err)
	}
}

func TestCapacityOmissionDoesNotRetireTheConsumerLane(t *testing.T) {
	cfg := verbatim(ckf.NewConfig(1))
	cfg.MaxKicks = 1
	a := buildAdapter(t, cfg)
	var omitted uint64
	var inserted []uint64
	for hash := uint64(1); hash <= 64; hash++ {
		result, err := a.ApplyEvent(stored(hash, hash))
		if err != nil {
			t.Fatalf("ApplyEvent(%d): %v", hash, err)
		}
		if errors.Is(result.FirstError, ckf.ErrCapacityExhausted) {
			omitted = hash
			break
		}
		if result.FirstError != nil {
			t.Fatalf("ApplyEvent(%d) FirstError = %v", hash, result.FirstError)
		}
		inserted = append(inserted, hash)
	}
	if omitted != 9 {
		t.Fatalf("first capacity omission at hash %d, want 9 (spec §18.6)", omitted)
	}
	if a.Indexer().ReadyLanes() == 0 {
		t.Fatal("capacity omission retired the lane")
	}
	if _, fenced := a.PublisherFenceReason(); fenced {
		t.Fatal("capacity omission fenced the publisher")
	}
	if _, err := a.ExactConsumerDrain(); err != nil {
		t.Fatalf("ExactConsumerDrain: %v", err)
	}
	assertLaneConverged(t, a)

	unknown, err := a.ApplyEvent(removed(100, omitted))
	if err != nil {
		t.Fatalf("remove omitted: %v", err)
	}
	if unknown.UnknownRemovals != 1 {
		t.Fatalf("UnknownRemovals = %d, want 1 (1.4.0 leaves omissions untracked)", unknown.UnknownRemovals)
	}
	if a.Indexer().ReadyLanes() == 0 {
		t.Fatal("unknown removal retired the lane")
	}
	for i, hash := range inserted {
		if _, err := a.ApplyEvent(removed(101+uint64(i), hash)); err != nil {
			t.Fatalf("remove %d: %v", hash, err)
		}
	}
	result, err := a.ApplyEvent(stored(200, omitted))
	if err != nil || result.FirstError != nil {
		t.Fatalf("re-store omitted = %+v, %v; want success", result, err)
	}
	if _, err := a.ExactConsumerDrain(); err != nil {
		t.Fatalf("ExactConsumerDrain: %v", err)
	}
	assertLaneConverged(t, a)
}

func TestRecoveryPolicyExposesBackoffWithoutSleeping(t *testing.T) {
	policy := adapter.DefaultRecoveryPolicy()
	if policy.MaxAttempts != 8 || policy.InitialBackoff != 200*time.Millisecond {
		t.Fatalf("default policy = %+v", policy)
	}
	for _, tc := range []struct {
		n    int
		want time.Duration
		ok   bool
	}{
		{0, 0, false},
		{-1, 0, false},
		{1, 200 * time.Millisecond, true},
		{2, 400 * time.Millisecond, true},
		{7, 200 * time.Millisecond << 6, true},
		{8, 0, false},
		{9, 0, false},
	} {
		got, ok := policy.DelayAfterFailure(tc.n)
		if got != tc.want || ok != tc.ok {
			t.Errorf("DelayAfterFailure(%d) = %v, %v; want %v, %v", tc.n, got, ok, tc.want, tc.ok)
		}
	}

	// Saturation: the factor stops at u32::MAX, the product at the largest
	// Duration.
	wide := adapter.RecoveryPolicy{MaxAttempts: math.MaxInt, InitialBackoff: time.Nanosecond}
	if got, _ := wide.DelayAfterFailure(40); got != time.Duration(math.MaxUint32) {
		t.Errorf("factor saturation = %v, want %v", got, time.Duration(math.MaxUint32))
	}
	wide.InitialBackoff = time.Hour
	if got, _ := wide.DelayAfterFailure(40); got != time.Duration(math.MaxInt64) {
		t.Errorf("product saturation = %v, want max duration", got)
	}
}

func TestNewRejectsInvalidConstruction(t *testing.T) {
	cfg := verbatim(ckf.NewConfig(128))
	pool := newSharedPool(t, cfg, seedPoolOptions(), laneSpec{lane: seedLane, dc: seedDc})
	id := fixtureIdentity(t, cfg, seedDc)
	policy := adapter.RecoveryPolicy{MaxAttempts: 1}

	_, err := adapter.New(cfg, id, fixtureLease(seedLane, 1), pool, adapter.RecoveryPolicy{})
	if !errors.Is(err, adapter.ErrZeroRecoveryAttempts) {
		t.Errorf("zero attempts: %v", err)
	}
	bad := cfg
	bad.MaxKicks = -1
	if _, err = adapter.New(bad, id, fixtureLease(seedLane, 1), pool, policy); !errors.Is(err, adapter.ErrProducer) ||
		!errors.Is(err, ckf.ErrInvalidMaxKicks) {
		t.Errorf("bad config: %v", err)
	}
	other := id
	other.Format.Seed++
	if _, err = adapter.New(cfg, other, fixtureLease(seedLane, 1), pool, policy); !errors.Is(err, adapter.ErrProducerFormatMismatch) {
		t.Errorf("format mismatch: %v", err)
	}
	wrongConsumer := fixtureLease(seedLane, 1)
	wrongConsumer.ConsumerInstance++
	_, err = adapter.New(cfg, id, wrongConsumer, pool, policy)
	var ie *consumer.IngestionError
	if !errors.Is(err, adapter.ErrInitialAssignment) || !errors.As(err, &ie) ||
		!errors.Is(err, consumer.ErrWrongConsumerInstance) {
		t.Errorf("wrong consumer: %v", err)
	}
	if pool.Indexer().ReadyLanes() != 0 {
		t.Error("a rejected construction activated the lane")
	}
	if _, err := adapter.New(cfg, id, fixtureLease(seedLane, 1), pool, policy); err != nil {
		t.Fatalf("valid construction after rejections: %v", err)
	}
}

func TestRecoveryExhaustionReportsTheLastAttempt(t *testing.T) {
	t.Run("pool closed", func(t *testing.T) {
		a := buildAdapter(t, verbatim(ckf.NewConfig(128)))
		if err := a.Pool().Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		_, err := a.RecoverSnapshot()
		var ae *adapter.Error
		if !errors.As(err, &ae) || ae.Kind != adapter.ErrRecoveryExhausted || ae.Attempts != 8 {
			t.Fatalf("RecoverSnapshot = %v, want RecoveryExhausted after 8 attempts", err)
		}
		if !errors.Is(err, adapter.ErrAssignment) || !errors.Is(err, consumer.ErrPoolClosed) {
			t.Fatalf("last attempt = %v, want Assignment(pool closed)", err)
		}
		// Every attempt used a fresh epoch; none was installed.
		if _, err := a.ApplyEvent(stored(1, 41)); !errors.Is(err, adapter.ErrAdmissionClosed) {
			t.Fatalf("ApplyEvent after exhausted recovery = %v, want AdmissionClosed", err)
		}
	})
	t.Run("epoch exhausted", func(t *testing.T) {
		cfg := verbatim(ckf.NewConfig(128))
		pool := newSharedPool(t, cfg, seedPoolOptions(), laneSpec{lane: seedLane, dc: seedDc})
		a, err := adapter.New(cfg, fixtureIdentity(t, cfg, seedDc), fixtureLease(seedLane, math.MaxUint64), pool,
			adapter.RecoveryPolicy{MaxAttempts: 3})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		_, err = a.RecoverSnapshot()
		var ae *adapter.Error
		if !errors.As(err, &ae) || ae.Kind != adapter.ErrRecoveryExhausted || ae.Attempts != 3 ||
			!errors.Is(err, adapter.ErrAssignmentEpochExhausted) {
			t.Fatalf("RecoverSnapshot = %v, want RecoveryExhausted(AssignmentEpochExhausted) after 3", err)
		}
	})
}

func TestFlushAndDrainFollowTheStreamSequence(t *testing.T) {
	a := buildAdapter(t, verbatim(ckf.NewConfig(128)))
	if p, err := a.Flush(); err != nil || p != nil {
		t.Fatalf("Flush on an empty window = %+v, %v; want nothing", p, err)
	}
	// With cadence 1 both events publish; the removal's delta carries the
	// reverted word, so the terminal sequence is 2.
	if _, err := a.ApplyEvent(stored(1, 41)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ApplyEvent(removed(2, 41)); err != nil {
		t.Fatal(err)
	}
	report, err := a.ExactConsumerDrain()
	if err != nil || report.TerminalSequence != 2 {
		t.Fatalf("ExactConsumerDrain = %+v, %v; want terminal 2", report, err)
	}
	if a.ProducerSequence() != 2 {
		t.Fatalf("ProducerSequence = %d, want 2", a.ProducerSequence())
	}
	assertLaneConverged(t, a)
}
