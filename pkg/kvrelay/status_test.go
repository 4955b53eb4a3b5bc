package kvrelay_test

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

type reason = kvrelayv1.RelayErrorReason

const (
	rContract    = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_CONTRACT_MISMATCH
	rInvalid     = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_REQUEST
	rUnsupported = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_UNSUPPORTED_FEATURE
	rNotFound    = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_POOL_NOT_FOUND
	rChanged     = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PRODUCER_CHANGED
	rLimit       = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_RESOURCE_LIMIT
	rLagged      = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SUBSCRIBER_LAGGED
	rTimeout     = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT
	rUnavailable = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE
	rInvalidPub  = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_PUBLICATION
	rInternal    = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INTERNAL
	rNone        = kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_UNSPECIFIED
)

func subscribe(edit func(p *kvrelayv1.ProducerIdentity), marker uint32) error {
	p := producer()
	edit(p)
	_, err := kvrelay.ValidateSubscribeKvPoolRequest(&kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "c", ExpectedProducer: p, ContractMarker: marker})
	return err
}

// §2.2 table, §8.1 scenario 8 and §8.2 scenario 17.
func TestStatusMapping(t *testing.T) {
	m := kvrelayv1.ContractMarker
	cases := []struct {
		name   string
		err    error
		code   codes.Code
		reason reason
	}{
		{"nil", nil, codes.OK, rNone},
		// Scenario 8: GetRelayInfo{contract_marker: 0}.
		{"marker 0", kvrelay.ValidateRelayInfoRequest(&kvrelayv1.RelayInfoRequest{}), codes.FailedPrecondition, rContract},
		// Scenario 8: identity_version = 2.
		{"identity version 2", subscribe(func(p *kvrelayv1.ProducerIdentity) { p.PoolId.IdentityVersion = 2 }, m), codes.FailedPrecondition, rUnsupported},
		// Scenario 8: layout_generation = 0.
		{"layout 0", subscribe(func(p *kvrelayv1.ProducerIdentity) { p.LayoutGeneration = 0 }, m), codes.InvalidArgument, rInvalid},
		{"identity version 0", subscribe(func(p *kvrelayv1.ProducerIdentity) { p.PoolId.IdentityVersion = 0 }, m), codes.InvalidArgument, rInvalid},
		{"slots 5", subscribe(func(p *kvrelayv1.ProducerIdentity) { p.CkfFormat.SlotsPerBucket = 5 }, m), codes.FailedPrecondition, rUnsupported},
		{"bucket count 2^25", subscribe(func(p *kvrelayv1.ProducerIdentity) { p.CkfFormat.BucketCount = 1 << 25 }, m), codes.FailedPrecondition, rUnsupported},
		{"bucket count 3", subscribe(func(p *kvrelayv1.ProducerIdentity) { p.CkfFormat.BucketCount = 3 }, m), codes.InvalidArgument, rInvalid},
		{"source 7", subscribe(func(p *kvrelayv1.ProducerIdentity) { p.PoolId.IndexerDomain.RoutingScope.Source = 7 }, m), codes.FailedPrecondition, rUnsupported},
		{"marker beats producer", subscribe(func(p *kvrelayv1.ProducerIdentity) { p.PoolId.IdentityVersion = 2 }, 0), codes.FailedPrecondition, rContract},
		{"subscriber id", kvrelay.ValidateSubscriberID("consumer\nspoof"), codes.InvalidArgument, rInvalid},
		{"missing expected producer", func() error {
			_, err := kvrelay.ValidateSubscribeKvPoolRequest(&kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "c", ContractMarker: m})
			return err
		}(), codes.InvalidArgument, rInvalid},
		// Admission and stream conditions, bare and wrapped.
		{"pool not found", kvrelay.ErrPoolNotFound, codes.NotFound, rNotFound},
		{"producer changed", fmt.Errorf("pool moved to layout 9: %w", kvrelay.ErrProducerChanged), codes.FailedPrecondition, rChanged},
		{"resource limit", fmt.Errorf("Relay total pool stream limit %d reached: %w", 65, kvrelay.ErrResourceLimit), codes.ResourceExhausted, rLimit},
		{"lagged", kvrelay.ErrSubscriberLagged, codes.ResourceExhausted, rLagged},
		{"snapshot timeout", kvrelay.ErrSnapshotProgressTimeout, codes.ResourceExhausted, rTimeout},
		{"unavailable", kvrelay.ErrPublicationUnavailable, codes.Unavailable, rUnavailable},
		{"invalid publication", kvrelay.ErrInvalidPublication, codes.FailedPrecondition, rInvalidPub},
		{"internal", kvrelay.ErrInternal, codes.Internal, rInternal},
		{"unknown error", errors.New("boom"), codes.Internal, rInternal},
		{"unknown condition", kvrelay.Condition(200), codes.Internal, rInternal},
		// A condition wrapping a validation error reports the condition.
		{"condition over validation", fmt.Errorf("%w: %w", kvrelay.ErrInvalidPublication, kvrelay.ValidateSubscriberID("")), codes.FailedPrecondition, rInvalidPub},
	}
	for _, c := range cases {
		code, r := kvrelay.Status(c.err)
		if code != c.code || r != c.reason {
			t.Errorf("%s: Status(%v) = %v, %v; want %v, %v", c.name, c.err, code, r, c.code, c.reason)
		}
		st, md := kvrelay.StatusOf(c.err)
		if c.err == nil {
			if st != nil || md != nil {
				t.Errorf("%s: StatusOf(nil) = %v, %v", c.name, st, md)
			}
			continue
		}
		if st.Code() != c.code || st.Message() != c.err.Error() {
			t.Errorf("%s: status %v", c.name, st)
		}
		if got := md.Get(kvrelayv1.ErrorReasonTrailer); len(got) != 1 || got[0] != c.reason.String() {
			t.Errorf("%s: trailer %v, want %s", c.name, got, c.reason)
		}
		// What a client decodes from that trailer is the same reason.
		if got := kvrelay.ReasonFromTrailer(md); got != c.reason {
			t.Errorf("%s: decoded %v", c.name, got)
		}
	}
	if c := kvrelay.Condition(200); c.Error() == "" {
		t.Error("unknown condition has no text")
	}
	for c := kvrelay.ErrPoolNotFound; c <= kvrelay.ErrInternal; c++ {
		if !errors.Is(fmt.Errorf("x: %w", c), c) {
			t.Errorf("%v is not errors.Is-able", c)
		}
	}
}

