package producer

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// --- carried-over cadence / refcount / net-reversion assertions (§17.1) ---

func TestFlushPublishesASubthresholdTail(t *testing.T) {
	cfg := verbatimConfig(1024)
	cfg.PublishEveryNEvents = 16
	s := mustState(t, cfg)
	base := s.CopyWords(nil)
	for h := uint64(1); h <= 3; h++ {
		if out := s.ApplyEvent(storedEv(1, 0, h)); out.PublicationBoundary || out.HasPublication() {
			t.Fatalf("event %d published below the cadence", h)
		}
	}
	if !s.HasPendingPublication() {
		t.Fatal("no pending publication before flush")
	}
	b := s.Flush()
	if b.Empty() {
		t.Fatal("flush published nothing")
	}
	applyBatch(base, b)
	if !slices.Equal(base, s.Words()) {
		t.Fatal("flushed tail does not reproduce the lane")
	}
	if s.HasPendingPublication() || !s.Flush().Empty() {
		t.Fatal("second flush is not empty")
	}
}

func TestLifecycleRemovalForcesPendingPublication(t *testing.T) {
	cfg := verbatimConfig(1024)
	cfg.PublishEveryNEvents = 16
	s := mustState(t, cfg)
	base := s.CopyWords(nil)
	s.ApplyEvent(storedEv(1, 0, 5, 6))
	s.ApplyEvent(storedEv(2, 0, 7))
	b, err := s.RemoveRank(Member{1, 0})
	if err != nil || b.Empty() {
		t.Fatalf("RemoveRank = %v, %v", b.Images, err)
	}
	applyBatch(base, b)
	if !slices.Equal(base, s.Words()) || s.HasPendingPublication() {
		t.Fatal("rank removal did not publish the whole pending window")
	}
	s.ApplyEvent(storedEv(2, 1, 8))
	b, err = s.RemoveWorker(2)
	if err != nil {
		t.Fatal(err)
	}
	applyBatch(base, b)
	if !slices.Equal(base, s.Words()) || s.HasPendingPublication() || len(s.Members()) != 0 {
		t.Fatal("worker removal did not publish the pending window")
	}
	for _, w := range base {
		if w != 0 {
			t.Fatal("lane not empty after removing every member")
		}
	}
}

func TestSharedDcHashSurvivesUntilTheFinalOwnerIsRemoved(t *testing.T) {
	s := mustState(t, verbatimConfig(1024))
	s.ApplyEvent(storedEv(1, 0, 99))
	s.ApplyEvent(storedEv(2, 0, 99))
	s.ApplyEvent(storedEv(3, 0, 99))
	for i, w := range []uint64{1, 2} {
		out := s.ApplyEvent(removedEv(w, 0, 99))
		if out.HasPublication() || !s.Contains(99) {
			t.Fatalf("removal %d: published %v, contains %v", i, out.Publication.Images, s.Contains(99))
		}
	}
	out := s.ApplyEvent(removedEv(3, 0, 99))
	if !out.HasPublication() || s.Contains(99) {
		t.Fatal("final owner removal did not clear the hash")
	}
}

