package producer

import (
	"errors"
	"math"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

func TestPublisherOwnsCheckedSequenceAndSnapshotContinuation(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	sink := &recordingSink{}
	p := NewPublisher(testIdentity(s), 7, sink)
	if _, ok := p.ExactDrainMarker(); ok {
		t.Fatal("drain marker without a lease")
	}
	if emit, err := p.Publish(Batch{Images: []ckf.BucketImage{{Bucket: 1, Value: 1}}}); err != nil || emit != (EmitOutcome{Kind: EmitNoSubscriber, Sequence: 7}) {
		t.Fatalf("leaseless publish %+v %v", emit, err)
	}
	snap, err := p.SnapshotAfterBarrier(s, lease(1))
	if err != nil || snap.Sequence != 7 || snap.Lease != lease(1) || snap.Identity != testIdentity(s) {
		t.Fatalf("snapshot %+v %v", snap, err)
	}
	out := s.ApplyEvent(storedEv(1, 0, 41))
	emit, err := p.Publish(out.Publication)
	if err != nil || emit != (EmitOutcome{Kind: EmitPublished, Sequence: 8, ImageCount: 1}) {
		t.Fatalf("emit %+v %v", emit, err)
	}
	if d := sink.deltas[0]; d.BaseSequence != 7 || d.Sequence != 8 || d.Lease != lease(1) {
		t.Fatalf("delta %+v", d)
	}
	if m, ok := p.ExactDrainMarker(); !ok || m != (ckf.DrainMarker{Lease: lease(1), ExpectedSequence: 8}) {
		t.Fatalf("marker %+v", m)
	}
}

func TestFinalRemoveIsAnAbsoluteZeroImageNotAnEmptyReset(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	sink := &recordingSink{}
	p := NewPublisher(testIdentity(s), 0, sink)
	if _, err := p.SnapshotAfterBarrier(s, lease(1)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []*routerevent.RouterEvent{storedEv(1, 0, 41), removedEv(1, 0, 41)} {
		if _, err := p.Publish(s.ApplyEvent(ev).Publication); err != nil {
			t.Fatal(err)
		}
	}
	if len(sink.deltas) != 2 {
		t.Fatalf("%d deltas", len(sink.deltas))
	}
	last := sink.deltas[1]
	if len(last.Images) != 1 || last.Images[0] != (ckf.BucketImage{Bucket: 0, Value: 0}) {
		t.Fatalf("final removal images %+v", last.Images)
	}
}

func TestDeliveryUncertaintyDoesNotAdvanceAndRecoversWithNewLeaseSnapshot(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	sink := &recordingSink{}
	p := NewPublisher(testIdentity(s), 9, sink)
	if _, err := p.SnapshotAfterBarrier(s, lease(1)); err != nil {
		t.Fatal(err)
	}
	sink.fail = errSinkDown
	_, err := p.Publish(s.ApplyEvent(storedEv(1, 0, 41)).Publication)
	var pe *PublishError
	if !errors.As(err, &pe) || pe.Kind != ErrEnqueue || !errors.Is(err, errSinkDown) || !errors.Is(err, ErrEnqueue) {
		t.Fatalf("publish err %v", err)
	}
	if r, ok := p.FenceReason(); !ok || r != FenceDeliveryUncertain || p.LastSequence() != 9 {
		t.Fatalf("fence %v seq %d", r, p.LastSequence())
	}
	calls := sink.calls
	if _, err := p.Publish(s.ApplyEvent(storedEv(1, 0, 42)).Publication); !errors.Is(err, ErrFenced) || !errors.Is(err, FenceDeliveryUncertain) || sink.calls != calls {
		t.Fatalf("fenced publish %v (calls %d→%d)", err, calls, sink.calls)
	}
	sink.fail = nil
	snap, err := p.SnapshotAfterBarrier(s, lease(2))
	if err != nil || snap.Sequence != 9 || snap.Lease != lease(2) {
		t.Fatalf("recovery snapshot %+v %v", snap, err)
	}
	if _, fenced := p.FenceReason(); fenced {
		t.Fatal("fence not cleared by the snapshot")
	}
	if l, ok := p.Lease(); !ok || l != lease(2) {
		t.Fatalf("lease %+v", l)
	}
}

func TestReplacementSnapshotEmitsHealthyOldLeaseTailBeforeRecordingSequence(t *testing.T) {
	cfg := verbatimConfig(128)
	cfg.PublishEveryNEvents = 16
	s := mustState(t, cfg)
	sink := &recordingSink{}
	p := NewPublisher(testIdentity(s), 0, sink)
	if _, err := p.SnapshotAfterBarrier(s, lease(1)); err != nil {
		t.Fatal(err)
	}
	s.ApplyEvent(storedEv(1, 0, 41))
	snap, err := p.SnapshotAfterBarrier(s, lease(2))
	if err != nil {
		t.Fatal(err)
	}
	if len(sink.deltas) != 1 {
		t.Fatalf("%d deltas", len(sink.deltas))
	}
	if d := sink.deltas[0]; d.BaseSequence != 0 || d.Sequence != 1 || d.Lease != lease(1) {
		t.Fatalf("tail delta %+v", d)
	}
	if snap.Sequence != 1 || snap.Lease != lease(2) {
		t.Fatalf("snapshot %+v", snap)
	}
}

func TestFailedOldLeaseTailRequiresRetryThenSnapshotCoversIt(t *testing.T) {
	cfg := verbatimConfig(128)
	cfg.PublishEveryNEvents = 16
	s := mustState(t, cfg)
	sink := &recordingSink{}
	p := NewPublisher(testIdentity(s), 4, sink)
	if _, err := p.SnapshotAfterBarrier(s, lease(1)); err != nil {
		t.Fatal(err)
	}
	s.ApplyEvent(storedEv(1, 0, 41))
	sink.fail = errSinkDown
	_, err := p.SnapshotAfterBarrier(s, lease(2))
	var se *SnapshotError
	if !errors.As(err, &se) || se.Kind != ErrSnapshotPublish || !errors.Is(err, ErrEnqueue) || !errors.Is(err, errSinkDown) {
		t.Fatalf("snapshot err %v", err)
	}
	if l, _ := p.Lease(); l != lease(1) || p.LastSequence() != 4 {
		t.Fatalf("lease %+v seq %d after failed barrier", l, p.LastSequence())
	}
	sink.fail = nil
	snap, err := p.SnapshotAfterBarrier(s, lease(2))
	if err != nil || snap.Sequence != 4 {
		t.Fatalf("retry %+v %v", snap, err)
	}
	nonzero := false
	for _, w := range snap.Buckets {
		nonzero = nonzero || w != 0
	}
	if !nonzero {
		t.Fatal("retry snapshot does not cover the lost tail")
	}
}

func TestCheckedRolloverFencesWithoutEnqueueing(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	sink := &recordingSink{}
	p := NewPublisher(testIdentity(s), math.MaxUint64-1, sink)
	if _, err := p.SnapshotAfterBarrier(s, lease(1)); err != nil {
		t.Fatal(err)
	}
	emit, err := p.Publish(s.ApplyEvent(storedEv(1, 0, 41)).Publication)
	if err != nil || emit.Sequence != math.MaxUint64 {
		t.Fatalf("last publish %+v %v", emit, err)
	}
	calls := sink.calls
	if _, err := p.Publish(s.ApplyEvent(storedEv(1, 0, 42)).Publication); !errors.Is(err, FenceSequenceExhausted) || !errors.Is(err, ErrFenced) {
		t.Fatalf("rollover publish %v", err)
	}
	if sink.calls != calls {
		t.Fatal("rollover enqueued")
	}
	if _, err := p.SnapshotAfterBarrier(s, lease(2)); !errors.Is(err, ErrSnapshotSequenceExhausted) {
		t.Fatalf("snapshot after rollover %v", err)
	}
}

func TestStalledLeaseFencesAndBuildFailureKeepsLease(t *testing.T) {
	s := mustState(t, verbatimConfig(128))
	sink := &recordingSink{}
	p := NewPublisher(testIdentity(s), 0, sink)
	if _, err := p.SnapshotAfterBarrier(s, lease(1)); err != nil {
		t.Fatal(err)
	}
	s.failNextSnapshotAlloc = true
	if _, err := p.SnapshotAfterBarrier(s, lease(2)); !errors.Is(err, ErrSnapshotBuild) || !errors.Is(err, ckf.ErrAllocationFailed) {
		t.Fatalf("build failure %v", err)
	}
	if l, _ := p.Lease(); l != lease(1) {
		t.Fatal("lease changed on a build failure")
	}
	p.RetireStalledLease()
	if r, ok := p.FenceReason(); !ok || r != FenceLeaseStalled {
		t.Fatal("stalled lease did not fence")
	}
	if _, ok := p.Lease(); ok {
		t.Fatal("lease kept")
	}
	if _, err := p.Publish(s.ApplyEvent(storedEv(1, 0, 1)).Publication); !errors.Is(err, FenceLeaseStalled) {
		t.Fatalf("publish while stalled %v", err)
	}
	// The fenced barrier skips the tail; the snapshot covers it.
	snap, err := p.SnapshotAfterBarrier(s, lease(3))
	if err != nil || snap.Sequence != 0 || len(sink.deltas) != 0 {
		t.Fatalf("snapshot %+v %v (%d deltas)", snap, err, len(sink.deltas))
	}
	p.RetireLease()
	if _, fenced := p.FenceReason(); fenced {
		t.Fatal("plain retire fenced")
	}
}
