package kvrelay_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

type ruleCase struct {
	name        string
	err         error
	kind        kvrelay.Kind
	unsupported bool
	field       string // checked when set
	text        string // checked when set
}

func checkRules(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v *kvrelay.ValidationError
			if !errors.As(c.err, &v) {
				t.Fatalf("error %v (%T), want %v", c.err, c.err, c.kind)
			}
			if v.Kind != c.kind || !errors.Is(c.err, c.kind) {
				t.Fatalf("kind %v (%v), want %v", v.Kind, c.err, c.kind)
			}
			if v.Unsupported() != c.unsupported || errors.Is(c.err, kvrelay.ErrUnsupported) != c.unsupported ||
				errors.Is(c.err, kvrelay.ErrMalformed) == c.unsupported {
				t.Fatalf("unsupported = %v, want %v (%v)", v.Unsupported(), c.unsupported, c.err)
			}
			if c.field != "" && v.Field != c.field {
				t.Fatalf("field %q, want %q", v.Field, c.field)
			}
			if c.text != "" && v.Text != c.text {
				t.Fatalf("text %q, want %q", v.Text, c.text)
			}
			if c.err.Error() == "" {
				t.Fatal("empty message")
			}
		})
	}
}

func mustValid(t *testing.T, name string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: unexpected %v", name, err)
	}
}

// §8.2 scenario 12 (envelope part) and §2.1.
func TestEnvelope(t *testing.T) {
	mustValid(t, "v1 envelope", kvrelay.ValidateEnvelope(1, kvrelayv1.ContractMarker))
	mustValid(t, "response envelope", kvrelay.ValidateResponseEnvelope(1, kvrelayv1.ContractMarker, relay()))
	var v *kvrelay.ValidationError
	if err := kvrelay.ValidateEnvelope(1, 0); !errors.As(err, &v) || v.Kind != kvrelay.ErrContractMarker || v.Value != 0 {
		t.Errorf("marker 0: %v", err)
	}
	if err := kvrelay.ValidateEnvelope(2, kvrelayv1.ContractMarker); !errors.As(err, &v) || v.Kind != kvrelay.ErrProtocolVersion || v.Value != 2 {
		t.Errorf("version 2: %v", err)
	}
	checkRules(t, []ruleCase{
		{name: "marker reported before version", err: kvrelay.ValidateEnvelope(2, 0), kind: kvrelay.ErrContractMarker},
		{name: "missing relay", err: kvrelay.ValidateResponseEnvelope(1, kvrelayv1.ContractMarker, nil), kind: kvrelay.ErrMissingField, field: "relay"},
	})
}

