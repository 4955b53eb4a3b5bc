package consumer

import (
	"errors"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// fixture mirrors the seed's: one configured lane (3) with its ingestor
// assigned at epoch 1.
type fixture struct {
	t           *testing.T
	indexer     *Indexer
	ingestor    *LaneIngestor
	identity    ckf.ProducerIdentity
	lease       ckf.LaneLease
	bucketCount uint64
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	format := ixFormat(t, 64)
	consumer := ckf.ConsumerInstanceID(17)
	domain := ixDomain(31, 29, ckf.SourceExplicit, ckf.SourceExplicit)
	pool := ckf.PoolID{Domain: domain, Dc: 41}
	var lanes [ckf.LaneCount]*ckf.PoolID
	lanes[3] = &pool
	ix := defaultIndexer(t, consumer, domain, format, lanes)
	ing, err := ix.ClaimLane(3)
	if err != nil {
		t.Fatal(err)
	}
	identity := ckf.ProducerIdentity{Pool: pool, ProducerIncarnation: 43, LayoutGeneration: 47, Format: format}
	lease := ckf.LaneLease{ConsumerInstance: consumer, PhysicalLane: 3, AssignmentEpoch: 1}
	if err := ing.Assign(identity, lease); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, indexer: ix, ingestor: ing, identity: identity, lease: lease, bucketCount: format.BucketCount}
}

func (f *fixture) snapshotFilled(sequence uint64, count uint64, value uint64) *ckf.Snapshot {
	buckets := make([]uint64, count)
	for i := range buckets {
		buckets[i] = value
	}
	return &ckf.Snapshot{Identity: f.identity, Lease: f.lease, Sequence: sequence, Buckets: buckets}
}

func (f *fixture) install(sequence uint64) {
	f.t.Helper()
	got := f.ingestor.InstallSnapshot(f.snapshotFilled(sequence, f.bucketCount, 0))
	if want := (IngestOutcome{Kind: OutcomeSnapshotInstalled, Sequence: sequence}); got != want {
		f.t.Fatalf("install(%d) = %v, want %v", sequence, got, want)
	}
}

func (f *fixture) delta(base, sequence uint64, images ...ckf.BucketImage) *ckf.Delta {
	return &ckf.Delta{Identity: f.identity, Lease: f.lease, BaseSequence: base, Sequence: sequence, Images: images}
}

func (f *fixture) bucket(b uint64) uint64 { return f.indexer.table.LoadImage(b, f.ingestor.Lane()) }

func (f *fixture) wantOutcome(got, want IngestOutcome) {
	f.t.Helper()
	if got != want {
		f.t.Fatalf("outcome = %v, want %v", got, want)
	}
}

func (f *fixture) wantReady(mask uint16) {
	f.t.Helper()
	if got := f.indexer.ReadyLanes(); got != mask {
		f.t.Fatalf("ready lanes = %#x, want %#x", got, mask)
	}
}

func (f *fixture) wantBucket(b, value uint64) {
	f.t.Helper()
	if got := f.bucket(b); got != value {
		f.t.Fatalf("bucket %d = %#x, want %#x", b, got, value)
	}
}

func (f *fixture) wantDisposition(want ckf.FailureDisposition) {
	f.t.Helper()
	got, ok := f.ingestor.LastFailureDisposition()
	if !ok || got != want {
		f.t.Fatalf("disposition = %v (%v), want %v", got, ok, want)
	}
}

func deactivated(fault LaneFault) IngestOutcome {
	return IngestOutcome{Kind: OutcomeLaneDeactivated, Fault: fault}
}

func TestValidationScratchScalesWithBitmapWordsNotBucketCount(t *testing.T) {
	f := newFixture(t)
	words := (f.bucketCount + 63) / 64
	if got := uint64(len(f.ingestor.validationWords)); got != words {
		t.Fatalf("validation words = %d, want %d", got, words)
	}
	if c := uint64(cap(f.ingestor.touched)); c >= f.bucketCount {
		t.Fatalf("touched capacity %d is not below the bucket count %d", c, f.bucketCount)
	}
}

