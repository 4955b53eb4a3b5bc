package client

import (
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
)

// Reason says why a Follower invalidated its lane. It is the reason label
// of MetricFaults; each value is itself an error so callers branch with
// errors.Is(err, client.ReasonGap).
type Reason string

// Reasons. The first group is judged from what the relay sent, the second
// from how the RPCs ended.
const (
	// ReasonCatalogInvalid: a catalog update failed validation as a whole
	// (envelope, duplicate or unidentifiable entries, §3.4).
	ReasonCatalogInvalid Reason = "catalog_invalid"
	// ReasonCatalogRegressed: the catalog revision went backwards, or the
	// same revision came with other content (§6.1).
	ReasonCatalogRegressed Reason = "catalog_regressed"
	// ReasonRelayChanged: the relay identity changed within a stream or
	// differs between the catalog and the pool stream.
	ReasonRelayChanged Reason = "relay_changed"
	// ReasonNoDescriptor: no valid descriptor registers the model with an
	// accepted role.
	ReasonNoDescriptor Reason = "no_descriptor"
	// ReasonAmbiguous: several descriptors do.
	ReasonAmbiguous Reason = "ambiguous_descriptor"
	// ReasonRefused: the sink refused the selected pool (format or query
	// semantics).
	ReasonRefused Reason = "refused"
	// ReasonAdmitFailed: the sink could not admit the selected pool for a
	// passing reason (its Admit error does not wrap ErrIncompatible); Admit
	// is retried after backoff.
	ReasonAdmitFailed Reason = "admit_failed"
	// ReasonSemanticsChanged: the catalog changed the selected pool's query
	// semantics (block size, hash format) under the same producer; the pool
	// is admitted again before it is followed.
	ReasonSemanticsChanged Reason = "semantics_changed"
	// ReasonProducerChanged: the catalog names another producer for the
	// selected pool, or the relay answered PRODUCER_CHANGED.
	ReasonProducerChanged Reason = "producer_changed"
	// ReasonWithdrawn: the selected pool left the catalog.
	ReasonWithdrawn Reason = "pool_withdrawn"
	// ReasonBadFrame: a frame failed kvrelay.CheckFilterUpdate (envelope,
	// producer key, checksum, format, dc_id, epoch, kind).
	ReasonBadFrame Reason = "bad_frame"
	// ReasonWrongProducer: a frame names another producer than subscribed.
	ReasonWrongProducer Reason = "wrong_producer"
	// ReasonChunkSequence: a snapshot chunk out of order, after
	// installation, or a snapshot that does not cover the lane.
	ReasonChunkSequence Reason = "chunk_sequence"
	// ReasonGap: a delta whose base is not the installed sequence, or a
	// delta before installation.
	ReasonGap Reason = "gap"
	// ReasonHeartbeat: a heartbeat before installation or at another
	// sequence than the installed one.
	ReasonHeartbeat Reason = "heartbeat_invalid"
	// ReasonSink: the sink refused an install, a delta or a heartbeat.
	ReasonSink Reason = "sink"
	// ReasonStalled: no frame within Config.FrameTimeout.
	ReasonStalled Reason = "stalled"
	// ReasonStreamEnd: a stream ended cleanly, which is a loss of state.
	ReasonStreamEnd Reason = "stream_end"
	// ReasonLagged: RESOURCE_EXHAUSTED / SUBSCRIBER_LAGGED.
	ReasonLagged Reason = "lagged"
	// ReasonResourceLimit: RESOURCE_EXHAUSTED / RESOURCE_LIMIT, or
	// RESOURCE_EXHAUSTED without a reason (a frame above the receive limit).
	ReasonResourceLimit Reason = "resource_exhausted"
	// ReasonSnapshotTimeout: RESOURCE_EXHAUSTED / SNAPSHOT_PROGRESS_TIMEOUT.
	ReasonSnapshotTimeout Reason = "snapshot_timeout"
	// ReasonUnavailable: UNAVAILABLE (publication gone, relay down,
	// connection refused).
	ReasonUnavailable Reason = "unavailable"
	// ReasonPoolNotFound: NOT_FOUND / POOL_NOT_FOUND.
	ReasonPoolNotFound Reason = "pool_not_found"
	// ReasonContract: FAILED_PRECONDITION / CONTRACT_MISMATCH or
	// UNSUPPORTED_FEATURE, or INVALID_ARGUMENT: this client and the relay
	// disagree on the protocol.
	ReasonContract Reason = "contract"
	// ReasonRPC: any other status.
	ReasonRPC Reason = "rpc_error"
)

func (r Reason) Error() string { return "kvrelay client: " + string(r) }

// Fault is one invalidation: its reason and what was seen.
type Fault struct {
	Reason Reason
	Detail string
	Err    error
}

func (f *Fault) Error() string {
	s := "kvrelay client: " + string(f.Reason)
	if f.Detail != "" {
		s += ": " + f.Detail
	}
	if f.Err != nil {
		s += ": " + f.Err.Error()
	}
	return s
}

// Unwrap exposes the reason and the cause.
func (f *Fault) Unwrap() []error {
	if f.Err != nil {
		return []error{f.Reason, f.Err}
	}
	return []error{f.Reason}
}

func fault(r Reason, err error, format string, a ...any) *Fault {
	return &Fault{Reason: r, Detail: fmt.Sprintf(format, a...), Err: err}
}

// ErrIncompatible marks a LaneSink.Admit refusal that no retry can lift:
// the pool's CKF format or query semantics are not what the sink serves.
// The Follower then waits for the catalog to change. Any other Admit error
// is taken as passing (the sink's ingestion is being rebuilt) and Admit is
// retried with backoff.
var ErrIncompatible = errors.New("kvrelay client: pool incompatible with the sink")

// RetryHint, wrapped in an Admit error, says when a retry may succeed
// before the backoff ends: the Follower retries as soon as Ready is closed
// or the backoff has passed, whichever comes first.
type RetryHint struct {
	Ready <-chan struct{}
	Err   error
}

func (h *RetryHint) Error() string { return h.Err.Error() }

// Unwrap exposes the cause.
func (h *RetryHint) Unwrap() error { return h.Err }

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("kvrelay client: invalid config")

// errEOF is io.EOF: a server stream that ended with status OK.
var errEOF = io.EOF

// statusReason maps an RPC's final status and reason trailer (§2.2) to a
// Reason: the trailer decides when it names a known reason, else the code.
func statusReason(code codes.Code, reason kvrelayv1.RelayErrorReason) Reason {
	switch reason {
	case kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SUBSCRIBER_LAGGED:
		return ReasonLagged
	case kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_RESOURCE_LIMIT:
		return ReasonResourceLimit
	case kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT:
		return ReasonSnapshotTimeout
	case kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PRODUCER_CHANGED, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_PUBLICATION:
		return ReasonProducerChanged
	case kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_POOL_NOT_FOUND:
		return ReasonPoolNotFound
	case kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE:
		return ReasonUnavailable
	case kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_CONTRACT_MISMATCH, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_UNSUPPORTED_FEATURE,
		kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_REQUEST:
		return ReasonContract
	}
	switch code {
	case codes.OK:
		return ReasonStreamEnd
	case codes.ResourceExhausted:
		return ReasonResourceLimit
	case codes.Unavailable:
		return ReasonUnavailable
	case codes.NotFound:
		return ReasonPoolNotFound
	case codes.InvalidArgument, codes.Unimplemented:
		return ReasonContract
	}
	return ReasonRPC
}