// §8.2 scenario 17 (subscriber ids) and §3.4 request rules 1–3.
func TestRequests(t *testing.T) {
	mustValid(t, "consumer-a", kvrelay.ValidateSubscriberID("consumer-a"))
	mustValid(t, "128 bytes", kvrelay.ValidateSubscriberID(strings.Repeat("é", 64)))
	mustValid(t, "spaces and unicode", kvrelay.ValidateSubscriberID(" router/ckf ✓ "))
	checkRules(t, []ruleCase{
		{name: "empty", err: kvrelay.ValidateSubscriberID(""), kind: kvrelay.ErrSubscriberID},
		{name: "129 x", err: kvrelay.ValidateSubscriberID(strings.Repeat("x", 129)), kind: kvrelay.ErrSubscriberID},
		{name: "129 bytes of 2-byte runes", err: kvrelay.ValidateSubscriberID(strings.Repeat("é", 64) + "x"), kind: kvrelay.ErrSubscriberID},
		{name: "newline", err: kvrelay.ValidateSubscriberID("consumer\nspoof"), kind: kvrelay.ErrSubscriberID},
		{name: "DEL", err: kvrelay.ValidateSubscriberID("a\x7f"), kind: kvrelay.ErrSubscriberID},
		{name: "C1 control", err: kvrelay.ValidateSubscriberID("a\u0085"), kind: kvrelay.ErrSubscriberID},
		{name: "invalid UTF-8", err: kvrelay.ValidateSubscriberID("a\xff"), kind: kvrelay.ErrSubscriberID},
	})

	m := kvrelayv1.ContractMarker
	mustValid(t, "RelayInfoRequest", kvrelay.ValidateRelayInfoRequest(&kvrelayv1.RelayInfoRequest{ContractMarker: m}))
	mustValid(t, "catalog", kvrelay.ValidateWatchKvPoolCatalogRequest(&kvrelayv1.WatchKvPoolCatalogRequest{SubscriberId: "a/catalog", ContractMarker: m}))
	mustValid(t, "readiness", kvrelay.ValidateSubscribeServingReadinessRequest(&kvrelayv1.SubscribeServingReadinessRequest{SubscriberId: "a", ContractMarker: m}))
	mustValid(t, "load", kvrelay.ValidateSubscribeKvPoolLoadRequest(&kvrelayv1.SubscribeKvPoolLoadRequest{SubscriberId: "a", ContractMarker: m}))
	mustValid(t, "serving load", kvrelay.ValidateSubscribeServingLoadRequest(&kvrelayv1.SubscribeServingLoadRequest{SubscriberId: "a", ContractMarker: m}))
	key, err := kvrelay.ValidateSubscribeKvPoolRequest(&kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "a/ckf", ExpectedProducer: producer(), ContractMarker: m})
	if want, _ := kvrelay.KeyOf(producer()); err != nil || key != want {
		t.Errorf("SubscribeKvPool: %v", err)
	}
	sub := func(id string, p *kvrelayv1.ProducerIdentity, marker uint32) error {
		_, err := kvrelay.ValidateSubscribeKvPoolRequest(&kvrelayv1.SubscribeKvPoolRequest{SubscriberId: id, ExpectedProducer: p, ContractMarker: marker})
		return err
	}
	badVersion := producer()
	badVersion.PoolId.IdentityVersion = 2
	checkRules(t, []ruleCase{
		{name: "info marker 0", err: kvrelay.ValidateRelayInfoRequest(&kvrelayv1.RelayInfoRequest{}), kind: kvrelay.ErrContractMarker},
		{name: "nil request", err: kvrelay.ValidateRelayInfoRequest(nil), kind: kvrelay.ErrContractMarker},
		{name: "catalog marker before subscriber", err: kvrelay.ValidateWatchKvPoolCatalogRequest(&kvrelayv1.WatchKvPoolCatalogRequest{}), kind: kvrelay.ErrContractMarker},
		{name: "catalog subscriber", err: kvrelay.ValidateWatchKvPoolCatalogRequest(&kvrelayv1.WatchKvPoolCatalogRequest{ContractMarker: m}), kind: kvrelay.ErrSubscriberID},
		{name: "readiness subscriber", err: kvrelay.ValidateSubscribeServingReadinessRequest(&kvrelayv1.SubscribeServingReadinessRequest{ContractMarker: m}), kind: kvrelay.ErrSubscriberID},
		{name: "load subscriber", err: kvrelay.ValidateSubscribeKvPoolLoadRequest(&kvrelayv1.SubscribeKvPoolLoadRequest{ContractMarker: m}), kind: kvrelay.ErrSubscriberID},
		{name: "serving load subscriber", err: kvrelay.ValidateSubscribeServingLoadRequest(&kvrelayv1.SubscribeServingLoadRequest{ContractMarker: m}), kind: kvrelay.ErrSubscriberID},
		{name: "pool marker first", err: sub("", nil, 0), kind: kvrelay.ErrContractMarker},
		{name: "pool subscriber before producer", err: sub("", nil, m), kind: kvrelay.ErrSubscriberID},
		{name: "pool expected producer missing", err: sub("a", nil, m), kind: kvrelay.ErrMissingField, field: "expected producer"},
		{name: "pool producer unsupported", err: sub("a", badVersion, m), kind: kvrelay.ErrPoolIdentityVersion, unsupported: true},
	})
}

