package kvrelay

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
)

// MaxSubscriberIDBytes bounds subscriber_id (§3.4 rule 2).
const MaxSubscriberIDBytes = 128

// digestLen is the length of every identity digest.
const digestLen = 16

// ValidateContractMarker checks the v1 marker (§2.1). A server checks it
// before anything else.
func ValidateContractMarker(marker uint32) error {
	if marker != kvrelayv1.ContractMarker {
		return verr(ErrContractMarker, "contract marker", int64(marker))
	}
	return nil
}

// ValidateEnvelope checks a response's marker, then its protocol version, so
// a foreign contract is reported as such rather than as a version skew.
func ValidateEnvelope(protocolVersion, marker uint32) error {
	if err := ValidateContractMarker(marker); err != nil {
		return err
	}
	if protocolVersion != kvrelayv1.ProtocolVersion {
		return verr(ErrProtocolVersion, "protocol version", int64(protocolVersion))
	}
	return nil
}

// ValidateResponseEnvelope is ValidateEnvelope plus the presence of the relay
// identity, which every response carries. Whether the identity stays
// constant over a stream is the consumer's state to keep.
func ValidateResponseEnvelope(protocolVersion, marker uint32, relay *kvrelayv1.RelayIdentity) error {
	if err := ValidateEnvelope(protocolVersion, marker); err != nil {
		return err
	}
	if relay == nil {
		return missing("relay")
	}
	return nil
}

// ValidateSubscriberID checks the streaming RPCs' diagnostic label: non-empty,
// at most 128 bytes, no Unicode Cc character (so it cannot forge log lines).
func ValidateSubscriberID(id string) error {
	if id == "" {
		return &ValidationError{Kind: ErrSubscriberID, Field: "subscriber id"}
	}
	if len(id) > MaxSubscriberIDBytes {
		return &ValidationError{Kind: ErrSubscriberID, Field: "subscriber id length", Value: int64(len(id))}
	}
	if !utf8.ValidString(id) {
		// Unreachable from protobuf (proto3 strings are UTF-8 checked), but
		// the function also serves callers with raw strings.
		return &ValidationError{Kind: ErrSubscriberID, Field: "subscriber id encoding"}
	}
	for _, r := range id {
		// Go's IsControl is exactly the Cc category, like Rust's is_control.
		if unicode.IsControl(r) {
			return &ValidationError{Kind: ErrSubscriberID, Field: "subscriber id character", Value: int64(r)}
		}
	}
	return nil
}

// Request validation (§3.4 request side, §4.1 order). Each returns the first
// failure; Status maps it to the code and reason the server sends.

// ValidateRelayInfoRequest checks a GetRelayInfo request.
func ValidateRelayInfoRequest(r *kvrelayv1.RelayInfoRequest) error {
	return ValidateContractMarker(r.GetContractMarker())
}

// ValidateWatchKvPoolCatalogRequest checks a WatchKvPoolCatalog request.
func ValidateWatchKvPoolCatalogRequest(r *kvrelayv1.WatchKvPoolCatalogRequest) error {
	return streamRequest(r.GetContractMarker(), r.GetSubscriberId())
}

// ValidateSubscribeServingReadinessRequest checks a SubscribeServingReadiness
// request.
func ValidateSubscribeServingReadinessRequest(r *kvrelayv1.SubscribeServingReadinessRequest) error {
	return streamRequest(r.GetContractMarker(), r.GetSubscriberId())
}

// ValidateSubscribeKvPoolLoadRequest checks a SubscribeKvPoolLoad request.
func ValidateSubscribeKvPoolLoadRequest(r *kvrelayv1.SubscribeKvPoolLoadRequest) error {
	return streamRequest(r.GetContractMarker(), r.GetSubscriberId())
}

// ValidateSubscribeServingLoadRequest checks a SubscribeServingLoad request.
func ValidateSubscribeServingLoadRequest(r *kvrelayv1.SubscribeServingLoadRequest) error {
	return streamRequest(r.GetContractMarker(), r.GetSubscriberId())
}