func TestSnapshotActivatesAndAssignmentClearsReadinessBeforeReplacement(t *testing.T) {
	f := newFixture(t)
	f.install(9)
	f.wantReady(1 << 3)
	var s QueryScratch
	var out QueryResult
	if err := f.indexer.FindPrefixMatches(nil, &s, &out); err != nil {
		t.Fatal(err)
	}

	captured := f.indexer.ReadyLanes()
	replacement := f.identity
	replacement.ProducerIncarnation++
	replacement.LayoutGeneration++
	lease := ckf.LaneLease{ConsumerInstance: f.lease.ConsumerInstance, PhysicalLane: 3, AssignmentEpoch: 2}
	if err := f.ingestor.Assign(replacement, lease); err != nil {
		t.Fatal(err)
	}

	f.wantReady(0)
	if err := f.indexer.FindPrefixMatches(nil, &s, &out); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("query after reassignment: %v, want ErrUnavailable", err)
	}
	if err := f.indexer.findWithCapturedReady(0, captured, &s, &out); err != nil {
		t.Fatalf("query with the captured mask: %v", err)
	}
	if out.CapturedReadyLanes != 1<<3 {
		t.Fatalf("captured = %#x, want %#x", out.CapturedReadyLanes, 1<<3)
	}
}

func TestValidDeltaAdvancesWorkerLocalSequence(t *testing.T) {
	f := newFixture(t)
	f.install(7)
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(7, 8, ckf.BucketImage{Bucket: 1, Value: 0x1234})),
		IngestOutcome{Kind: OutcomeDeltaApplied, Sequence: 8, Images: 1})
	if seq, ok := f.ingestor.InstalledSequence(); !ok || seq != 8 {
		t.Fatalf("installed sequence = %d, %v; want 8", seq, ok)
	}
	f.wantBucket(1, 0x1234)
}

func TestStaleSameLeaseSnapshotCannotRollBackActiveLane(t *testing.T) {
	f := newFixture(t)
	f.install(7)
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(7, 8, ckf.BucketImage{Bucket: 1, Value: 0x1234})),
		IngestOutcome{Kind: OutcomeDeltaApplied, Sequence: 8, Images: 1})
	f.wantOutcome(f.ingestor.InstallSnapshot(f.snapshotFilled(7, f.bucketCount, 0xFFFF)),
		IngestOutcome{Kind: OutcomeIgnoredStaleOrDuplicate, InstalledSequence: 8})
	if seq, ok := f.ingestor.InstalledSequence(); !ok || seq != 8 {
		t.Fatalf("installed sequence = %d, %v; want 8", seq, ok)
	}
	f.wantBucket(1, 0x1234)
	f.wantReady(1 << 3)
}

func TestUnexpectedForwardSnapshotDeactivatesActiveLaneWithoutWrites(t *testing.T) {
	f := newFixture(t)
	f.install(7)
	f.wantOutcome(f.ingestor.InstallSnapshot(f.snapshotFilled(8, f.bucketCount, 0xFFFF)),
		deactivated(LaneFault{Kind: FaultSnapshotWhileReady, InstalledSequence: 7, SnapshotSequence: 8}))
	f.wantBucket(0, 0)
	f.wantReady(0)
	f.wantDisposition(ckf.PointConsumerGapOrMalformedBeforeWrite.Disposition())
}

func TestQueryResultPreservesPoolAndCapturedMask(t *testing.T) {
	f := newFixture(t)
	f.install(7)
	var s QueryScratch
	var out QueryResult
	if err := f.indexer.FindPrefixMatches(nil, &s, &out); err != nil {
		t.Fatal(err)
	}
	if out.CapturedReadyLanes != 1<<3 {
		t.Fatalf("captured = %#x", out.CapturedReadyLanes)
	}
	want := LaneMatch{Present: true, Lane: 3, Pool: f.identity.Pool, Depth: 0}
	if out.Lanes[3] != want {
		t.Fatalf("lane 3 = %+v, want %+v", out.Lanes[3], want)
	}
	for l, m := range out.Lanes {
		if l != 3 && m.Present {
			t.Fatalf("lane %d present in %+v", l, out)
		}
	}
}

