// Package adapter is the in-process composition of one DC-local CKF producer
// with the global ingestion pool (spec §10, LocalCkfAdapter upstream): the
// boundary used when the relay and the domain-scoped global indexer share a
// process.
//
// Neither side's ownership model is weakened: the producer State stays owned
// by the adapter's single owner, the Publisher alone owns the stream
// sequence, and the pool's lane-sticky worker owns consumer validation and
// its installed sequence. Batches are cut only between complete events.
// Consumer-side application is atomic per packed bucket, not across buckets;
// a barrier snapshot installation is the full-state rebootstrap point of a
// lease.
package adapter

import (
	"errors"
	"slices"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// errInjectedDeliveryFailure is the sink error of the fail-next test hook.
var errInjectedDeliveryFailure = errors.New("adapter: injected local CKF delta-delivery failure")

// poolSink is the publisher's Sink: it hands each delta to Pool.SubmitDelta.
//
// The pool's worker reads Delta.Images asynchronously while the State reuses
// its publication buffer at the next cut, so the images are copied first.
//
// The fault flags are test hooks (set through export_test.go). They are
// plain fields because the sink, like the adapter, has a single owner.
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

// EventResult is LocalCkfEventResult.
type EventResult struct {
	// FirstError is the first ckf.EventError of the event, or nil. A capacity
	// omission (ckf.ErrCapacityExhausted) is reported only here: it neither
	// retires the lease nor starts recovery.
	FirstError error
	// UnknownRemovals counts removed hashes the member did not own.
	UnknownRemovals uint64
	// Publication is the emit outcome when the event cut a non-empty batch.
	Publication *producer.EmitOutcome
}

// DrainReport is LocalCkfDrainReport.
type DrainReport struct {
	// TerminalSequence is the sequence the consumer acknowledged.
	TerminalSequence uint64
}

// RecoveryReport is LocalCkfRecoveryReport.
type RecoveryReport struct {
	// Attempts is the 1-based attempt that succeeded.
	Attempts int
	// Lease is the new lease the lane is active under.
	Lease ckf.LaneLease
	// Sequence is the installed snapshot's sequence (the last published).
	Sequence uint64
}

// LocalAdapter is LocalCkfAdapter: one producer State, one Publisher whose
// sink submits to the shared Pool, and the lane's recovery policy.
//
// Concurrency: a LocalAdapter has a single owner, like the Rust actor that
// owns it; it is not safe for concurrent use and every call must be
// serialised by that owner. Several adapters (one per DC lane) may share one
// Pool concurrently, since the Pool is safe for concurrent use. Queries go to
// Indexer() from any goroutine.
type LocalAdapter struct {
	state     *producer.State
	publisher *producer.Publisher
	sink      *poolSink
	pool      *consumer.Pool
	recovery  RecoveryPolicy

	consumerInstance ckf.ConsumerInstanceID
	physicalLane     uint8
	// lastEpoch is the last assignment epoch used (successfully or not):
	// every recovery attempt takes a fresh one so a stale lease never returns.
	lastEpoch     uint64
	admissionOpen bool
}

// New creates an empty producer, assigns lease on pool and activates the lane
// from a barrier snapshot before opening admission (spec §10). pool must be
// non-nil and configured for lease.PhysicalLane with identity's pool.
// Failures are *BuildError.
func New(cfg ckf.Config, identity ckf.ProducerIdentity, lease ckf.LaneLease, pool *consumer.Pool,
	policy RecoveryPolicy) (*LocalAdapter, error) {
	if policy.MaxAttempts <= 0 {
		return nil, &BuildError{Kind: ErrZeroRecoveryAttempts}
	}
	state, err := producer.NewState(cfg)
	if err != nil {
		return nil, &BuildError{Kind: ErrProducer, Err: err}
	}
	if state.Format() != identity.Format {
		return nil, &BuildError{Kind: ErrProducerFormatMismatch}
	}
	sink := &poolSink{pool: pool}
	publisher := producer.NewPublisher(identity, 0, sink)

	if err := pool.Assign(identity, lease); err != nil {
		return nil, &BuildError{Kind: ErrInitialAssignment, Err: err}
	}
	snapshot, err := publisher.SnapshotAfterBarrier(state, lease)
	if err != nil {
		return nil, &BuildError{Kind: ErrInitialSnapshot, Err: err}
	}
	outcome, err := pool.InstallSnapshot(snapshot)
	if err != nil {
		return nil, &BuildError{Kind: ErrInitialSnapshotIngestion, Err: err}
	}
	if outcome != installed(snapshot.Sequence) {
		return nil, &BuildError{Kind: ErrInitialSnapshotInstallation, Outcome: outcome}
	}
	return &LocalAdapter{
		state:            state,
		publisher:        publisher,
		sink:             sink,
		pool:             pool,
		recovery:         policy,
		consumerInstance: lease.ConsumerInstance,
		physicalLane:     lease.PhysicalLane,
		lastEpoch:        lease.AssignmentEpoch,
		admissionOpen:    true,
	}, nil
}

func installed(sequence uint64) consumer.IngestOutcome {
	return consumer.IngestOutcome{Kind: consumer.OutcomeSnapshotInstalled, Sequence: sequence}
}

// State returns the producer state (read it only from the owner).
func (a *LocalAdapter) State() *producer.State { return a.state }

// Indexer returns the consumer indexer the pool ingests into.
func (a *LocalAdapter) Indexer() *consumer.Indexer { return a.pool.Indexer() }

// Pool returns the shared ingestion pool.
func (a *LocalAdapter) Pool() *consumer.Pool { return a.pool }

// Identity returns the producer identity.
func (a *LocalAdapter) Identity() ckf.ProducerIdentity { return a.publisher.Identity() }

// Lease returns the publisher's current lease, if any.
func (a *LocalAdapter) Lease() (ckf.LaneLease, bool) { return a.publisher.Lease() }

// ProducerSequence returns the last published stream sequence.
func (a *LocalAdapter) ProducerSequence() uint64 { return a.publisher.LastSequence() }

// PublisherFenceReason returns why the publisher is fenced, if it is.
func (a *LocalAdapter) PublisherFenceReason() (producer.FenceReason, bool) {
	return a.publisher.FenceReason()
}

// ApplyEvent applies one event to the producer and synchronously hands any
// resulting batch to the pool's lane FIFO (spec §10). With admission closed
// it fails with ErrAdmissionClosed and changes nothing. A publish failure
// (ErrPublisherFenced, ErrDeltaDelivery) is returned after the event was
// applied to the state: the next barrier snapshot covers it.
func (a *LocalAdapter) ApplyEvent(ev *routerevent.RouterEvent) (EventResult, error) {
	if !a.admissionOpen {
		return EventResult{}, &Error{Kind: ErrAdmissionClosed}
	}
	outcome := a.state.ApplyEvent(ev)
	result := EventResult{FirstError: outcome.FirstError, UnknownRemovals: outcome.UnknownRemovals}
	if outcome.HasPublication() {
		emitted, err := a.publisher.Publish(outcome.Publication)
		if err != nil {
			return EventResult{}, mapPublishError(err)
		}
		result.Publication = &emitted
	}
	return result, nil
}

// Flush publishes the producer's pending tail now, whatever the cadence. It
// returns nil when nothing changed since the last cut.
func (a *LocalAdapter) Flush() (*producer.EmitOutcome, error) {
	batch := a.state.Flush()
	if batch.Empty() {
		return nil, nil
	}
	emitted, err := a.publisher.Publish(batch)
	if err != nil {
		return nil, mapPublishError(err)
	}
	return &emitted, nil
}

// ExactConsumerDrain publishes the producer tail and waits until the
// consumer worker has applied exactly the terminal sequence. The marker
// travels through the lane FIFO, so a dropped final delta is detected even
// though no later delta exposes the gap. Admission is closed meanwhile and
// stays closed on failure (ErrPublisherFenced, ErrDeltaDelivery,
// ErrMissingLease, ErrConsumerDrain, ErrConsumerDrainOutcome) until a
// recovery or a later drain succeeds.
func (a *LocalAdapter) ExactConsumerDrain() (DrainReport, error) {
	a.admissionOpen = false
	if _, err := a.Flush(); err != nil {
		return DrainReport{}, err
	}
	marker, ok := a.publisher.ExactDrainMarker()
	if !ok {
		return DrainReport{}, &Error{Kind: ErrMissingLease}
	}
	outcome, err := a.pool.CompleteDrain(marker)
	if err != nil {
		return DrainReport{}, &Error{Kind: ErrConsumerDrain, Err: err}
	}
	want := consumer.IngestOutcome{Kind: consumer.OutcomeDrainAcknowledged, InstalledSequence: marker.ExpectedSequence}
	if outcome != want {
		return DrainReport{}, &Error{Kind: ErrConsumerDrainOutcome, Outcome: outcome}
	}
	a.admissionOpen = true
	return DrainReport{TerminalSequence: marker.ExpectedSequence}, nil
}

// RecoverSnapshot replaces the lease and recovers the same producer
// generation from a new barrier snapshot, trying up to
// RecoveryPolicy.MaxAttempts times with a fresh assignment epoch each. It
// never sleeps: a coordinator applies RecoveryPolicy.DelayAfterFailure
// between calls. A sequence-exhausted snapshot (a new producer generation is
// needed) returns at once as ErrSnapshot; otherwise exhausting the attempts
// returns ErrRecoveryExhausted wrapping the last attempt's error. Admission
// reopens only on success.
//
// The lease is retired before the barrier, so the pending tail is dropped as
// NoSubscriber; the snapshot contains it and carries the last sequence.
func (a *LocalAdapter) RecoverSnapshot() (RecoveryReport, error) {
	a.admissionOpen = false
	var last error
	for attempt := 1; attempt <= a.recovery.MaxAttempts; attempt++ {
		lease, sequence, err := a.recoverOnce()
		if err == nil {
			a.admissionOpen = true
			return RecoveryReport{Attempts: attempt, Lease: lease, Sequence: sequence}, nil
		}
		if errors.Is(err, producer.ErrSnapshotSequenceExhausted) {
			return RecoveryReport{}, err
		}
		last = err
	}
	return RecoveryReport{}, &Error{Kind: ErrRecoveryExhausted, Attempts: a.recovery.MaxAttempts, Err: last}
}

func (a *LocalAdapter) recoverOnce() (ckf.LaneLease, uint64, error) {
	if a.lastEpoch == ^uint64(0) {
		return ckf.LaneLease{}, 0, &Error{Kind: ErrAssignmentEpochExhausted}
	}
	a.lastEpoch++
	lease := ckf.LaneLease{ConsumerInstance: a.consumerInstance, PhysicalLane: a.physicalLane, AssignmentEpoch: a.lastEpoch}

	a.publisher.RetireLease()
	if err := a.pool.Assign(a.publisher.Identity(), lease); err != nil {
		return ckf.LaneLease{}, 0, &Error{Kind: ErrAssignment, Err: err}
	}
	snapshot, err := a.publisher.SnapshotAfterBarrier(a.state, lease)
	if err != nil {
		return ckf.LaneLease{}, 0, &Error{Kind: ErrSnapshot, Err: err}
	}
	outcome, err := a.pool.InstallSnapshot(snapshot)
	if err != nil {
		return ckf.LaneLease{}, 0, &Error{Kind: ErrSnapshotIngestion, Err: err}
	}
	if outcome != installed(snapshot.Sequence) {
		return ckf.LaneLease{}, 0, &Error{Kind: ErrSnapshotInstallation, Outcome: outcome}
	}
	return lease, snapshot.Sequence, nil
}