// §3.4 producer identity, in order, and §8.2 scenarios 12–13.
func TestProducerIdentityRules(t *testing.T) {
	mustValid(t, "fixture", kvrelay.ValidateProducerIdentity(producer()))
	mustValid(t, "scenario 12 pool id", kvrelay.ValidatePoolID(poolID()))
	mustValid(t, "scenario 13 format", kvrelay.ValidateCkfFormat(ckfFormat()))
	for _, n := range []uint64{2, 1 << 24} {
		f := ckfFormat()
		f.BucketCount = n
		mustValid(t, "bucket count", kvrelay.ValidateCkfFormat(f))
	}
	p := func(edit func(p *kvrelayv1.ProducerIdentity)) error {
		x := producer()
		edit(x)
		return kvrelay.ValidateProducerIdentity(x)
	}
	cs := func(x *kvrelayv1.ProducerIdentity) *kvrelayv1.DigestIdentity {
		return x.PoolId.IndexerDomain.CacheSemantics
	}
	rs := func(x *kvrelayv1.ProducerIdentity) *kvrelayv1.DigestIdentity {
		return x.PoolId.IndexerDomain.RoutingScope
	}
	f := func(edit func(f *kvrelayv1.CkfFormat)) error {
		x := ckfFormat()
		edit(x)
		return kvrelay.ValidateCkfFormat(x)
	}
	checkRules(t, []ruleCase{
		{name: "nil producer", err: kvrelay.ValidateProducerIdentity(nil), kind: kvrelay.ErrMissingField},
		{name: "pool id missing", err: p(func(x *kvrelayv1.ProducerIdentity) { x.PoolId = nil }), kind: kvrelay.ErrMissingField, field: "producer pool ID"},
		{name: "identity version 0 is malformed", err: p(func(x *kvrelayv1.ProducerIdentity) { x.PoolId.IdentityVersion = 0 }), kind: kvrelay.ErrPoolIdentityVersion},
		{name: "identity version 2 beats layout 0", err: p(func(x *kvrelayv1.ProducerIdentity) { x.PoolId.IdentityVersion = 2; x.LayoutGeneration = 0 }), kind: kvrelay.ErrPoolIdentityVersion, unsupported: true},
		{name: "indexer domain missing", err: p(func(x *kvrelayv1.ProducerIdentity) { x.PoolId.IndexerDomain = nil }), kind: kvrelay.ErrMissingField, field: "indexer domain"},
		{name: "cache semantics missing", err: p(func(x *kvrelayv1.ProducerIdentity) { x.PoolId.IndexerDomain.CacheSemantics = nil }), kind: kvrelay.ErrMissingField, field: "cache semantics"},
		{name: "cache digest 15 bytes", err: p(func(x *kvrelayv1.ProducerIdentity) { cs(x).Digest = cs(x).Digest[:15] }), kind: kvrelay.ErrDigestLength, field: "cache semantics"},
		{name: "cache digest 17 bytes", err: p(func(x *kvrelayv1.ProducerIdentity) { cs(x).Digest = append(cs(x).Digest, 0) }), kind: kvrelay.ErrDigestLength},
		{name: "cache source unspecified", err: p(func(x *kvrelayv1.ProducerIdentity) { cs(x).Source = 0 }), kind: kvrelay.ErrIdentitySource},
		{name: "cache source 99", err: p(func(x *kvrelayv1.ProducerIdentity) { cs(x).Source = 99 }), kind: kvrelay.ErrIdentitySource, unsupported: true},
		{name: "cache checked before routing", err: p(func(x *kvrelayv1.ProducerIdentity) { cs(x).Source = 0; rs(x).Digest = nil }), kind: kvrelay.ErrIdentitySource, field: "cache semantics"},
		{name: "routing scope missing", err: p(func(x *kvrelayv1.ProducerIdentity) { x.PoolId.IndexerDomain.RoutingScope = nil }), kind: kvrelay.ErrMissingField, field: "routing scope"},
		{name: "routing digest 15 bytes", err: p(func(x *kvrelayv1.ProducerIdentity) { rs(x).Digest = rs(x).Digest[:15] }), kind: kvrelay.ErrDigestLength, field: "routing scope"},
		{name: "routing source -1", err: p(func(x *kvrelayv1.ProducerIdentity) { rs(x).Source = -1 }), kind: kvrelay.ErrIdentitySource, unsupported: true, field: "routing scope"},
		{name: "layout generation 0 beats format", err: p(func(x *kvrelayv1.ProducerIdentity) { x.LayoutGeneration = 0; x.CkfFormat = nil }), kind: kvrelay.ErrZeroLayoutGeneration},
		{name: "format missing", err: p(func(x *kvrelayv1.ProducerIdentity) { x.CkfFormat = nil }), kind: kvrelay.ErrMissingField, field: "producer CKF format"},
		{name: "format version 0", err: f(func(x *kvrelayv1.CkfFormat) { x.FormatVersion = 0 }), kind: kvrelay.ErrZeroFormatField, field: "format version"},
		{name: "bucket count 0", err: f(func(x *kvrelayv1.CkfFormat) { x.BucketCount = 0 }), kind: kvrelay.ErrZeroFormatField, field: "bucket count"},
		{name: "fingerprint bits 0", err: f(func(x *kvrelayv1.CkfFormat) { x.FingerprintBits = 0 }), kind: kvrelay.ErrZeroFormatField, field: "fingerprint width"},
		{name: "slots 0", err: f(func(x *kvrelayv1.CkfFormat) { x.SlotsPerBucket = 0 }), kind: kvrelay.ErrZeroFormatField, field: "slots per bucket"},
		{name: "zero beats unsupported triple", err: f(func(x *kvrelayv1.CkfFormat) { x.FormatVersion = 2; x.SlotsPerBucket = 0 }), kind: kvrelay.ErrZeroFormatField},
		{name: "format version 2", err: f(func(x *kvrelayv1.CkfFormat) { x.FormatVersion = 2 }), kind: kvrelay.ErrUnsupportedCkfFormat, unsupported: true},
		{name: "fingerprint 17", err: f(func(x *kvrelayv1.CkfFormat) { x.FingerprintBits = 17 }), kind: kvrelay.ErrUnsupportedCkfFormat, unsupported: true},
		{name: "slots 5", err: f(func(x *kvrelayv1.CkfFormat) { x.SlotsPerBucket = 5 }), kind: kvrelay.ErrUnsupportedCkfFormat, unsupported: true},
		{name: "triple beats bucket count", err: f(func(x *kvrelayv1.CkfFormat) { x.SlotsPerBucket = 5; x.BucketCount = 3 }), kind: kvrelay.ErrUnsupportedCkfFormat, unsupported: true},
		{name: "bucket count 2^24+1", err: f(func(x *kvrelayv1.CkfFormat) { x.BucketCount = 1<<24 + 1 }), kind: kvrelay.ErrBucketCountTooLarge, unsupported: true},
		{name: "bucket count 2^25", err: f(func(x *kvrelayv1.CkfFormat) { x.BucketCount = 1 << 25 }), kind: kvrelay.ErrBucketCountTooLarge, unsupported: true},
		{name: "bucket count max u64", err: f(func(x *kvrelayv1.CkfFormat) { x.BucketCount = ^uint64(0) }), kind: kvrelay.ErrBucketCountTooLarge, unsupported: true},
		{name: "bucket count 3", err: f(func(x *kvrelayv1.CkfFormat) { x.BucketCount = 3 }), kind: kvrelay.ErrUnsupportedBucketCount},
		{name: "bucket count 1", err: f(func(x *kvrelayv1.CkfFormat) { x.BucketCount = 1 }), kind: kvrelay.ErrUnsupportedBucketCount},
		{name: "nil pool id", err: kvrelay.ValidatePoolID(nil), kind: kvrelay.ErrMissingField},
	})
}