// Every reason the server can send is the exact enum value name.
func TestTrailerValue(t *testing.T) {
	for n := int32(1); n <= 11; n++ {
		r := reason(n)
		if got := kvrelay.TrailerValue(r); got != kvrelayv1.RelayErrorReason_name[n] || got == "" {
			t.Errorf("TrailerValue(%d) = %q", n, got)
		}
	}
	if kvrelay.TrailerValue(rNone) != "" || kvrelay.TrailerValue(99) != "" {
		t.Error("UNSPECIFIED or unknown reasons must not be sent")
	}
	if kvrelay.TrailerValue(rLagged) != "RELAY_ERROR_REASON_SUBSCRIBER_LAGGED" {
		t.Error("name")
	}
}

// §8.2 scenario 16: known reasons survive; no trailer, an unknown name or
// UNSPECIFIED decode as "none".
func TestReasonFromTrailer(t *testing.T) {
	for _, r := range []reason{rContract, rChanged, rLimit, rLagged, rTimeout} {
		md := metadata.Pairs(kvrelayv1.ErrorReasonTrailer, r.String())
		if got := kvrelay.ReasonFromTrailer(md); got != r {
			t.Errorf("%v decoded as %v", r, got)
		}
	}
	none := []metadata.MD{
		nil,
		metadata.MD{},
		metadata.Pairs("other", "RELAY_ERROR_REASON_INTERNAL"),
		metadata.Pairs(kvrelayv1.ErrorReasonTrailer, "RELAY_ERROR_REASON_FUTURE"),
		metadata.Pairs(kvrelayv1.ErrorReasonTrailer, "RELAY_ERROR_REASON_UNSPECIFIED"),
		metadata.Pairs(kvrelayv1.ErrorReasonTrailer, "relay_error_reason_internal"),
		metadata.Pairs(kvrelayv1.ErrorReasonTrailer, "11"),
		metadata.Pairs(kvrelayv1.ErrorReasonTrailer, "RELAY_ERROR_REASON_INTERNAL", kvrelayv1.ErrorReasonTrailer, "RELAY_ERROR_REASON_INTERNAL"),
	}
	for _, md := range none {
		if got := kvrelay.ReasonFromTrailer(md); got != rNone {
			t.Errorf("%v decoded as %v", md, got)
		}
	}
	// gRPC metadata keys are case-insensitive; metadata.Pairs lowercases.
	if got := kvrelay.ReasonFromTrailer(metadata.Pairs("KV-Relay-Error-Reason", rLimit.String())); got != rLimit {
		t.Errorf("mixed-case key decoded as %v", got)
	}
}