func TestDuplicateAndStaleSequencesAreIgnoredWithoutWrites(t *testing.T) {
	f := newFixture(t)
	f.install(4)
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(3, 4, ckf.BucketImage{Bucket: 0, Value: 77})),
		IngestOutcome{Kind: OutcomeIgnoredStaleOrDuplicate, InstalledSequence: 4})
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(1, 2, ckf.BucketImage{Bucket: 0, Value: 88})),
		IngestOutcome{Kind: OutcomeIgnoredStaleOrDuplicate, InstalledSequence: 4})
	if _, ok := f.ingestor.LastFailureDisposition(); ok {
		t.Fatal("ignored traffic recorded a failure disposition")
	}
	f.wantBucket(0, 0)
	f.wantReady(1 << 3)
}

func TestForwardGapDeactivatesLane(t *testing.T) {
	f := newFixture(t)
	f.install(4)
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(5, 6, ckf.BucketImage{Bucket: 0, Value: 1})),
		deactivated(LaneFault{Kind: FaultBaseSequenceMismatch, Expected: 4, Actual: 5}))
	f.wantReady(0)
	if _, ok := f.ingestor.InstalledSequence(); ok {
		t.Fatal("installed sequence reported while not ready")
	}
	f.wantBucket(0, 0)
	f.wantDisposition(ckf.FailureDisposition{
		Domain: ckf.DomainConsumerLane, Commit: ckf.CommitKnownUnchanged,
		RecoveryDomain: ckf.DomainConsumerLane, Action: ckf.ActionDeactivateAndSnapshot,
	})
	// Deactivation keeps the assignment: deltas now await a snapshot.
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(4, 5, ckf.BucketImage{Bucket: 0, Value: 1})),
		IngestOutcome{Kind: OutcomeAwaitingSnapshot})
}

func TestInactiveSnapshotValidationFailureIsRetryableOnSameAssignment(t *testing.T) {
	f := newFixture(t)
	got := f.ingestor.InstallSnapshot(f.snapshotFilled(7, f.bucketCount-1, 99))
	f.wantOutcome(got, deactivated(LaneFault{Kind: FaultInvalidSnapshotBucketCount, Expected: f.bucketCount, Actual: f.bucketCount - 1}))
	f.wantDisposition(ckf.FailureDisposition{
		Domain: ckf.DomainConsumerLane, Commit: ckf.CommitKnownUnchanged,
		RecoveryDomain: ckf.DomainConsumerLane, Action: ckf.ActionRetrySnapshot,
	})
	f.wantBucket(0, 0)

	f.install(7)
	if _, ok := f.ingestor.LastFailureDisposition(); ok {
		t.Fatal("a successful install kept the failure disposition")
	}
	f.wantReady(1 << 3)
}

func TestNoncontiguousSequenceDeactivatesLane(t *testing.T) {
	f := newFixture(t)
	f.install(4)
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(4, 7, ckf.BucketImage{Bucket: 0, Value: 1})),
		deactivated(LaneFault{Kind: FaultNonContiguousSequence, Base: 4, Sequence: 7}))
	f.wantReady(0)
}

func TestMalformedImagesAreRejectedBeforeAnyWrite(t *testing.T) {
	f := newFixture(t)
	f.install(1)
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(1, 2, ckf.BucketImage{Bucket: 0, Value: 11}, ckf.BucketImage{Bucket: 0, Value: 22})),
		deactivated(LaneFault{Kind: FaultDuplicateImageIndex, Bucket: 0}))
	f.wantBucket(0, 0)

	f.install(2)
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(2, 3, ckf.BucketImage{Bucket: 1, Value: 33}, ckf.BucketImage{Bucket: f.bucketCount, Value: 44})),
		deactivated(LaneFault{Kind: FaultInvalidImageIndex, Bucket: f.bucketCount}))
	f.wantBucket(1, 0)

	// The scratch is clean afterwards: the same buckets validate again.
	f.install(3)
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(3, 4, ckf.BucketImage{Bucket: 0, Value: 5}, ckf.BucketImage{Bucket: 1, Value: 6})),
		IngestOutcome{Kind: OutcomeDeltaApplied, Sequence: 4, Images: 2})
	for i, w := range f.ingestor.validationWords {
		if w != 0 {
			t.Fatalf("validation word %d left set: %#x", i, w)
		}
	}
}