func registration(edit func(r *kvrelayv1.ModelRegistration)) error {
	r := descriptor().Registrations[0]
	edit(r)
	return kvrelay.ValidateModelRegistration(r)
}

// §3.4 descriptor rules and §8.2 scenarios 11 and 14.
func TestDescriptorRules(t *testing.T) {
	mustValid(t, "fixture", kvrelay.ValidatePoolDescriptor(descriptor()))
	noRegs := descriptor()
	noRegs.Registrations = nil
	mustValid(t, "no registrations", kvrelay.ValidatePoolDescriptor(noRegs))
	lora := descriptor()
	lora.Registrations[0].Target = &kvrelayv1.ModelTarget{Target: &kvrelayv1.ModelTarget_Lora{Lora: &kvrelayv1.LoraModelTarget{BaseModel: "llama", Adapter: "tenant-a"}}}
	mustValid(t, "LoRA target", kvrelay.ValidatePoolDescriptor(lora))
	mustValid(t, "roles [PREFILL, DECODE]", kvrelay.ValidateWorkerRoles([]kvrelayv1.WorkerRole{1, 2}))
	mustValid(t, "EAGLE", kvrelay.ValidateQuerySemantics(&kvrelayv1.KvQuerySemantics{KvBlockSize: 1, HashFormat: eagle}))

	// ModelTarget bytes 1a 00: an empty field 3, a future alternative.
	var future kvrelayv1.ModelTarget
	if err := proto.Unmarshal([]byte{0x1a, 0x00}, &future); err != nil {
		t.Fatal(err)
	}
	d := func(edit func(d *kvrelayv1.KvPoolDescriptor)) error {
		x := descriptor()
		edit(x)
		return kvrelay.ValidatePoolDescriptor(x)
	}
	q := func(size uint32, f kvrelayv1.KvQueryHashFormat) error {
		return kvrelay.ValidateQuerySemantics(&kvrelayv1.KvQuerySemantics{KvBlockSize: size, HashFormat: f})
	}
	roles := func(r ...kvrelayv1.WorkerRole) error { return kvrelay.ValidateWorkerRoles(r) }
	checkRules(t, []ruleCase{
		{name: "nil descriptor", err: kvrelay.ValidatePoolDescriptor(nil), kind: kvrelay.ErrMissingField},
		{name: "no producer", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.Producer = nil; x.QuerySemantics = nil }), kind: kvrelay.ErrMissingField, field: "pool producer"},
		{name: "producer checked first", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.Producer.LayoutGeneration = 0; x.ServingEndpoint = nil }), kind: kvrelay.ErrZeroLayoutGeneration},
		{name: "no serving endpoint", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.ServingEndpoint = nil }), kind: kvrelay.ErrMissingField, field: "serving endpoint"},
		{name: "endpoint namespace empty", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.ServingEndpoint.Namespace = "" }), kind: kvrelay.ErrInvalidText, field: "endpoint namespace"},
		{name: "endpoint component leading space", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.ServingEndpoint.Component = " backend" }), kind: kvrelay.ErrInvalidText, field: "endpoint component"},
		{name: "endpoint name trailing tab", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.ServingEndpoint.Endpoint = "generate\t" }), kind: kvrelay.ErrInvalidText, field: "endpoint name"},
		{name: "endpoint NBSP", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.ServingEndpoint.Endpoint = "\u00a0generate" }), kind: kvrelay.ErrInvalidText},
		{name: "endpoint ideographic space", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.ServingEndpoint.Endpoint = "generate\u3000" }), kind: kvrelay.ErrInvalidText},
		{name: "no query semantics", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.QuerySemantics = nil }), kind: kvrelay.ErrMissingField, field: "KV query semantics"},
		{name: "endpoint before query semantics", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.ServingEndpoint.Namespace = ""; x.QuerySemantics = nil }), kind: kvrelay.ErrInvalidText},
		{name: "block size 0", err: q(0, standard), kind: kvrelay.ErrZeroQueryBlockSize},
		{name: "block size before hash", err: q(0, 99), kind: kvrelay.ErrZeroQueryBlockSize},
		{name: "hash 0", err: q(64, 0), kind: kvrelay.ErrQueryHashFormat},
		{name: "hash 99", err: q(64, 99), kind: kvrelay.ErrQueryHashFormat, unsupported: true},
		{name: "hash -1", err: q(64, -1), kind: kvrelay.ErrQueryHashFormat, unsupported: true},
		{name: "query before registrations", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.QuerySemantics.KvBlockSize = 0; x.Registrations[0].Target = nil }), kind: kvrelay.ErrZeroQueryBlockSize},
		{name: "canonical id empty", err: registration(func(r *kvrelayv1.ModelRegistration) { r.CanonicalModelId = "" }), kind: kvrelay.ErrInvalidText, field: "canonical model ID"},
		{name: "target missing", err: registration(func(r *kvrelayv1.ModelRegistration) { r.Target = nil }), kind: kvrelay.ErrMissingField, field: "model target"},
		{name: "target 1a 00", err: registration(func(r *kvrelayv1.ModelRegistration) { r.Target = &future }), kind: kvrelay.ErrUnsupportedModelTarget, unsupported: true},
		{name: "base model blank", err: registration(func(r *kvrelayv1.ModelRegistration) { r.Target = baseTarget(" ") }), kind: kvrelay.ErrInvalidText, field: "base model ID"},
		{name: "LoRA base blank", err: registration(func(r *kvrelayv1.ModelRegistration) {
			r.Target = &kvrelayv1.ModelTarget{Target: &kvrelayv1.ModelTarget_Lora{Lora: &kvrelayv1.LoraModelTarget{Adapter: "a"}}}
		}), kind: kvrelay.ErrInvalidText, field: "LoRA base model ID"},
		{name: "LoRA adapter blank", err: registration(func(r *kvrelayv1.ModelRegistration) {
			r.Target = &kvrelayv1.ModelTarget{Target: &kvrelayv1.ModelTarget_Lora{Lora: &kvrelayv1.LoraModelTarget{BaseModel: "llama"}}}
		}), kind: kvrelay.ErrInvalidText, field: "LoRA adapter ID"},
		{name: "alias blank", err: registration(func(r *kvrelayv1.ModelRegistration) { r.Aliases = []string{"chat", ""} }), kind: kvrelay.ErrInvalidText, field: "model alias"},
		{name: "alias repeated", err: registration(func(r *kvrelayv1.ModelRegistration) { r.Aliases = []string{"chat", "chat"} }), kind: kvrelay.ErrDuplicateAlias, text: "chat"},
		{name: "nil registration", err: kvrelay.ValidateModelRegistration(nil), kind: kvrelay.ErrMissingField},
		{name: "registration error in descriptor", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.Registrations[0].Target = &future }), kind: kvrelay.ErrUnsupportedModelTarget, unsupported: true},
		{name: "registrations before roles", err: d(func(x *kvrelayv1.KvPoolDescriptor) {
			x.Registrations[0].Aliases = []string{"a", "a"}
			x.PoolRoles = nil
		}), kind: kvrelay.ErrDuplicateAlias},
		{name: "pool roles empty", err: d(func(x *kvrelayv1.KvPoolDescriptor) { x.PoolRoles = nil }), kind: kvrelay.ErrMissingWorkerRoles},
		{name: "roles []", err: roles(), kind: kvrelay.ErrMissingWorkerRoles},
		{name: "roles [0]", err: roles(0), kind: kvrelay.ErrWorkerRole},
		{name: "roles [99]", err: roles(99), kind: kvrelay.ErrWorkerRole, unsupported: true},
		{name: "roles [-1]", err: roles(-1), kind: kvrelay.ErrWorkerRole, unsupported: true},
		{name: "roles [DECODE, DECODE]", err: roles(2, 2), kind: kvrelay.ErrDuplicateWorkerRole, text: "WORKER_ROLE_DECODE"},
		{name: "roles [LEGACY, 0]", err: roles(5, 0), kind: kvrelay.ErrWorkerRole},
	})
}