// ValidateSubscribeKvPoolRequest checks a SubscribeKvPool request: marker,
// subscriber id, expected_producer present, then the full producer rules, and
// returns the key to look the pool up by. Admission (limits, pool lookup,
// generation match) follows in the server.
func ValidateSubscribeKvPoolRequest(r *kvrelayv1.SubscribeKvPoolRequest) (ProducerKey, error) {
	if err := streamRequest(r.GetContractMarker(), r.GetSubscriberId()); err != nil {
		return ProducerKey{}, err
	}
	if r.GetExpectedProducer() == nil {
		return ProducerKey{}, missing("expected producer")
	}
	return KeyOf(r.GetExpectedProducer())
}

func streamRequest(marker uint32, subscriber string) error {
	if err := ValidateContractMarker(marker); err != nil {
		return err
	}
	return ValidateSubscriberID(subscriber)
}

// Identity validation.

// ValidatePoolID checks identity_version == 1, the indexer domain's presence,
// then each digest (cache semantics first).
func ValidatePoolID(p *kvrelayv1.KvPoolId) error {
	if p == nil {
		return missing("pool ID")
	}
	if v := p.GetIdentityVersion(); v != kvrelayv1.PoolIdentityVersion {
		return verr(ErrPoolIdentityVersion, "pool identity version", int64(v))
	}
	d := p.GetIndexerDomain()
	if d == nil {
		return missing("indexer domain")
	}
	if err := validateDigest("cache semantics", d.GetCacheSemantics()); err != nil {
		return err
	}
	return validateDigest("routing scope", d.GetRoutingScope())
}

func validateDigest(field string, d *kvrelayv1.DigestIdentity) error {
	if d == nil {
		return missing(field)
	}
	if n := len(d.GetDigest()); n != digestLen {
		return verr(ErrDigestLength, field, int64(n))
	}
	switch s := d.GetSource(); s {
	case kvrelayv1.IdentitySource_IDENTITY_SOURCE_DEFAULT_DERIVED, kvrelayv1.IdentitySource_IDENTITY_SOURCE_EXPLICIT:
		return nil
	default:
		return verr(ErrIdentitySource, field, int64(s))
	}
}

// ValidateCkfFormat checks that no field but the seed is zero, that the
// triple is (1, 16, 4), that bucket_count ≤ 2^24, and that it is a power of
// two ≥ 2 — the only formats CBI1 can carry.
func ValidateCkfFormat(f *kvrelayv1.CkfFormat) error {
	if f == nil {
		return missing("producer CKF format")
	}
	zero := []struct {
		field string
		v     uint64
	}{
		{"format version", uint64(f.GetFormatVersion())},
		{"bucket count", f.GetBucketCount()},
		{"fingerprint width", uint64(f.GetFingerprintBits())},
		{"slots per bucket", uint64(f.GetSlotsPerBucket())},
	}
	for _, z := range zero {
		if z.v == 0 {
			return verr(ErrZeroFormatField, z.field, 0)
		}
	}
	if f.GetFormatVersion() != uint32(cbi1.FormatVersion) || f.GetFingerprintBits() != uint32(cbi1.FingerprintBits) ||
		f.GetSlotsPerBucket() != uint32(cbi1.SlotsPerBucket) {
		return &ValidationError{Kind: ErrUnsupportedCkfFormat, Field: "CKF format", Value: int64(f.GetFormatVersion()),
			Text: formatTriple(f)}
	}
	n := f.GetBucketCount()
	if n > cbi1.MaxBucketCount {
		return &ValidationError{Kind: ErrBucketCountTooLarge, Field: "bucket count", Value: int64(min(n, math.MaxInt64))}
	}
	if n < 2 || n&(n-1) != 0 {
		return verr(ErrUnsupportedBucketCount, "bucket count", int64(n))
	}
	return nil
}

func formatTriple(f *kvrelayv1.CkfFormat) string {
	return fmt.Sprintf("version=%d fingerprint_bits=%d slots_per_bucket=%d",
		f.GetFormatVersion(), f.GetFingerprintBits(), f.GetSlotsPerBucket())
}

// ValidateProducerIdentity checks, in order: pool_id present and valid,
// layout_generation ≠ 0, ckf_format present and valid.
func ValidateProducerIdentity(p *kvrelayv1.ProducerIdentity) error {
	if p == nil {
		return missing("producer")
	}
	if p.GetPoolId() == nil {
		return missing("producer pool ID")
	}
	if err := ValidatePoolID(p.GetPoolId()); err != nil {
		return err
	}
	if p.GetLayoutGeneration() == 0 {
		return verr(ErrZeroLayoutGeneration, "layout generation", 0)
	}
	return ValidateCkfFormat(p.GetCkfFormat())
}