func TestEmptyCurrentStreamDeltaIsMalformed(t *testing.T) {
	f := newFixture(t)
	f.install(1)
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(1, 2)), deactivated(LaneFault{Kind: FaultEmptyDelta}))
	f.wantReady(0)
}

func TestWrongIdentityForCurrentLeaseDeactivatesLane(t *testing.T) {
	f := newFixture(t)
	f.install(1)
	d := f.delta(1, 2, ckf.BucketImage{Bucket: 0, Value: 1})
	d.Identity.ProducerIncarnation++
	f.wantOutcome(f.ingestor.ApplyDelta(d), deactivated(LaneFault{Kind: FaultWrongIdentity}))
	f.wantReady(0)
	f.wantBucket(0, 0)
}

func TestSupersededLeaseIsIgnoredWithoutInvalidatingReplacement(t *testing.T) {
	f := newFixture(t)
	f.install(1)
	old := f.delta(1, 2, ckf.BucketImage{Bucket: 0, Value: 1})
	replacement := ckf.LaneLease{ConsumerInstance: f.lease.ConsumerInstance, PhysicalLane: 3, AssignmentEpoch: 2}
	if err := f.ingestor.Assign(f.identity, replacement); err != nil {
		t.Fatal(err)
	}
	snap := &ckf.Snapshot{Identity: f.identity, Lease: replacement, Sequence: 10, Buckets: make([]uint64, f.bucketCount)}
	f.wantOutcome(f.ingestor.InstallSnapshot(snap), IngestOutcome{Kind: OutcomeSnapshotInstalled, Sequence: 10})

	f.wantOutcome(f.ingestor.ApplyDelta(old), IngestOutcome{Kind: OutcomeIgnoredForeignLease})
	if seq, ok := f.ingestor.InstalledSequence(); !ok || seq != 10 {
		t.Fatalf("installed sequence = %d, %v; want 10", seq, ok)
	}
	f.wantReady(1 << 3)
	f.wantBucket(0, 0)
}

func TestMalformedSnapshotDeactivatesBeforeWriting(t *testing.T) {
	f := newFixture(t)
	f.install(1)
	f.wantOutcome(f.ingestor.InstallSnapshot(f.snapshotFilled(2, f.bucketCount-1, 99)),
		deactivated(LaneFault{Kind: FaultInvalidSnapshotBucketCount, Expected: f.bucketCount, Actual: f.bucketCount - 1}))
	f.wantBucket(0, 0)
	f.wantReady(0)
	f.wantDisposition(ckf.PointConsumerGapOrMalformedBeforeWrite.Disposition())
}

func TestWrongIdentitySnapshotForCurrentLeaseDeactivatesBeforeWriting(t *testing.T) {
	f := newFixture(t)
	f.install(1)
	snap := f.snapshotFilled(2, f.bucketCount, 99)
	snap.Identity.LayoutGeneration++
	f.wantOutcome(f.ingestor.InstallSnapshot(snap), deactivated(LaneFault{Kind: FaultWrongIdentity}))
	f.wantBucket(0, 0)
	f.wantReady(0)
}

func TestTerminalDrainDetectsDroppedFinalDelta(t *testing.T) {
	f := newFixture(t)
	f.install(7)
	f.wantOutcome(f.ingestor.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 8}),
		deactivated(LaneFault{Kind: FaultTerminalSequenceMismatch, Expected: 8, Actual: 7, HasActual: true}))
	f.wantReady(0)
	// Not ready any more: the actual sequence is now absent.
	f.wantOutcome(f.ingestor.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 8}),
		deactivated(LaneFault{Kind: FaultTerminalSequenceMismatch, Expected: 8}))
}

func TestTerminalDrainAcknowledgesExactSequenceOnly(t *testing.T) {
	f := newFixture(t)
	f.install(7)
	f.wantOutcome(f.ingestor.CompleteDrain(ckf.DrainMarker{Lease: f.lease, ExpectedSequence: 7}),
		IngestOutcome{Kind: OutcomeDrainAcknowledged, InstalledSequence: 7})
	f.wantReady(1 << 3)
}

