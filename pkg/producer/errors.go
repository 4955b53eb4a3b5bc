package producer

import "fmt"

// FenceReason is PublisherFenceReason. Each reason is an error so callers
// can errors.Is a PublishError against it.
type FenceReason uint8

const (
	// FenceSequenceExhausted: the sequence reached 2^64-1; a new producer
	// generation is needed.
	FenceSequenceExhausted FenceReason = iota + 1
	// FenceDeliveryUncertain: the sink rejected a delta, so whether the
	// consumer saw it is unknown; a new lease + barrier snapshot recovers.
	FenceDeliveryUncertain
	// FenceLeaseStalled: the lease was retired because its consumer stalled.
	FenceLeaseStalled
)

func (r FenceReason) String() string {
	switch r {
	case FenceSequenceExhausted:
		return "sequence_exhausted"
	case FenceDeliveryUncertain:
		return "delivery_uncertain"
	case FenceLeaseStalled:
		return "lease_stalled"
	}
	return fmt.Sprintf("FenceReason(%d)", uint8(r))
}

func (r FenceReason) Error() string { return "producer: publisher fenced: " + r.String() }

// PublishErrorKind enumerates DcCkfPublishError.
type PublishErrorKind uint8

const (
	// ErrFenced: the publisher is fenced; nothing was enqueued.
	ErrFenced PublishErrorKind = iota + 1
	// ErrEnqueue: the sink failed; the publisher is now fenced with
	// FenceDeliveryUncertain and the sequence did not advance.
	ErrEnqueue
)

func (k PublishErrorKind) Error() string {
	switch k {
	case ErrFenced:
		return "producer: publisher fenced"
	case ErrEnqueue:
		return "producer: delta enqueue failed"
	}
	return fmt.Sprintf("producer: publish error %d", uint8(k))
}

// PublishError carries the kind plus the fence reason (ErrFenced) or the
// sink's error (ErrEnqueue). errors.Is matches the kind, the reason and
// the sink error.
type PublishError struct {
	Kind   PublishErrorKind
	Reason FenceReason
	Err    error
}

func (e *PublishError) Error() string {
	if e.Kind == ErrFenced {
		return "producer: publisher fenced: " + e.Reason.String()
	}
	return fmt.Sprintf("producer: delta enqueue failed: %v", e.Err)
}

func (e *PublishError) Unwrap() []error {
	if e.Kind == ErrFenced {
		return []error{e.Kind, e.Reason}
	}
	return []error{e.Kind, e.Err}
}

// SnapshotErrorKind enumerates PublisherSnapshotError.
type SnapshotErrorKind uint8

const (
	// ErrSnapshotBuild: the barrier snapshot could not be built (the state's
	// window is intact).
	ErrSnapshotBuild SnapshotErrorKind = iota + 1
	// ErrSnapshotPublish: the old-lease tail could not be published; the new
	// lease is not installed and a retry snapshots again.
	ErrSnapshotPublish
	// ErrSnapshotSequenceExhausted: a new producer generation is needed.
	ErrSnapshotSequenceExhausted
)

func (k SnapshotErrorKind) Error() string {
	switch k {
	case ErrSnapshotBuild:
		return "producer: barrier snapshot build failed"
	case ErrSnapshotPublish:
		return "producer: barrier tail publish failed"
	case ErrSnapshotSequenceExhausted:
		return "producer: sequence exhausted, new producer generation required"
	}
	return fmt.Sprintf("producer: snapshot error %d", uint8(k))
}

// SnapshotError carries the kind and the underlying build or publish error.
type SnapshotError struct {
	Kind SnapshotErrorKind
	Err  error
}

func (e *SnapshotError) Error() string {
	if e.Err == nil {
		return e.Kind.Error()
	}
	return fmt.Sprintf("%s: %v", e.Kind.Error(), e.Err)
}

func (e *SnapshotError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}