// §3.4 topology rules and §8.2 scenarios 11 and 15.
func TestTopologyRules(t *testing.T) {
	mustValid(t, "fixture", kvrelay.ValidateTopologyEntry(topology()))
	dotted := topology()
	a, b := clone(dotted.Members[0]), clone(dotted.Members[0])
	a.Endpoint.Component = "backend.a"
	b.Endpoint.Endpoint = "a.generate"
	dotted.Members = []*kvrelayv1.TopologyMember{a, b}
	mustValid(t, "dotted tuples are distinct", kvrelay.ValidateTopologyEntry(dotted))
	noPool := topology()
	noPool.Members[0].PoolId = nil
	mustValid(t, "member without pool", kvrelay.ValidateTopologyEntry(noPool))
	empty := topology()
	empty.PresentRoles, empty.DuplicateRoleEndpoints, empty.Adapters = nil, nil, nil
	mustValid(t, "empty sets", kvrelay.ValidateTopologyEntry(empty))

	e := func(edit func(e *kvrelayv1.TopologyEntry)) error {
		x := topology()
		edit(x)
		return kvrelay.ValidateTopologyEntry(x)
	}
	rules := []ruleCase{
		{name: "nil entry", err: kvrelay.ValidateTopologyEntry(nil), kind: kvrelay.ErrMissingField},
		{name: "namespace blank", err: e(func(x *kvrelayv1.TopologyEntry) { x.Namespace = "" }), kind: kvrelay.ErrInvalidText, field: "topology namespace"},
		{name: "canonical id padded", err: e(func(x *kvrelayv1.TopologyEntry) { x.CanonicalModelId = "llama " }), kind: kvrelay.ErrInvalidText, field: "topology canonical model ID"},
		{name: "state 99", err: e(func(x *kvrelayv1.TopologyEntry) { x.State = 99 }), kind: kvrelay.ErrReadinessState, unsupported: true},
		{name: "state -1", err: e(func(x *kvrelayv1.TopologyEntry) { x.State = -1 }), kind: kvrelay.ErrReadinessState, unsupported: true},
		{name: "state 99 beats no members", err: e(func(x *kvrelayv1.TopologyEntry) { x.State = 99; x.Members = nil }), kind: kvrelay.ErrReadinessState, unsupported: true},
		{name: "UNKNOWN without members", err: e(func(x *kvrelayv1.TopologyEntry) { x.State = 0; x.Members = nil }), kind: kvrelay.ErrMissingTopologyMembers},
		{name: "present roles [0]", err: e(func(x *kvrelayv1.TopologyEntry) { x.PresentRoles = []kvrelayv1.WorkerRole{0} }), kind: kvrelay.ErrWorkerRole},
		{name: "missing roles [99]", err: e(func(x *kvrelayv1.TopologyEntry) { x.MissingRoles = []kvrelayv1.WorkerRole{99} }), kind: kvrelay.ErrWorkerRole, unsupported: true},
		{name: "missing roles repeated", err: e(func(x *kvrelayv1.TopologyEntry) { x.MissingRoles = []kvrelayv1.WorkerRole{1, 1} }), kind: kvrelay.ErrDuplicateWorkerRole},
		{name: "duplicate endpoints LEGACY", err: e(func(x *kvrelayv1.TopologyEntry) { x.DuplicateRoleEndpoints = []kvrelayv1.WorkerRole{5} }), kind: kvrelay.ErrUnsupportedDuplicateEndpointRole},
		{name: "duplicate endpoints AGGREGATED", err: e(func(x *kvrelayv1.TopologyEntry) { x.DuplicateRoleEndpoints = []kvrelayv1.WorkerRole{4} }), kind: kvrelay.ErrUnsupportedDuplicateEndpointRole},
		{name: "duplicate endpoints ENCODE", err: e(func(x *kvrelayv1.TopologyEntry) { x.DuplicateRoleEndpoints = []kvrelayv1.WorkerRole{3} }), kind: kvrelay.ErrUnsupportedDuplicateEndpointRole},
		{name: "duplicate endpoints 0", err: e(func(x *kvrelayv1.TopologyEntry) { x.DuplicateRoleEndpoints = []kvrelayv1.WorkerRole{0} }), kind: kvrelay.ErrWorkerRole},
		{name: "duplicate endpoints 99", err: e(func(x *kvrelayv1.TopologyEntry) { x.DuplicateRoleEndpoints = []kvrelayv1.WorkerRole{99} }), kind: kvrelay.ErrWorkerRole, unsupported: true},
		{name: "duplicate endpoints [DECODE, DECODE]", err: e(func(x *kvrelayv1.TopologyEntry) { x.DuplicateRoleEndpoints = []kvrelayv1.WorkerRole{2, 2} }), kind: kvrelay.ErrDuplicateWorkerRole},
		{name: "no members", err: e(func(x *kvrelayv1.TopologyEntry) { x.Members = nil }), kind: kvrelay.ErrMissingTopologyMembers},
		{name: "member endpoint missing", err: e(func(x *kvrelayv1.TopologyEntry) { x.Members[0].Endpoint = nil }), kind: kvrelay.ErrMissingField, field: "topology member endpoint"},
		{name: "member endpoint text", err: e(func(x *kvrelayv1.TopologyEntry) { x.Members[0].Endpoint.Component = "" }), kind: kvrelay.ErrInvalidText, field: "endpoint component"},
		{name: "member namespace other", err: e(func(x *kvrelayv1.TopologyEntry) { x.Members[0].Endpoint.Namespace = "other" }), kind: kvrelay.ErrTopologyNamespaceMismatch, text: "other"},
		{name: "member roles empty", err: e(func(x *kvrelayv1.TopologyEntry) { x.Members[0].Roles = nil }), kind: kvrelay.ErrMissingWorkerRoles},
		{name: "member role UNSPECIFIED", err: e(func(x *kvrelayv1.TopologyEntry) { x.Members[0].Roles = []kvrelayv1.WorkerRole{0} }), kind: kvrelay.ErrWorkerRole},
		{name: "member pool id unsupported", err: e(func(x *kvrelayv1.TopologyEntry) { x.Members[0].PoolId.IdentityVersion = 2 }), kind: kvrelay.ErrPoolIdentityVersion, unsupported: true},
		{name: "member pool id present but empty", err: e(func(x *kvrelayv1.TopologyEntry) { x.Members[0].PoolId = &kvrelayv1.KvPoolId{} }), kind: kvrelay.ErrPoolIdentityVersion},
		{name: "member repeated", err: e(func(x *kvrelayv1.TopologyEntry) { x.Members = append(x.Members, clone(x.Members[0])) }), kind: kvrelay.ErrDuplicateTopologyMember, text: "prod.backend.generate"},
		{name: "adapter blank", err: e(func(x *kvrelayv1.TopologyEntry) { x.Adapters[0].CanonicalModelId = "" }), kind: kvrelay.ErrInvalidText, field: "adapter canonical model ID"},
		{name: "adapter state 99", err: e(func(x *kvrelayv1.TopologyEntry) { x.Adapters[0].State = 99 }), kind: kvrelay.ErrReadinessState, unsupported: true},
		{name: "adapter missing roles [0]", err: e(func(x *kvrelayv1.TopologyEntry) { x.Adapters[0].MissingRoles = []kvrelayv1.WorkerRole{0} }), kind: kvrelay.ErrWorkerRole},
		{name: "adapter repeated", err: e(func(x *kvrelayv1.TopologyEntry) { x.Adapters = append(x.Adapters, clone(x.Adapters[0])) }), kind: kvrelay.ErrDuplicateAdapter, text: "tenant-a"},
	}
	checkRules(t, rules)
}