func TestAssignmentEpochMustIncrease(t *testing.T) {
	f := newFixture(t)
	want := AssignmentError{Kind: ErrStaleAssignmentEpoch, MinimumExclusive: 1, Actual: 1}
	check := func() {
		t.Helper()
		err := f.ingestor.Assign(f.identity, f.lease)
		var ae *AssignmentError
		if !errors.As(err, &ae) || *ae != want {
			t.Fatalf("Assign = %v, want %v", err, &want)
		}
		if !errors.Is(err, ErrStaleAssignmentEpoch) {
			t.Fatalf("errors.Is(%v, ErrStaleAssignmentEpoch) = false", err)
		}
	}
	check()
	f.ingestor.Retire()
	check()
}

func TestLaneCanOnlyHaveOneIngestionOwner(t *testing.T) {
	f := newFixture(t)
	_, err := f.indexer.ClaimLane(3)
	var be *BuildError
	if !errors.As(err, &be) || be.Kind != ErrLaneAlreadyClaimed || be.Lane != 3 {
		t.Fatalf("ClaimLane(3) = %v, want LaneAlreadyClaimed{3}", err)
	}
}

// Go additions beyond the seed's tests.

func TestAssignmentValidationOrder(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name   string
		mutate func(*ckf.ProducerIdentity, *ckf.LaneLease)
		want   AssignmentError
	}{
		{"consumer", func(_ *ckf.ProducerIdentity, l *ckf.LaneLease) { l.ConsumerInstance = 5; l.PhysicalLane = 4 },
			AssignmentError{Kind: ErrWrongConsumerInstance, Expected: 17, Actual: 5}},
		{"lane", func(_ *ckf.ProducerIdentity, l *ckf.LaneLease) { l.PhysicalLane = 4 },
			AssignmentError{Kind: ErrWrongPhysicalLane, Expected: 3, Actual: 4}},
		{"owner", func(id *ckf.ProducerIdentity, _ *ckf.LaneLease) { id.Pool.Dc = 7; id.Format.Seed++ },
			AssignmentError{Kind: ErrWrongLaneOwner, Lane: 3}},
		{"format", func(id *ckf.ProducerIdentity, _ *ckf.LaneLease) { id.Format.Seed++ },
			AssignmentError{Kind: ErrWrongFormat}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, lease := f.identity, f.lease
			lease.AssignmentEpoch = 100
			c.mutate(&id, &lease)
			err := f.ingestor.Assign(id, lease)
			var ae *AssignmentError
			if !errors.As(err, &ae) || *ae != c.want {
				t.Fatalf("Assign = %v, want %v", err, &c.want)
			}
			if !errors.Is(err, c.want.Kind) {
				t.Fatalf("errors.Is(%v, %v) = false", err, c.want.Kind)
			}
		})
	}
}

func TestReleaseGivesTheLaneBackAndIsIdempotent(t *testing.T) {
	f := newFixture(t)
	f.install(3)
	f.ingestor.Release()
	f.wantReady(0)
	second, err := f.indexer.ClaimLane(3)
	if err != nil {
		t.Fatalf("ClaimLane after Release: %v", err)
	}
	f.ingestor.Release() // must not clear the new owner's claim
	if _, err := f.indexer.ClaimLane(3); !errors.Is(err, ErrLaneAlreadyClaimed) {
		t.Fatalf("second claim: %v, want ErrLaneAlreadyClaimed", err)
	}
	if err := f.ingestor.Assign(f.identity, ckf.LaneLease{ConsumerInstance: 17, PhysicalLane: 3, AssignmentEpoch: 9}); !errors.Is(err, ErrIngestorReleased) {
		t.Fatalf("Assign after Release: %v, want ErrIngestorReleased", err)
	}
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(3, 4, ckf.BucketImage{Bucket: 0, Value: 1})), IngestOutcome{Kind: OutcomeIgnoredForeignLease})
	second.Release()
}

