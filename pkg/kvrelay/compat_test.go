package kvrelay_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// withField100 appends what a newer schema would add: an optional string at
// field 100.
func withField100(b []byte) []byte {
	b = protowire.AppendTag(b, 100, protowire.BytesType)
	return protowire.AppendString(b, "future label")
}

// §8.2 scenario 9: additive fields round-trip through the v1 types without
// changing the marker, version, relay identity or producer key, and an old
// reader that discards unknown fields drops field 100.
func TestAdditiveFieldsDoNotEnterIdentity(t *testing.T) {
	info := &kvrelayv1.RelayInfo{ProtocolVersion: 1, Relay: relay(), ContractMarker: kvrelayv1.ContractMarker}
	b, err := proto.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	var got kvrelayv1.RelayInfo
	if err := proto.Unmarshal(withField100(b), &got); err != nil {
		t.Fatal(err)
	}
	if err := kvrelay.ValidateResponseEnvelope(got.ProtocolVersion, got.ContractMarker, got.Relay); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.Relay, info.Relay) {
		t.Fatal("relay identity changed")
	}

	d := descriptor()
	b, err = proto.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var future kvrelayv1.KvPoolDescriptor
	if err := proto.Unmarshal(withField100(b), &future); err != nil {
		t.Fatal(err)
	}
	want, _ := kvrelay.KeyOf(d.Producer)
	if k, err := kvrelay.KeyOf(future.Producer); err != nil || k != want {
		t.Fatalf("producer key changed: %v", err)
	}
	if err := kvrelay.ValidatePoolDescriptor(&future); err != nil {
		t.Fatal(err)
	}
	// Go keeps unknown fields by default (a relay re-emitting them would pass
	// them on); an old reader that discards them drops field 100.
	var old kvrelayv1.KvPoolDescriptor
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(withField100(b), &old); err != nil {
		t.Fatal(err)
	}
	if len(old.ProtoReflect().GetUnknown()) != 0 || len(future.ProtoReflect().GetUnknown()) == 0 {
		t.Fatal("unknown field handling")
	}
	again, _ := proto.Marshal(&old)
	if !proto.Equal(&old, d) || len(again) != len(b) {
		t.Fatal("discarding reader did not recover the v1 message")
	}
}

// A future ModelTarget alternative (§8.3: bytes 1a 00) reads as an unset
// oneof and makes the registration unsupported, never a base model.
func TestFutureModelTargetIsUnsupported(t *testing.T) {
	var target kvrelayv1.ModelTarget
	if err := proto.Unmarshal([]byte{0x1a, 0x00}, &target); err != nil {
		t.Fatal(err)
	}
	if target.GetTarget() != nil || target.GetBase() != nil {
		t.Fatal("unknown alternative decoded as a known one")
	}
	r := &kvrelayv1.ModelRegistration{CanonicalModelId: "future", Target: &target}
	checkRules(t, []ruleCase{{name: "1a 00", err: kvrelay.ValidateModelRegistration(r), kind: kvrelay.ErrUnsupportedModelTarget, unsupported: true}})
}