// Descriptor validation.

// validText is the spec's text rule: non-empty and unchanged by trimming
// Unicode White_Space (Go's unicode.IsSpace is that property, as Rust's
// str::trim uses).
func validText(field, s string) error {
	if s == "" || strings.TrimSpace(s) != s {
		return &ValidationError{Kind: ErrInvalidText, Field: field, Text: s}
	}
	return nil
}

// ValidateEndpointID checks the three texts of an endpoint.
func ValidateEndpointID(e *kvrelayv1.DynamoEndpointId) error {
	if e == nil {
		return missing("endpoint")
	}
	if err := validText("endpoint namespace", e.GetNamespace()); err != nil {
		return err
	}
	if err := validText("endpoint component", e.GetComponent()); err != nil {
		return err
	}
	return validText("endpoint name", e.GetEndpoint())
}

// ValidateModelRegistration checks the canonical id, the target (present, its
// oneof set, its ids valid), then every alias (valid, unique).
func ValidateModelRegistration(r *kvrelayv1.ModelRegistration) error {
	if r == nil {
		return missing("model registration")
	}
	if err := validText("canonical model ID", r.GetCanonicalModelId()); err != nil {
		return err
	}
	if r.GetTarget() == nil {
		return missing("model target")
	}
	switch t := r.GetTarget().GetTarget().(type) {
	case *kvrelayv1.ModelTarget_Base:
		if err := validText("base model ID", t.Base.GetBaseModel()); err != nil {
			return err
		}
	case *kvrelayv1.ModelTarget_Lora:
		if err := validText("LoRA base model ID", t.Lora.GetBaseModel()); err != nil {
			return err
		}
		if err := validText("LoRA adapter ID", t.Lora.GetAdapter()); err != nil {
			return err
		}
	default:
		// nil: unset, which on the wire is indistinguishable from a future
		// alternative this reader skipped as an unknown field.
		return &ValidationError{Kind: ErrUnsupportedModelTarget, Field: "model target"}
	}
	seen := make(map[string]struct{}, len(r.GetAliases()))
	for _, a := range r.GetAliases() {
		if err := validText("model alias", a); err != nil {
			return err
		}
		if _, dup := seen[a]; dup {
			return &ValidationError{Kind: ErrDuplicateAlias, Field: "model alias", Text: a}
		}
		seen[a] = struct{}{}
	}
	return nil
}

// ValidateQuerySemantics checks kv_block_size > 0 and a known, specified hash
// format.
func ValidateQuerySemantics(q *kvrelayv1.KvQuerySemantics) error {
	if q == nil {
		return missing("KV query semantics")
	}
	if q.GetKvBlockSize() == 0 {
		return verr(ErrZeroQueryBlockSize, "KV block size", 0)
	}
	switch f := q.GetHashFormat(); f {
	case kvrelayv1.KvQueryHashFormat_KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1,
		kvrelayv1.KvQueryHashFormat_KV_QUERY_HASH_FORMAT_DYNAMO_EAGLE_V1:
		return nil
	default:
		return verr(ErrQueryHashFormat, "hash format", int64(f))
	}
}

// ValidatePoolDescriptor checks producer → serving endpoint → query semantics
// → each registration → pool roles (non-empty set). An empty registration
// list is accepted, as in Dynamo's wire helper.
func ValidatePoolDescriptor(d *kvrelayv1.KvPoolDescriptor) error {
	if d == nil {
		return missing("pool descriptor")
	}
	if d.GetProducer() == nil {
		return missing("pool producer")
	}
	if err := ValidateProducerIdentity(d.GetProducer()); err != nil {
		return err
	}
	if d.GetServingEndpoint() == nil {
		return missing("serving endpoint")
	}
	if err := ValidateEndpointID(d.GetServingEndpoint()); err != nil {
		return err
	}
	if err := ValidateQuerySemantics(d.GetQuerySemantics()); err != nil {
		return err
	}
	for _, r := range d.GetRegistrations() {
		if err := ValidateModelRegistration(r); err != nil {
			return err
		}
	}
	return ValidateWorkerRoles(d.GetPoolRoles())
}

