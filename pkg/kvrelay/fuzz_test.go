package kvrelay_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

func marshal(f *testing.F, m proto.Message) []byte {
	f.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// Validation is the first code to touch untrusted protobuf: whatever decodes
// must validate without panicking, every failure must be a *ValidationError,
// and Status must map it.
func checkValidationResult(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var v *kvrelay.ValidationError
	if !errors.As(err, &v) || err.Error() == "" {
		t.Fatalf("%v (%T) is not a validation error", err, err)
	}
	if code, _ := kvrelay.Status(err); code == 0 {
		t.Fatalf("validation error %v maps to OK", err)
	}
}

// FuzzDecodeSubscribeKvPoolRequest is the server's view of untrusted requests.
func FuzzDecodeSubscribeKvPoolRequest(f *testing.F) {
	f.Add(marshal(f, &kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "c/ckf", ExpectedProducer: producer(), ContractMarker: kvrelayv1.ContractMarker}))
	f.Add([]byte{0xfd, 0x07, 0x31, 0x52, 0x56, 0x4b})
	f.Fuzz(func(t *testing.T, data []byte) {
		var r kvrelayv1.SubscribeKvPoolRequest
		if proto.Unmarshal(data, &r) != nil {
			return
		}
		key, err := kvrelay.ValidateSubscribeKvPoolRequest(&r)
		checkValidationResult(t, err)
		if err == nil {
			if again, err := kvrelay.KeyOf(r.ExpectedProducer); err != nil || again != key {
				t.Fatalf("key not reproducible: %v", err)
			}
			_ = key.CKF()
		}
	})
}

// FuzzDecodeCatalogUpdate is the consumer's view of a catalog message.
func FuzzDecodeCatalogUpdate(f *testing.F) {
	f.Add(marshal(f, catalog(descriptor())))
	unsupported := descriptor()
	unsupported.Producer.PoolId.IdentityVersion = 2
	f.Add(marshal(f, catalog(descriptor(), unsupported)))
	f.Fuzz(func(t *testing.T, data []byte) {
		var u kvrelayv1.KvPoolCatalogUpdate
		if proto.Unmarshal(data, &u) != nil {
			return
		}
		errs, err := kvrelay.ValidateCatalogUpdate(&u)
		checkValidationResult(t, err)
		if err == nil && len(errs) != len(u.GetSnapshot().GetPools()) {
			t.Fatalf("%d results for %d pools", len(errs), len(u.GetSnapshot().GetPools()))
		}
		for _, e := range errs {
			checkValidationResult(t, e)
		}
	})
}

// FuzzDecodeReadinessUpdate is the consumer's view of a readiness message.
func FuzzDecodeReadinessUpdate(f *testing.F) {
	f.Add(marshal(f, &kvrelayv1.ServingReadinessUpdate{ProtocolVersion: 1, Relay: relay(), Entries: []*kvrelayv1.TopologyEntry{topology()}, ContractMarker: kvrelayv1.ContractMarker}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var u kvrelayv1.ServingReadinessUpdate
		if proto.Unmarshal(data, &u) != nil {
			return
		}
		errs, err := kvrelay.ValidateReadinessUpdate(&u)
		checkValidationResult(t, err)
		for _, e := range errs {
			checkValidationResult(t, e)
		}
	})
}

// FuzzDecodeFilterUpdate is the consumer's per-frame check over arbitrary
// FilterUpdate bytes, CBI1 payload included.
func FuzzDecodeFilterUpdate(f *testing.F) {
	key, format := frameFixture(f)
	f.Add(marshal(f, update(kindChunk, 4, 4, chunkPayload(f, format, key.DcID, 4))))
	f.Add(marshal(f, update(kindDelta, 4, 5, deltaPayload(f, format, key.DcID, 4, 5))))
	f.Add(marshal(f, update(kindHeartbeat, 5, 5, nil)))
	f.Fuzz(func(t *testing.T, data []byte) {
		var u kvrelayv1.FilterUpdate
		if proto.Unmarshal(data, &u) != nil {
			return
		}
		fr, err := kvrelay.CheckFilterUpdate(key, &u)
		checkValidationResult(t, err)
		if err != nil {
			return
		}
		switch u.Kind {
		case kindChunk:
			if fr.Header.Epoch != u.Sequence || fr.Chunk.Count == 0 {
				t.Fatal("accepted chunk breaks its envelope")
			}
		case kindDelta:
			if fr.Header.Epoch != u.Sequence || fr.Delta.BaseEpoch != u.BaseSequence || u.Sequence != u.BaseSequence+1 {
				t.Fatal("accepted delta breaks its envelope")
			}
		case kindHeartbeat:
			if len(u.Payload) != 0 || u.BaseSequence != u.Sequence {
				t.Fatal("accepted heartbeat breaks its envelope")
			}
		default:
			t.Fatalf("accepted kind %v", u.Kind)
		}
	})
}
