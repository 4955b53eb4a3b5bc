package kvrelayv1_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
)

// The six RPCs of §1.3, with their streaming shape. Method paths are a wire
// contract: a rename here breaks every Dynamo peer.
func TestServiceDescriptorMatchesSpec(t *testing.T) {
	fd := kvrelayv1.File_dynamo_kvrelay_v1_relay_proto
	if got := fd.Package(); got != "dynamo.kvrelay.v1" {
		t.Fatalf("package = %q", got)
	}
	svc := fd.Services().ByName("KvEventRelay")
	if svc == nil {
		t.Fatal("service KvEventRelay missing")
	}
	if got := svc.FullName(); got != "dynamo.kvrelay.v1.KvEventRelay" {
		t.Fatalf("service full name = %q", got)
	}
	want := []struct {
		name, in, out string
		serverStream  bool
		path          string
	}{
		{"GetRelayInfo", "RelayInfoRequest", "RelayInfo", false, kvrelayv1.KvEventRelay_GetRelayInfo_FullMethodName},
		{"WatchKvPoolCatalog", "WatchKvPoolCatalogRequest", "KvPoolCatalogUpdate", true, kvrelayv1.KvEventRelay_WatchKvPoolCatalog_FullMethodName},
		{"SubscribeKvPool", "SubscribeKvPoolRequest", "FilterUpdate", true, kvrelayv1.KvEventRelay_SubscribeKvPool_FullMethodName},
		{"SubscribeServingReadiness", "SubscribeServingReadinessRequest", "ServingReadinessUpdate", true, kvrelayv1.KvEventRelay_SubscribeServingReadiness_FullMethodName},
		{"SubscribeKvPoolLoad", "SubscribeKvPoolLoadRequest", "KvPoolLoadUpdate", true, kvrelayv1.KvEventRelay_SubscribeKvPoolLoad_FullMethodName},
		{"SubscribeServingLoad", "SubscribeServingLoadRequest", "ServingLoadUpdate", true, kvrelayv1.KvEventRelay_SubscribeServingLoad_FullMethodName},
	}
	if n := svc.Methods().Len(); n != len(want) {
		t.Fatalf("service has %d methods, want %d", n, len(want))
	}
	for i, w := range want {
		m := svc.Methods().Get(i)
		if string(m.Name()) != w.name {
			t.Errorf("method %d = %s, want %s (declaration order)", i, m.Name(), w.name)
			continue
		}
		if got := "dynamo.kvrelay.v1." + w.in; string(m.Input().FullName()) != got {
			t.Errorf("%s input = %s, want %s", w.name, m.Input().FullName(), got)
		}
		if got := "dynamo.kvrelay.v1." + w.out; string(m.Output().FullName()) != got {
			t.Errorf("%s output = %s, want %s", w.name, m.Output().FullName(), got)
		}
		if m.IsStreamingClient() {
			t.Errorf("%s must not be client-streaming", w.name)
		}
		if m.IsStreamingServer() != w.serverStream {
			t.Errorf("%s server streaming = %v, want %v", w.name, m.IsStreamingServer(), w.serverStream)
		}
		wantPath := "/dynamo.kvrelay.v1.KvEventRelay/" + w.name
		if w.path != wantPath {
			t.Errorf("generated full method name %q, want %q", w.path, wantPath)
		}
	}
	if got := kvrelayv1.KvEventRelay_ServiceDesc.ServiceName; got != "dynamo.kvrelay.v1.KvEventRelay" {
		t.Errorf("grpc ServiceDesc name = %q", got)
	}
	if n := len(kvrelayv1.KvEventRelay_ServiceDesc.Methods) + len(kvrelayv1.KvEventRelay_ServiceDesc.Streams); n != 6 {
		t.Errorf("grpc ServiceDesc registers %d handlers, want 6", n)
	}
}