func catalog(pools ...*kvrelayv1.KvPoolDescriptor) *kvrelayv1.KvPoolCatalogUpdate {
	return &kvrelayv1.KvPoolCatalogUpdate{
		ProtocolVersion: 1, Relay: relay(), Revision: 3, ContractMarker: kvrelayv1.ContractMarker,
		Snapshot: &kvrelayv1.KvPoolCatalogSnapshot{Pools: pools},
	}
}

// §3.4 consumer scope: malformed or unsupported entries with a trustworthy key
// are quarantined one by one; unidentifiable or duplicate entries and bad
// envelopes invalidate the whole snapshot.
func TestCatalogUpdate(t *testing.T) {
	good := descriptor()
	unsupported := descriptor()
	unsupported.Producer.PoolId.IdentityVersion = 2
	badMeta := descriptor()
	badMeta.Producer.LayoutGeneration = 2
	badMeta.PoolRoles = nil

	errs, err := kvrelay.ValidateCatalogUpdate(catalog(good, unsupported, badMeta))
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || !errors.Is(errs[1], kvrelay.ErrUnsupported) || !errors.Is(errs[2], kvrelay.ErrMissingWorkerRoles) {
		t.Fatalf("per-pool results %v", errs)
	}
	if errs, err := kvrelay.ValidateCatalogUpdate(catalog()); err != nil || len(errs) != 0 {
		t.Fatalf("empty catalog: %v %v", errs, err)
	}

	noProducer := descriptor()
	noProducer.Producer = nil
	malformedProducer := descriptor()
	malformedProducer.Producer.LayoutGeneration = 0
	badEnvelope := catalog(good)
	badEnvelope.ProtocolVersion = 2
	noRelay := catalog(good)
	noRelay.Relay = nil
	noSnapshot := catalog()
	noSnapshot.Snapshot = nil
	whole := func(u *kvrelayv1.KvPoolCatalogUpdate) error {
		errs, err := kvrelay.ValidateCatalogUpdate(u)
		if err != nil && errs != nil {
			t.Errorf("per-entry results returned with a whole-update error")
		}
		return err
	}
	checkRules(t, []ruleCase{
		{name: "envelope", err: whole(badEnvelope), kind: kvrelay.ErrProtocolVersion},
		{name: "no relay", err: whole(noRelay), kind: kvrelay.ErrMissingField, field: "relay"},
		{name: "no snapshot", err: whole(noSnapshot), kind: kvrelay.ErrMissingField, field: "catalog snapshot"},
		{name: "no producer", err: whole(catalog(good, noProducer)), kind: kvrelay.ErrUnidentifiableEntry},
		{name: "malformed producer", err: whole(catalog(malformedProducer)), kind: kvrelay.ErrUnidentifiableEntry},
		{name: "duplicate producer key", err: whole(catalog(good, clone(good))), kind: kvrelay.ErrDuplicateKey},
	})
	// The wrapped cause stays reachable.
	if err := whole(catalog(noProducer)); !errors.Is(err, kvrelay.ErrMissingField) {
		t.Errorf("cause not wrapped: %v", err)
	}
}