func TestGuardedSnapshotRefusalLeavesLaneUnready(t *testing.T) {
	f := newFixture(t)
	calls := 0
	got := f.ingestor.InstallSnapshotGuarded(f.snapshotFilled(5, f.bucketCount, 0x77), func() bool {
		calls++
		// The guard runs after every word is stored and before readiness.
		if f.bucket(f.bucketCount-1) != 0x77 || f.indexer.ReadyLanes() != 0 {
			t.Error("guard ran before the words were stored or after activation")
		}
		return false
	})
	f.wantOutcome(got, IngestOutcome{Kind: OutcomeAwaitingSnapshot})
	if calls != 1 {
		t.Fatalf("guard called %d times", calls)
	}
	f.wantReady(0)
	f.wantBucket(0, 0x77)
	if _, ok := f.ingestor.InstalledSequence(); ok {
		t.Fatal("refused snapshot reported an installed sequence")
	}

	got = f.ingestor.InstallSnapshotGuarded(f.snapshotFilled(6, f.bucketCount, 0x78), func() bool { return true })
	f.wantOutcome(got, IngestOutcome{Kind: OutcomeSnapshotInstalled, Sequence: 6})
	f.wantReady(1 << 3)
}

func TestDeltaAfterMaximumSequenceIsStale(t *testing.T) {
	f := newFixture(t)
	f.install(^uint64(0))
	// sequence <= installed is stale; craft a delta whose base matches but
	// whose sequence cannot follow.
	f.wantOutcome(f.ingestor.ApplyDelta(f.delta(^uint64(0), ^uint64(0), ckf.BucketImage{Bucket: 0, Value: 1})),
		IngestOutcome{Kind: OutcomeIgnoredStaleOrDuplicate, InstalledSequence: ^uint64(0)})
	f.wantReady(1 << 3)
}