// Every top-level request and response carries fixed32 contract_marker = 127,
// and every response carries uint32 protocol_version = 1 and relay = 2 (§2.1).
func TestEnvelopeFields(t *testing.T) {
	requests := []proto.Message{
		&kvrelayv1.RelayInfoRequest{}, &kvrelayv1.WatchKvPoolCatalogRequest{},
		&kvrelayv1.SubscribeKvPoolRequest{}, &kvrelayv1.SubscribeServingReadinessRequest{},
		&kvrelayv1.SubscribeKvPoolLoadRequest{}, &kvrelayv1.SubscribeServingLoadRequest{},
	}
	responses := []proto.Message{
		&kvrelayv1.RelayInfo{}, &kvrelayv1.KvPoolCatalogUpdate{}, &kvrelayv1.FilterUpdate{},
		&kvrelayv1.ServingReadinessUpdate{}, &kvrelayv1.KvPoolLoadUpdate{}, &kvrelayv1.ServingLoadUpdate{},
	}
	field := func(m proto.Message, num protoreflect.FieldNumber, kind protoreflect.Kind) {
		t.Helper()
		md := m.ProtoReflect().Descriptor()
		f := md.Fields().ByNumber(num)
		if f == nil {
			t.Errorf("%s: field %d missing", md.FullName(), num)
			return
		}
		if f.Kind() != kind {
			t.Errorf("%s.%s: kind %v, want %v", md.FullName(), f.Name(), f.Kind(), kind)
		}
	}
	for _, m := range append(requests, responses...) {
		field(m, 127, protoreflect.Fixed32Kind)
	}
	for _, m := range responses {
		field(m, 1, protoreflect.Uint32Kind)
		field(m, 2, protoreflect.MessageKind)
	}
}

// §8.3: the marker encodes as fd 07 31 52 56 4b.
func TestContractMarkerBytes(t *testing.T) {
	b, err := proto.Marshal(&kvrelayv1.RelayInfoRequest{ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0xfd, 0x07, 0x31, 0x52, 0x56, 0x4b}
	if string(b) != string(want) {
		t.Fatalf("marker bytes = % x, want % x", b, want)
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n != 2 || num != 127 || typ != protowire.Fixed32Type {
		t.Fatalf("tag = (%d, %d, %d)", num, typ, n)
	}
}

// A spot check of the field numbers and scalar kinds that identity equality
// and the CBI1 header cross-checks depend on (§3.2).
func TestIdentityFieldKinds(t *testing.T) {
	cases := []struct {
		msg  proto.Message
		name protoreflect.Name
		num  protoreflect.FieldNumber
		kind protoreflect.Kind
	}{
		{&kvrelayv1.RelayIdentity{}, "drt_instance_id", 1, protoreflect.Fixed64Kind},
		{&kvrelayv1.RelayIdentity{}, "relay_incarnation", 2, protoreflect.Fixed64Kind},
		{&kvrelayv1.DigestIdentity{}, "digest", 1, protoreflect.BytesKind},
		{&kvrelayv1.DigestIdentity{}, "source", 2, protoreflect.EnumKind},
		{&kvrelayv1.KvPoolId{}, "identity_version", 1, protoreflect.Uint32Kind},
		{&kvrelayv1.KvPoolId{}, "dc_id", 3, protoreflect.Fixed64Kind},
		{&kvrelayv1.CkfFormat{}, "format_version", 1, protoreflect.Uint32Kind},
		{&kvrelayv1.CkfFormat{}, "seed", 2, protoreflect.Fixed64Kind},
		{&kvrelayv1.CkfFormat{}, "bucket_count", 3, protoreflect.Uint64Kind},
		{&kvrelayv1.CkfFormat{}, "fingerprint_bits", 4, protoreflect.Uint32Kind},
		{&kvrelayv1.CkfFormat{}, "slots_per_bucket", 5, protoreflect.Uint32Kind},
		{&kvrelayv1.ProducerIdentity{}, "producer_incarnation", 2, protoreflect.Fixed64Kind},
		{&kvrelayv1.ProducerIdentity{}, "layout_generation", 3, protoreflect.Uint64Kind},
		{&kvrelayv1.FilterUpdate{}, "base_sequence", 4, protoreflect.Uint64Kind},
		{&kvrelayv1.FilterUpdate{}, "sequence", 5, protoreflect.Uint64Kind},
		{&kvrelayv1.FilterUpdate{}, "send_ts_us", 6, protoreflect.Uint64Kind},
		{&kvrelayv1.FilterUpdate{}, "kind", 7, protoreflect.EnumKind},
		{&kvrelayv1.FilterUpdate{}, "payload", 8, protoreflect.BytesKind},
	}
	for _, c := range cases {
		md := c.msg.ProtoReflect().Descriptor()
		f := md.Fields().ByName(c.name)
		if f == nil || f.Number() != c.num || f.Kind() != c.kind {
			t.Errorf("%s.%s: got %v, want #%d %v", md.FullName(), c.name, f, c.num, c.kind)
		}
	}
	member := (&kvrelayv1.TopologyMember{}).ProtoReflect().Descriptor().Fields().ByName("pool_id")
	if member == nil || !member.HasPresence() {
		t.Error("TopologyMember.pool_id must track presence")
	}
}