func TestClearOneOwnerPreservesAnotherOwnerInTheSameDc(t *testing.T) {
	s := mustState(t, verbatimConfig(1024))
	s.ApplyEvent(storedEv(1, 0, 10, 11))
	s.ApplyEvent(storedEv(2, 0, 11, 12))
	s.ApplyEvent(clearedEv(1, 0))
	if s.MemberBlockCount(Member{1, 0}) != 0 || s.MemberBlockCount(Member{2, 0}) != 2 {
		t.Fatalf("member counts %v", s.MemberCounts())
	}
	if s.Contains(10) && mustOwn(s, 10) || !s.Contains(11) || !s.Contains(12) {
		t.Fatal("clear removed the other owner's blocks")
	}
	if o, _ := s.Ownership(11); o.Refcount != 1 {
		t.Fatalf("refcount of 11 = %d", o.Refcount)
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

func mustOwn(s *State, h uint64) bool { _, ok := s.Ownership(h); return ok }

func TestUnknownRemovalIsIgnoredWhileValidRemovalContinues(t *testing.T) {
	s := mustState(t, verbatimConfig(1024))
	s.ApplyEvent(storedEv(1, 0, 20, 21))
	out := s.ApplyEvent(removedEv(1, 0, 777, 20, 778))
	if out.FirstError != nil || out.UnknownRemovals != 2 {
		t.Fatalf("outcome %+v", out)
	}
	if mustOwn(s, 20) || !mustOwn(s, 21) || s.Stats().UnknownRemovals != 2 {
		t.Fatalf("state after mixed removal: %v", s.Stats())
	}
}

func TestInvalidRepresentationCollisionRemovalDoesNotDeleteTheResidentHash(t *testing.T) {
	s := mustState(t, verbatimConfig(1))
	h1, h2 := findCollision(t, s.addressing())
	s.ApplyEvent(storedEv(1, 0, h1))
	words := s.CopyWords(nil)
	out := s.ApplyEvent(removedEv(1, 0, h2))
	if out.UnknownRemovals != 1 || out.HasPublication() {
		t.Fatalf("colliding removal outcome %+v", out)
	}
	if !s.Contains(h1) || !slices.Equal(words, s.Words()) || !mustOwn(s, h1) {
		t.Fatal("a removal by fingerprint deleted the resident hash")
	}
}

func TestPartialFailurePreservesPendingSuccessesUntilDuePublication(t *testing.T) {
	cfg := verbatimConfig(1)
	cfg.MaxKicks = 1
	cfg.PublishEveryNEvents = 2
	s := mustState(t, cfg)
	base := s.CopyWords(nil)
	hashes := make([]uint64, 12)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	out := s.ApplyEvent(storedEv(1, 0, hashes...))
	if !errors.Is(out.FirstError, ckf.ErrCapacityExhausted) || out.HasPublication() || out.PublicationBoundary {
		t.Fatalf("first event outcome %+v", out)
	}
	held := s.MemberBlockCount(Member{1, 0})
	if held == 0 || held == len(hashes) {
		t.Fatalf("member holds %d of %d", held, len(hashes))
	}
	out = s.ApplyEvent(removedEv(1, 0, 999))
	if !out.PublicationBoundary || !out.HasPublication() {
		t.Fatal("due publication missing")
	}
	applyBatch(base, out.Publication)
	if !slices.Equal(base, s.Words()) {
		t.Fatal("publication lost the successes of the partially failed event")
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

func TestSixteenthEventPublishesFifteenEventTail(t *testing.T) {
	cfg := verbatimConfig(4096)
	cfg.PublishEveryNEvents = 16
	s := mustState(t, cfg)
	base := s.CopyWords(nil)
	for i := uint64(1); i <= 15; i++ {
		if out := s.ApplyEvent(storedEv(1, 0, i*1000+1)); out.PublicationBoundary || out.HasPublication() {
			t.Fatalf("event %d cut the window", i)
		}
	}
	out := s.ApplyEvent(storedEv(1, 0, 16001))
	if !out.PublicationBoundary || !out.HasPublication() {
		t.Fatal("16th event did not publish")
	}
	applyBatch(base, out.Publication)
	if !slices.Equal(base, s.Words()) {
		t.Fatal("16th publication is missing part of the 15-event tail")
	}
	if st := s.Stats(); st.Publications != 1 || st.PendingEvents != 0 || st.EmittedImages != uint64(len(out.Publication.Images)) {
		t.Fatalf("stats %v", st)
	}
	// An ignored (non-device) event does not count towards the cadence.
	for i := range 15 {
		ev := storedEv(1, 0, 50000+uint64(i))
		ev.StorageTier = routerevent.TierHostPinned
		s.ApplyEvent(ev)
	}
	if s.HasPendingPublication() {
		t.Fatal("ignored events counted as pending")
	}
}

// --- §17.2 producer (dc.rs) ---

func TestSharedOwnershipSurvivesNonfinalThenFinalRemoval(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	s.ApplyEvent(storedEv(1, 0, 11))
	s.ApplyEvent(storedEv(2, 0, 11))
	if st := s.Stats(); st.Contributions != 2 || st.UniqueBlocks != 1 {
		t.Fatalf("stats %v", st)
	}
	s.ApplyEvent(removedEv(1, 0, 11))
	if !s.Contains(11) {
		t.Fatal("non-final removal removed the hash")
	}
	s.ApplyEvent(removedEv(2, 0, 11))
	if st := s.Stats(); s.Contains(11) || st.Members != 0 || st.UniqueBlocks != 0 {
		t.Fatalf("after final removal: contains %v, %v", s.Contains(11), st)
	}
}

func TestRankClearPreservesSiblingRankAndAnotherWorkersSharedHash(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	s.ApplyEvent(storedEv(1, 0, 1, 2))
	s.ApplyEvent(storedEv(1, 1, 3))
	s.ApplyEvent(storedEv(2, 0, 1))
	s.ApplyEvent(clearedEv(1, 0))
	want := []MemberCount{{Member{1, 1}, 1}, {Member{2, 0}, 1}}
	if got := s.MemberCounts(); !slices.Equal(got, want) {
		t.Fatalf("members %v want %v", got, want)
	}
	if !s.Contains(1) || !s.Contains(3) || mustOwn(s, 2) || s.Stats().UniqueBlocks != 2 {
		t.Fatalf("after clear: %v", s.Stats())
	}
}

func TestNonDeviceStoreIsIgnoredButUnknownDeviceRemoveIsCounted(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	ev := storedEv(1, 0, 5)
	ev.StorageTier = routerevent.TierHostPinned
	if out := s.ApplyEvent(ev); out.FirstError != nil || out.HasPublication() || out.PublicationBoundary || out.UnknownRemovals != 0 {
		t.Fatalf("host-pinned store outcome %+v", out)
	}
	if s.HasPendingPublication() || s.Stats().UniqueBlocks != 0 {
		t.Fatal("host-pinned store changed state")
	}
	out := s.ApplyEvent(removedEv(1, 0, 5))
	if out.UnknownRemovals != 1 || s.Stats().UnknownRemovals != 1 || !out.PublicationBoundary || out.HasPublication() {
		t.Fatalf("unknown device removal outcome %+v", out)
	}
	// Cleared is processed whatever its tier.
	s.ApplyEvent(storedEv(1, 0, 6))
	cl := clearedEv(1, 0)
	cl.StorageTier = routerevent.TierDisk
	if out := s.ApplyEvent(cl); !out.HasPublication() || mustOwn(s, 6) {
		t.Fatal("non-device clear was ignored")
	}
}

func TestCapacityFailureKeepsSuccessfulBlocksAndExactFilterStateConsistent(t *testing.T) {
	s := mustState(t, verbatimConfig(1))
	hashes := make([]uint64, 32)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	out := s.ApplyEvent(storedEv(1, 0, hashes...))
	if !errors.Is(out.FirstError, ckf.ErrCapacityExhausted) {
		t.Fatalf("first error %v", out.FirstError)
	}
	held := s.MemberBlockCount(Member{1, 0})
	if held == 0 || held == 32 {
		t.Fatalf("member holds %d", held)
	}
	n := 0
	for h, o := range s.ExactBlocks() {
		n++
		if o.Refcount != 1 || !s.Contains(h) {
			t.Fatalf("hash %d: %+v contains %v", h, o, s.Contains(h))
		}
	}
	if n != held {
		t.Fatalf("%d refcount entries, member holds %d", n, held)
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

func TestPublicationWindowSuppressesStoreRemoveNetReversion(t *testing.T) {
	cfg := verbatimConfig(128)
	cfg.PublishEveryNEvents = 2
	s := mustState(t, cfg)
	if out := s.ApplyEvent(storedEv(1, 0, 41)); out.HasPublication() {
		t.Fatal("store published below cadence")
	}
	out := s.ApplyEvent(removedEv(1, 0, 41))
	if !out.PublicationBoundary || out.HasPublication() {
		t.Fatalf("net reversion published %+v", out)
	}
	if st := s.Stats(); st.UniqueBlocks != 0 || st.NetRevertedBuckets != 1 || st.EmittedImages != 0 {
		t.Fatalf("stats %v", st)
	}
}

func TestFailedTransactionalReplacementPreservesPreviousRank(t *testing.T) {
	s := mustState(t, verbatimConfig(1))
	m := Member{1, 0}
	s.ApplyEvent(storedEv(1, 0, 7))
	words := s.CopyWords(nil)
	repl := make([]uint64, 100)
	for i := range repl {
		repl[i] = uint64(1000 + i)
	}
	if _, err := s.ReplaceRank(m, repl); !errors.Is(err, ckf.ErrCapacityExhausted) {
		t.Fatalf("replace err %v", err)
	}
	if got := s.MemberCounts(); !slices.Equal(got, []MemberCount{{m, 1}}) || !mustOwn(s, 7) || !s.Contains(7) {
		t.Fatalf("members %v", got)
	}
	if !slices.Equal(words, s.Words()) || s.HasPendingPublication() {
		t.Fatal("failed replacement changed the lane or window")
	}
}

func TestReplacingOneSharedOwnerPreservesTheOtherWithoutAnIntermediateReset(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	s.ApplyEvent(storedEv(1, 0, 11))
	s.ApplyEvent(storedEv(2, 0, 11))
	_, before, err := s.BarrierSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.ReplaceRank(Member{1, 0}, nil)
	if err != nil || !b.Empty() {
		t.Fatalf("replace = %v, %v", b.Images, err)
	}
	_, after, _ := s.BarrierSnapshot()
	if !slices.Equal(before, after) {
		t.Fatal("snapshot bytes changed")
	}
	if o, _ := s.Ownership(11); o.Refcount != 1 || s.MemberBlockCount(Member{2, 0}) != 1 {
		t.Fatalf("ownership %+v", o)
	}
}

func TestReplacementDiffIncludesThePendingPublicationWindow(t *testing.T) {
	cfg := verbatimConfig(128)
	cfg.PublishEveryNEvents = 16
	s := mustState(t, cfg)
	s.ApplyEvent(storedEv(2, 0, 3))
	_, base, err := s.BarrierSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyEvent(storedEv(1, 0, 41))
	b, err := s.ReplaceRank(Member{1, 0}, []uint64{41})
	if err != nil || b.Empty() {
		t.Fatalf("replace = %v, %v", b.Images, err)
	}
	applyBatch(base, b)
	if !slices.Equal(base, s.Words()) {
		t.Fatal("replacement publication lost the pending window")
	}
}

func TestReplacementSuppressesAPendingChangeThatReturnsToPublishedState(t *testing.T) {
	cfg := verbatimConfig(128)
	cfg.PublishEveryNEvents = 16
	s := mustState(t, cfg)
	_, base, _ := s.BarrierSnapshot()
	s.ApplyEvent(storedEv(1, 0, 41))
	b, err := s.ReplaceRank(Member{1, 0}, nil)
	if err != nil || !b.Empty() {
		t.Fatalf("replace = %v, %v", b.Images, err)
	}
	if !slices.Equal(base, s.Words()) || s.HasPendingPublication() {
		t.Fatal("lane does not match the published state")
	}
}

func TestBatchedRankReplacementRebuildsThePoolOnceTransactionally(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	a, b, c := Member{1, 0}, Member{1, 1}, Member{2, 0}
	s.ApplyEvent(storedEv(1, 0, 1, 2))
	s.ApplyEvent(storedEv(1, 1, 3))
	s.ApplyEvent(storedEv(2, 0, 4))
	_, base, _ := s.BarrierSnapshot()
	batch, err := s.ReplaceRanks(map[Member][]uint64{a: {5, 6}, b: {7}})
	if err != nil {
		t.Fatal(err)
	}
	applyBatch(base, batch)
	if !slices.Equal(base, s.Words()) {
		t.Fatal("one replacement publication does not reproduce the lane")
	}
	want := []MemberCount{{a, 2}, {b, 1}, {c, 1}}
	if got := s.MemberCounts(); !slices.Equal(got, want) {
		t.Fatalf("members %v", got)
	}
	got := slices.Sorted(maps.Keys(maps.Collect(s.ExactBlocks())))
	if !slices.Equal(got, []uint64{4, 5, 6, 7}) {
		t.Fatalf("blocks %v", got)
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

func TestBarrierSnapshotAndAbsoluteBatchesReconstructProducerBytes(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	_, base, _ := s.BarrierSnapshot()
	out := s.ApplyEvent(storedEv(1, 0, 100, 200, 300))
	if !out.HasPublication() {
		t.Fatal("no publication")
	}
	applyBatch(base, out.Publication)
	tail, cur, err := s.BarrierSnapshot()
	if err != nil || !tail.Empty() || !slices.Equal(base, cur) {
		t.Fatalf("reconstruction mismatch (tail %v, err %v)", tail.Images, err)
	}
}

func TestBarrierSnapshotAllocationFailurePreservesDirtyTail(t *testing.T) {
	cfg := verbatimConfig(128)
	cfg.PublishEveryNEvents = 16
	s := mustState(t, cfg)
	s.ApplyEvent(storedEv(1, 0, 41))
	s.failNextSnapshotAlloc = true
	if _, _, err := s.BarrierSnapshot(); !errors.Is(err, ckf.ErrAllocationFailed) {
		t.Fatalf("err %v", err)
	}
	if !s.HasPendingPublication() {
		t.Fatal("failed snapshot lost the dirty tail")
	}
	tail, words, err := s.BarrierSnapshot()
	if err != nil || tail.Empty() || words == nil || s.HasPendingPublication() {
		t.Fatalf("retry: tail %v err %v", tail.Images, err)
	}
}

func TestReplayChurnRequiresLogicalAndMembershipNotByteParity(t *testing.T) {
	a := mustState(t, verbatimConfig(128))
	b := mustState(t, verbatimConfig(128))
	a.ApplyEvent(storedEv(1, 0, 1, 2, 3))
	b.ApplyEvent(storedEv(1, 0, 1, 2, 3))
	b.ApplyEvent(removedEv(1, 0, 2))
	b.ApplyEvent(storedEv(1, 0, 2))
	if !slices.Equal(a.MemberCounts(), b.MemberCounts()) {
		t.Fatal("membership differs")
	}
	if !maps.Equal(maps.Collect(a.ExactBlocks()), maps.Collect(b.ExactBlocks())) {
		t.Fatal("refcounts differ")
	}
	for _, h := range []uint64{1, 2, 3} {
		if !a.Contains(h) || !b.Contains(h) {
			t.Fatalf("hash %d missing", h)
		}
	}
}

func TestRepresentationCollisionRemainsPresentUntilBothOwnersAreRemoved(t *testing.T) {
	s := mustState(t, verbatimConfig(1))
	h1, h2 := findCollision(t, s.addressing())
	s.ApplyEvent(storedEv(1, 0, h1))
	s.ApplyEvent(storedEv(2, 0, h2))
	if st := s.Stats(); st.UniqueBlocks != 2 || st.OccupiedSlots != 2 {
		t.Fatalf("stats %v", st)
	}
	s.ApplyEvent(removedEv(1, 0, h1))
	if !s.Contains(h2) {
		t.Fatal("removing one colliding owner removed the other's copy")
	}
	s.ApplyEvent(removedEv(2, 0, h2))
	if s.Contains(h1) || s.Contains(h2) || s.Stats().OccupiedSlots != 0 {
		t.Fatal("collision still present after both removals")
	}
}

// --- §18.6 vectors (verbatim) ---

func TestProducerVectorStoreOf41PublishesOneImage(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	sink := &recordingSink{}
	p := NewPublisher(testIdentity(s), 0, sink)
	snap, err := p.SnapshotAfterBarrier(s, lease(1))
	if err != nil || snap.Sequence != 0 {
		t.Fatalf("snapshot %v %v", snap, err)
	}
	out := s.ApplyEvent(storedEv(1, 0, 41))
	if st := s.Stats(); st.PhysicalTouches != 1 {
		t.Fatalf("touches %d", st.PhysicalTouches)
	}
	emit, err := p.Publish(out.Publication)
	if err != nil || emit != (EmitOutcome{Kind: EmitPublished, Sequence: 1, ImageCount: 1}) {
		t.Fatalf("emit %+v %v", emit, err)
	}
	d := sink.deltas[0]
	if d.BaseSequence != 0 || d.Sequence != 1 || !slices.Equal(d.Images, []ckf.BucketImage{{Bucket: 0, Value: 0x1A3A}}) {
		t.Fatalf("delta %+v", d)
	}
}

func TestProducerVectorTinyCapacityFitsEightHashes(t *testing.T) {
	cfg := verbatimConfig(1)
	cfg.MaxKicks = 1
	s := mustState(t, cfg)
	for h := uint64(1); h <= 8; h++ {
		if out := s.ApplyEvent(storedEv(1, 0, h)); out.FirstError != nil {
			t.Fatalf("hash %d: %v", h, out.FirstError)
		}
	}
	if out := s.ApplyEvent(storedEv(1, 0, 9)); !errors.Is(out.FirstError, ckf.ErrCapacityExhausted) {
		t.Fatalf("hash 9: %v", out.FirstError)
	}
	if want := []uint64{0x62DCD73D63A2C24A, 0x75706FC208DCBABF}; !slices.Equal(s.Words(), want) {
		t.Fatalf("words %#x want %#x", s.Words(), want)
	}
	// 1.4.0: the omitted block is untracked, so its removal is unknown.
	if out := s.ApplyEvent(removedEv(1, 0, 9)); out.UnknownRemovals != 1 {
		t.Fatalf("omitted removal unknown = %d", out.UnknownRemovals)
	}
}

func TestConfigValidationAndFormat(t *testing.T) {
	if _, err := NewState(ckf.NewConfig(0)); !errors.Is(err, ckf.ErrExpectedCapacityZero) {
		t.Fatalf("zero capacity: %v", err)
	}
	cfg := ckf.NewConfig(16)
	cfg.PublishEveryNEvents = 0
	if _, err := NewState(cfg); !errors.Is(err, ckf.ErrInvalidPublishEveryNEvents) {
		t.Fatalf("zero cadence: %v", err)
	}
	s := mustState(t, ckf.NewConfig(16))
	if f := s.Format(); f != ckf.NewFormatIdentity(ckf.DefaultSeed, 8) || s.Mode() != ckf.HashModeCanonical {
		t.Fatalf("format %+v mode %v", f, s.Mode())
	}
}