// ValidateWorkerRoles checks a role set that must not be empty.
func ValidateWorkerRoles(roles []kvrelayv1.WorkerRole) error {
	if len(roles) == 0 {
		return verr(ErrMissingWorkerRoles, "worker roles", 0)
	}
	return validateRoleSet(roles)
}

// validateRoleSet checks a possibly empty set: every role known and not
// UNSPECIFIED, none repeated.
func validateRoleSet(roles []kvrelayv1.WorkerRole) error {
	var seen uint64 // known roles are 1..5
	for _, r := range roles {
		if !knownRole(r) {
			return verr(ErrWorkerRole, "worker role", int64(r))
		}
		if seen&(1<<uint(r)) != 0 {
			return &ValidationError{Kind: ErrDuplicateWorkerRole, Field: "worker role", Value: int64(r), Text: r.String()}
		}
		seen |= 1 << uint(r)
	}
	return nil
}

func knownRole(r kvrelayv1.WorkerRole) bool {
	return r >= kvrelayv1.WorkerRole_WORKER_ROLE_PREFILL && r <= kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY
}

// ValidateCatalogUpdate checks a catalog message and returns one result per
// descriptor: nil for a valid one, its error otherwise, so that the caller
// quarantines only that pool (§3.4 consumer scope). The whole update is
// rejected (second result) for a bad envelope, a missing snapshot, a
// descriptor whose producer is missing or malformed (it has no trustworthy
// key: ErrUnidentifiableEntry) or a producer key listed twice
// (ErrDuplicateKey). A producer that is merely unsupported is an entry error.
func ValidateCatalogUpdate(u *kvrelayv1.KvPoolCatalogUpdate) ([]error, error) {
	if err := ValidateResponseEnvelope(u.GetProtocolVersion(), u.GetContractMarker(), u.GetRelay()); err != nil {
		return nil, err
	}
	if u.GetSnapshot() == nil {
		return nil, missing("catalog snapshot")
	}
	pools := u.GetSnapshot().GetPools()
	errs := make([]error, len(pools))
	seen := make(map[ProducerKey]struct{}, len(pools))
	for i, d := range pools {
		k, err := KeyOf(d.GetProducer())
		if err != nil {
			if errors.Is(err, ErrUnsupported) {
				errs[i] = err
				continue
			}
			return nil, &ValidationError{Kind: ErrUnidentifiableEntry, Field: "catalog pool", Value: int64(i), Err: err}
		}
		if _, dup := seen[k]; dup {
			return nil, &ValidationError{Kind: ErrDuplicateKey, Field: "catalog pool producer", Value: int64(i)}
		}
		seen[k] = struct{}{}
		errs[i] = ValidatePoolDescriptor(d)
	}
	return errs, nil
}

// Topology validation.