func TestLaneFaultAndOutcomeStrings(t *testing.T) {
	cases := map[string]string{
		deactivated(LaneFault{Kind: FaultTerminalSequenceMismatch, Expected: 8, Actual: 7, HasActual: true}).String(): "lane_deactivated(terminal_sequence_mismatch(expected=8, actual=7))",
		deactivated(LaneFault{Kind: FaultTerminalSequenceMismatch, Expected: 8}).String():                             "lane_deactivated(terminal_sequence_mismatch(expected=8, actual=none))",
		IngestOutcome{Kind: OutcomeDeltaApplied, Sequence: 3, Images: 2}.String():                                     "delta_applied(sequence=3, images=2)",
		LaneFault{Kind: FaultDuplicateImageIndex, Bucket: 4}.String():                                                 "duplicate_image_index(bucket=4)",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// tableWords copies every word of the table (all lanes).
func tableWords(ix *Indexer) []uint64 {
	out := make([]uint64, len(ix.table.words))
	for i := range ix.table.words {
		out[i] = ix.table.words[i].Load()
	}
	return out
}

func wantTableUnchanged(t *testing.T, ix *Indexer, before []uint64, what string) {
	t.Helper()
	for i, w := range tableWords(ix) {
		if w != before[i] {
			t.Fatalf("%s wrote word %d: %#x -> %#x", what, i, before[i], w)
		}
	}
}

// seededFixture is a fixture whose lane holds non-zero words at sequence 5.
func seededFixture(t *testing.T) *fixture {
	f := newFixture(t)
	snap := f.snapshotFilled(5, f.bucketCount, 0)
	for i := range snap.Buckets {
		snap.Buckets[i] = uint64(i)*0x0101 + 1
	}
	f.wantOutcome(f.ingestor.InstallSnapshot(snap), IngestOutcome{Kind: OutcomeSnapshotInstalled, Sequence: 5})
	return f
}

// FuzzApplyDelta: random deltas against an active lane never panic, and a
// delta that is not applied leaves every table word unchanged.
func FuzzApplyDelta(f *testing.F) {
	f.Add(uint64(5), uint64(6), uint8(0), []byte{1, 0, 0, 0, 0, 0, 0, 0, 7})
	f.Add(uint64(5), uint64(6), uint8(0), []byte{1, 0, 0, 0, 0, 0, 0, 0, 7, 1, 0, 0, 0, 0, 0, 0, 0, 8})
	f.Add(uint64(5), uint64(6), uint8(0), []byte{32, 0, 0, 0, 0, 0, 0, 0, 7})
	f.Add(uint64(4), uint64(6), uint8(1), []byte{})
	f.Add(uint64(6), uint64(7), uint8(2), []byte{3, 0, 0, 0, 0, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, base, sequence uint64, flags uint8, raw []byte) {
		fx := seededFixture(t)
		d := fx.delta(base, sequence)
		if flags&1 != 0 {
			d.Identity.ProducerIncarnation++
		}
		if flags&2 != 0 {
			d.Lease.AssignmentEpoch++
		}
		for len(raw) >= 9 {
			var bucket uint64
			for i := range 8 {
				bucket |= uint64(raw[i]) << (8 * i)
			}
			if flags&4 == 0 {
				bucket %= fx.bucketCount + 2 // mostly in range, sometimes just past it
			}
			d.Images = append(d.Images, ckf.BucketImage{Bucket: bucket, Value: uint64(raw[8]) * 0x1_0001})
			raw = raw[9:]
		}
		before := tableWords(fx.indexer)
		out := fx.ingestor.ApplyDelta(d)
		if out.Kind != OutcomeDeltaApplied {
			wantTableUnchanged(t, fx.indexer, before, out.String())
			if out.Kind == OutcomeLaneDeactivated && fx.indexer.ReadyLanes() != 0 {
				t.Fatalf("%v left the lane ready", out)
			}
			return
		}
		if out.Sequence != 6 || out.Images != len(d.Images) {
			t.Fatalf("applied %v for delta %d->%d with %d images", out, base, sequence, len(d.Images))
		}
		for _, img := range d.Images {
			if got := fx.bucket(img.Bucket); got != img.Value {
				t.Fatalf("bucket %d = %#x, want %#x", img.Bucket, got, img.Value)
			}
		}
		for i, w := range fx.ingestor.validationWords {
			if w != 0 {
				t.Fatalf("validation word %d left set", i)
			}
		}
	})
}

// FuzzInstallSnapshot: random snapshots against an active (or deactivated)
// lane never panic; a snapshot that is not installed leaves every table word
// unchanged, and an installed one is exactly the lane's content.
func FuzzInstallSnapshot(f *testing.F) {
	f.Add(uint64(6), int16(0), uint8(0), uint8(3))
	f.Add(uint64(6), int16(0), uint8(8), uint8(3))
	f.Add(uint64(4), int16(0), uint8(0), uint8(3))
	f.Add(uint64(6), int16(-1), uint8(8), uint8(3))
	f.Add(uint64(6), int16(5), uint8(1), uint8(3))
	f.Fuzz(func(t *testing.T, sequence uint64, lengthDelta int16, flags uint8, fill uint8) {
		fx := seededFixture(t)
		if flags&8 != 0 {
			// Deactivate first: a snapshot is then the recovery path.
			fx.ingestor.CompleteDrain(ckf.DrainMarker{Lease: fx.lease, ExpectedSequence: 0})
		}
		n := int64(fx.bucketCount) + int64(lengthDelta)%64
		n = max(n, 0)
		snap := fx.snapshotFilled(sequence, uint64(n), 0)
		for i := range snap.Buckets {
			snap.Buckets[i] = uint64(fill)<<16 | uint64(i)
		}
		if flags&1 != 0 {
			snap.Identity.LayoutGeneration++
		}
		if flags&2 != 0 {
			snap.Lease.AssignmentEpoch++
		}
		before := tableWords(fx.indexer)
		out := fx.ingestor.InstallSnapshot(snap)
		if out.Kind != OutcomeSnapshotInstalled {
			wantTableUnchanged(t, fx.indexer, before, out.String())
			return
		}
		if out.Sequence != sequence || fx.indexer.ReadyLanes() != 1<<3 {
			t.Fatalf("installed %v, ready %#x", out, fx.indexer.ReadyLanes())
		}
		for b, w := range snap.Buckets {
			if got := fx.bucket(uint64(b)); got != w {
				t.Fatalf("bucket %d = %#x, want %#x", b, got, w)
			}
		}
	})
}