func TestReadinessUpdate(t *testing.T) {
	u := func(entries ...*kvrelayv1.TopologyEntry) *kvrelayv1.ServingReadinessUpdate {
		return &kvrelayv1.ServingReadinessUpdate{ProtocolVersion: 1, Relay: relay(), Revision: 1, Entries: entries, ContractMarker: kvrelayv1.ContractMarker}
	}
	other := topology()
	other.CanonicalModelId = "mistral"
	other.State = 99
	errs, err := kvrelay.ValidateReadinessUpdate(u(topology(), other))
	if err != nil || errs[0] != nil || !errors.Is(errs[1], kvrelay.ErrReadinessState) {
		t.Fatalf("results %v, %v", errs, err)
	}
	unkeyed := topology()
	unkeyed.Namespace = " prod"
	badMarker := u(topology())
	badMarker.ContractMarker = 1
	whole := func(x *kvrelayv1.ServingReadinessUpdate) error {
		_, err := kvrelay.ValidateReadinessUpdate(x)
		return err
	}
	checkRules(t, []ruleCase{
		{name: "marker", err: whole(badMarker), kind: kvrelay.ErrContractMarker},
		{name: "unidentifiable", err: whole(u(topology(), unkeyed)), kind: kvrelay.ErrUnidentifiableEntry},
		{name: "duplicate key", err: whole(u(topology(), topology())), kind: kvrelay.ErrDuplicateKey},
	})
}
