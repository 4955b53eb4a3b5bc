package client

import (
	"testing"

	"google.golang.org/grpc/codes"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
)

// §2.2 / §8.2 16: the reason trailer decides when it names a known reason;
// without one (or with UNSPECIFIED) the status code alone does.
func TestStatusReason(t *testing.T) {
	const none = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_UNSPECIFIED
	for _, tc := range []struct {
		code   codes.Code
		reason kvrelayv1.RelayErrorReason
		want   Reason
	}{
		{codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_CONTRACT_MISMATCH, ReasonContract},
		{codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_UNSUPPORTED_FEATURE, ReasonContract},
		{codes.InvalidArgument, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_REQUEST, ReasonContract},
		{codes.NotFound, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_POOL_NOT_FOUND, ReasonPoolNotFound},
		{codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PRODUCER_CHANGED, ReasonProducerChanged},
		{codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_PUBLICATION, ReasonProducerChanged},
		{codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_RESOURCE_LIMIT, ReasonResourceLimit},
		{codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SUBSCRIBER_LAGGED, ReasonLagged},
		{codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT, ReasonSnapshotTimeout},
		{codes.Unavailable, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE, ReasonUnavailable},
		{codes.Internal, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INTERNAL, ReasonRPC},
		{codes.ResourceExhausted, none, ReasonResourceLimit}, // e.g. a frame above the receive limit
		{codes.Unavailable, none, ReasonUnavailable},
		{codes.NotFound, none, ReasonPoolNotFound},
		{codes.Unimplemented, none, ReasonContract},
		{codes.FailedPrecondition, none, ReasonRPC},
		{codes.Internal, 99, ReasonRPC}, // an unknown reason number is no reason
	} {
		if got := statusReason(tc.code, tc.reason); got != tc.want {
			t.Errorf("%s / %s: %s, want %s", tc.code, tc.reason, got, tc.want)
		}
	}
}