// ValidateTopologyEntry checks, in order: namespace and canonical id texts;
// state known; present and missing roles valid sets; duplicate_role_endpoints
// a valid set of PREFILL/DECODE only; members non-empty; each member (endpoint
// present and valid, same namespace, non-empty role set, pool_id valid if
// present, tuple unique); each adapter (text, state, missing roles, unique).
func ValidateTopologyEntry(e *kvrelayv1.TopologyEntry) error {
	if e == nil {
		return missing("topology entry")
	}
	if err := validText("topology namespace", e.GetNamespace()); err != nil {
		return err
	}
	if err := validText("topology canonical model ID", e.GetCanonicalModelId()); err != nil {
		return err
	}
	if err := validateReadinessState(e.GetState()); err != nil {
		return err
	}
	if err := validateRoleSet(e.GetPresentRoles()); err != nil {
		return err
	}
	if err := validateRoleSet(e.GetMissingRoles()); err != nil {
		return err
	}
	if err := validateRoleSet(e.GetDuplicateRoleEndpoints()); err != nil {
		return err
	}
	for _, r := range e.GetDuplicateRoleEndpoints() {
		if r != kvrelayv1.WorkerRole_WORKER_ROLE_PREFILL && r != kvrelayv1.WorkerRole_WORKER_ROLE_DECODE {
			return &ValidationError{Kind: ErrUnsupportedDuplicateEndpointRole, Field: "duplicate role endpoints",
				Value: int64(r), Text: r.String()}
		}
	}
	if len(e.GetMembers()) == 0 {
		return verr(ErrMissingTopologyMembers, "topology members", 0)
	}
	type endpointKey struct{ namespace, component, endpoint string }
	members := make(map[endpointKey]struct{}, len(e.GetMembers()))
	for _, m := range e.GetMembers() {
		ep := m.GetEndpoint()
		if ep == nil {
			return missing("topology member endpoint")
		}
		if err := ValidateEndpointID(ep); err != nil {
			return err
		}
		if ep.GetNamespace() != e.GetNamespace() {
			return &ValidationError{Kind: ErrTopologyNamespaceMismatch, Field: "topology member namespace", Text: ep.GetNamespace()}
		}
		if err := ValidateWorkerRoles(m.GetRoles()); err != nil {
			return err
		}
		if m.PoolId != nil {
			if err := ValidatePoolID(m.GetPoolId()); err != nil {
				return err
			}
		}
		// Compare tuples: "backend.a"/"generate" and "backend"/"a.generate"
		// are different endpoints even though their dotted forms collide.
		k := endpointKey{ep.GetNamespace(), ep.GetComponent(), ep.GetEndpoint()}
		if _, dup := members[k]; dup {
			return &ValidationError{Kind: ErrDuplicateTopologyMember, Field: "topology member",
				Text: k.namespace + "." + k.component + "." + k.endpoint}
		}
		members[k] = struct{}{}
	}
	adapters := make(map[string]struct{}, len(e.GetAdapters()))
	for _, a := range e.GetAdapters() {
		if err := validText("adapter canonical model ID", a.GetCanonicalModelId()); err != nil {
			return err
		}
		if err := validateReadinessState(a.GetState()); err != nil {
			return err
		}
		if err := validateRoleSet(a.GetMissingRoles()); err != nil {
			return err
		}
		if _, dup := adapters[a.GetCanonicalModelId()]; dup {
			return &ValidationError{Kind: ErrDuplicateAdapter, Field: "adapter", Text: a.GetCanonicalModelId()}
		}
		adapters[a.GetCanonicalModelId()] = struct{}{}
	}
	return nil
}

func validateReadinessState(s kvrelayv1.ServingReadinessState) error {
	switch s {
	case kvrelayv1.ServingReadinessState_SERVING_READINESS_STATE_UNKNOWN,
		kvrelayv1.ServingReadinessState_SERVING_READINESS_STATE_UNAVAILABLE,
		kvrelayv1.ServingReadinessState_SERVING_READINESS_STATE_READY:
		return nil
	}
	return verr(ErrReadinessState, "readiness state", int64(s))
}

// ValidateReadinessUpdate checks a readiness message and returns one result
// per entry (nil = valid) for per-entry quarantine. The whole update is
// rejected for a bad envelope, an entry whose key (namespace, canonical id)
// is not valid text (ErrUnidentifiableEntry) or a key listed twice
// (ErrDuplicateKey).
func ValidateReadinessUpdate(u *kvrelayv1.ServingReadinessUpdate) ([]error, error) {
	if err := ValidateResponseEnvelope(u.GetProtocolVersion(), u.GetContractMarker(), u.GetRelay()); err != nil {
		return nil, err
	}
	type entryKey struct{ namespace, model string }
	entries := u.GetEntries()
	errs := make([]error, len(entries))
	seen := make(map[entryKey]struct{}, len(entries))
	for i, e := range entries {
		k := entryKey{e.GetNamespace(), e.GetCanonicalModelId()}
		if err := errors.Join(validText("topology namespace", k.namespace),
			validText("topology canonical model ID", k.model)); err != nil {
			return nil, &ValidationError{Kind: ErrUnidentifiableEntry, Field: "topology entry", Value: int64(i), Err: err}
		}
		if _, dup := seen[k]; dup {
			return nil, &ValidationError{Kind: ErrDuplicateKey, Field: "topology entry", Text: k.namespace + "/" + k.model}
		}
		seen[k] = struct{}{}
		errs[i] = ValidateTopologyEntry(e)
	}
	return errs, nil
}
