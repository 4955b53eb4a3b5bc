package producer

import (
	"errors"
	"math"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Sink is the reliable FIFO hand-off of deltas to the next owner
// (DcCkfDeltaSink). A nil error means the complete delta was accepted.
//
// Enqueue must not retain delta.Images after it returns: the slice belongs
// to the State's reusable publication buffer (see Batch). Encode or copy it.
type Sink interface {
	Enqueue(delta ckf.Delta) error
}

// EmitKind tags an EmitOutcome.
type EmitKind uint8

const (
	// EmitNoSubscriber: no lease, the batch was dropped; the next barrier
	// snapshot covers it.
	EmitNoSubscriber EmitKind = iota + 1
	// EmitPublished: the delta was enqueued with Sequence.
	EmitPublished
)

func (k EmitKind) String() string {
	switch k {
	case EmitNoSubscriber:
		return "no_subscriber"
	case EmitPublished:
		return "published"
	}
	return "unknown"
}

// EmitOutcome is PublisherEmitOutcome. ImageCount is 0 for NoSubscriber.
type EmitOutcome struct {
	Kind       EmitKind
	Sequence   uint64
	ImageCount int
}

// Publisher is DcCkfPublisher (spec §7): the only owner of one pool's stream
// sequence. Not safe for concurrent use; it lives with its State's actor.
type Publisher struct {
	identity ckf.ProducerIdentity
	lease    ckf.LaneLease
	hasLease bool
	last     uint64
	fenced   FenceReason
	sink     Sink
}

// NewPublisher starts at lastSequence with no lease and no fence.
func NewPublisher(identity ckf.ProducerIdentity, lastSequence uint64, sink Sink) *Publisher {
	return &Publisher{identity: identity, last: lastSequence, sink: sink}
}

// Identity returns the producer identity stamped on every message.
func (p *Publisher) Identity() ckf.ProducerIdentity { return p.identity }

// Lease returns the current lease, if any.
func (p *Publisher) Lease() (ckf.LaneLease, bool) { return p.lease, p.hasLease }

// LastSequence returns the sequence of the last delivered delta (or the
// initial sequence).
func (p *Publisher) LastSequence() uint64 { return p.last }

// FenceReason returns why the publisher is fenced, if it is.
func (p *Publisher) FenceReason() (FenceReason, bool) { return p.fenced, p.fenced != 0 }

// Publish sequences batch as the delta last → last+1 under the current lease
// (spec §7.2). Without a lease the batch is dropped (EmitNoSubscriber).
func (p *Publisher) Publish(batch Batch) (EmitOutcome, error) {
	if p.fenced != 0 {
		return EmitOutcome{}, &PublishError{Kind: ErrFenced, Reason: p.fenced}
	}
	if !p.hasLease {
		return EmitOutcome{Kind: EmitNoSubscriber, Sequence: p.last}, nil
	}
	if p.last == math.MaxUint64 {
		p.fenced = FenceSequenceExhausted
		return EmitOutcome{}, &PublishError{Kind: ErrFenced, Reason: FenceSequenceExhausted}
	}
	next := p.last + 1
	delta := ckf.Delta{Identity: p.identity, Lease: p.lease, BaseSequence: p.last, Sequence: next, Images: batch.Images}
	if err := p.sink.Enqueue(delta); err != nil {
		p.fenced = FenceDeliveryUncertain
		return EmitOutcome{}, &PublishError{Kind: ErrEnqueue, Err: err}
	}
	p.last = next
	return EmitOutcome{Kind: EmitPublished, Sequence: next, ImageCount: len(batch.Images)}, nil
}

// RetireLease drops the lease without fencing.
func (p *Publisher) RetireLease() { p.hasLease = false; p.lease = ckf.LaneLease{} }

// RetireStalledLease drops the lease and fences with FenceLeaseStalled.
func (p *Publisher) RetireStalledLease() {
	p.RetireLease()
	p.fenced = FenceLeaseStalled
}

// SnapshotAfterBarrier cuts a barrier snapshot of state, publishes its tail
// under the current (old) lease when healthy, then installs newLease and
// clears the fence (spec §7.3). The snapshot is tagged with the last
// sequence; the first continuation delta is N → N+1.
func (p *Publisher) SnapshotAfterBarrier(state *State, newLease ckf.LaneLease) (*ckf.Snapshot, error) {
	if p.last == math.MaxUint64 || p.fenced == FenceSequenceExhausted {
		return nil, &SnapshotError{Kind: ErrSnapshotSequenceExhausted}
	}
	tail, words, err := state.BarrierSnapshot()
	if err != nil {
		return nil, &SnapshotError{Kind: ErrSnapshotBuild, Err: err}
	}
	if p.fenced == 0 && !tail.Empty() {
		if _, err := p.Publish(tail); err != nil {
			if errors.Is(err, FenceSequenceExhausted) {
				return nil, &SnapshotError{Kind: ErrSnapshotSequenceExhausted, Err: err}
			}
			return nil, &SnapshotError{Kind: ErrSnapshotPublish, Err: err}
		}
	}
	p.lease, p.hasLease, p.fenced = newLease, true, 0
	return &ckf.Snapshot{Identity: p.identity, Lease: newLease, Sequence: p.last, Buckets: words}, nil
}

// ExactDrainMarker states the sequence the consumer must have reached; it
// exists only while a lease is held.
func (p *Publisher) ExactDrainMarker() (ckf.DrainMarker, bool) {
	if !p.hasLease {
		return ckf.DrainMarker{}, false
	}
	return ckf.DrainMarker{Lease: p.lease, ExpectedSequence: p.last}, true
}
