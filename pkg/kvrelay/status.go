package kvrelay

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
)

// Condition is a server-side failure that is not a validation rule: the
// outcomes of admission and of a running stream (§2.2, §4). Wrap one with %w
// to add a diagnostic message; Status still finds it.
type Condition uint8

const (
	// ErrPoolNotFound: the requested pool is not active. Refresh the catalog.
	ErrPoolNotFound Condition = iota + 1
	// ErrProducerChanged: the pool is active under another producer
	// generation. Drop the replica, refresh the catalog.
	ErrProducerChanged
	// ErrResourceLimit: an admission bound was hit. Retry with backoff.
	ErrResourceLimit
	// ErrSubscriberLagged: the subscriber's bounded queue overflowed.
	// Reopen from a fresh snapshot.
	ErrSubscriberLagged
	// ErrSnapshotProgressTimeout: the client stalled the bootstrap.
	ErrSnapshotProgressTimeout
	// ErrPublicationUnavailable: the stream's state is gone (generation
	// retired or replaced, oversized delta re-snapshot, shutdown).
	ErrPublicationUnavailable
	// ErrInvalidPublication: a producer invariant broke and the generation is
	// fenced.
	ErrInvalidPublication
	// ErrInternal: anything else.
	ErrInternal
)

func (c Condition) Error() string {
	switch c {
	case ErrPoolNotFound:
		return "kvrelay: pool not found"
	case ErrProducerChanged:
		return "kvrelay: producer generation changed"
	case ErrResourceLimit:
		return "kvrelay: resource limit reached"
	case ErrSubscriberLagged:
		return "kvrelay: subscriber lagged"
	case ErrSnapshotProgressTimeout:
		return "kvrelay: snapshot progress timeout"
	case ErrPublicationUnavailable:
		return "kvrelay: publication unavailable"
	case ErrInvalidPublication:
		return "kvrelay: invalid publication"
	case ErrInternal:
		return "kvrelay: internal error"
	}
	return "kvrelay: unknown condition"
}

// Status returns the gRPC code and the RelayErrorReason the server reports
// for err (§2.2). Validation errors map by rule: a bad contract marker is
// FAILED_PRECONDITION/CONTRACT_MISMATCH, an unsupported identity is
// FAILED_PRECONDITION/UNSUPPORTED_FEATURE, everything else malformed is
// INVALID_ARGUMENT/INVALID_REQUEST. Conditions map one to one. nil is OK with
// no reason; any other error is INTERNAL/INTERNAL.
func Status(err error) (codes.Code, kvrelayv1.RelayErrorReason) {
	if err == nil {
		return codes.OK, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_UNSPECIFIED
	}
	// A Condition wins over a validation error found deeper in the chain: the
	// outer layer decided what the failure means for the stream.
	var c Condition
	if errors.As(err, &c) {
		return c.status()
	}
	var v *ValidationError
	if errors.As(err, &v) {
		switch {
		case v.Kind == ErrContractMarker:
			return codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_CONTRACT_MISMATCH
		case v.Unsupported():
			return codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_UNSUPPORTED_FEATURE
		}
		return codes.InvalidArgument, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_REQUEST
	}
	return codes.Internal, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INTERNAL
}

func (c Condition) status() (codes.Code, kvrelayv1.RelayErrorReason) {
	switch c {
	case ErrPoolNotFound:
		return codes.NotFound, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_POOL_NOT_FOUND
	case ErrProducerChanged:
		return codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PRODUCER_CHANGED
	case ErrResourceLimit:
		return codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_RESOURCE_LIMIT
	case ErrSubscriberLagged:
		return codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SUBSCRIBER_LAGGED
	case ErrSnapshotProgressTimeout:
		return codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT
	case ErrPublicationUnavailable:
		return codes.Unavailable, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE
	case ErrInvalidPublication:
		return codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_PUBLICATION
	}
	return codes.Internal, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INTERNAL
}

// TrailerValue is the kv-relay-error-reason value for reason: its exact enum
// value name, or "" for UNSPECIFIED and unknown numbers, which must not be
// sent.
func TrailerValue(reason kvrelayv1.RelayErrorReason) string {
	if reason == kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_UNSPECIFIED {
		return ""
	}
	name, ok := kvrelayv1.RelayErrorReason_name[int32(reason)]
	if !ok {
		return ""
	}
	return name
}

// StatusOf builds what a handler returns for err: the status (message =
// err.Error(), diagnostic only) and the trailer carrying the reason. A server
// calls grpc.SetTrailer(ctx, md) and returns st.Err(). For nil it returns
// (nil, nil).
func StatusOf(err error) (*status.Status, metadata.MD) {
	if err == nil {
		return nil, nil
	}
	code, reason := Status(err)
	st := status.New(code, err.Error())
	v := TrailerValue(reason)
	if v == "" {
		return st, nil
	}
	return st, metadata.Pairs(kvrelayv1.ErrorReasonTrailer, v)
}

// ReasonFromTrailer decodes the reason a client received. A missing trailer,
// several values, a name this reader does not know, or UNSPECIFIED all mean
// "no reason" (UNSPECIFIED): the caller then acts on the status code alone
// and never parses the message.
func ReasonFromTrailer(md metadata.MD) kvrelayv1.RelayErrorReason {
	vals := md.Get(kvrelayv1.ErrorReasonTrailer)
	if len(vals) != 1 {
		return kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_UNSPECIFIED
	}
	n, ok := kvrelayv1.RelayErrorReason_value[vals[0]]
	if !ok {
		return kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_UNSPECIFIED
	}
	return kvrelayv1.RelayErrorReason(n)
}
