package kvrelay

import (
	"fmt"
	"strconv"
)

// Kind names one validation rule. Every Kind is an error, so callers match
// with errors.Is(err, kvrelay.ErrDigestLength).
type Kind uint8

const (
	// ErrContractMarker: contract_marker ≠ 0x4B565231 (§2.1).
	ErrContractMarker Kind = iota + 1
	// ErrProtocolVersion: a response's protocol_version ≠ 1.
	ErrProtocolVersion
	// ErrSubscriberID: subscriber_id empty, over 128 bytes or with a control
	// character.
	ErrSubscriberID
	// ErrMissingField: a required embedded message is absent (Field names it).
	ErrMissingField
	// ErrPoolIdentityVersion: KvPoolId.identity_version ≠ 1.
	ErrPoolIdentityVersion
	// ErrDigestLength: a digest is not exactly 16 bytes.
	ErrDigestLength
	// ErrIdentitySource: a digest source is UNSPECIFIED or unknown.
	ErrIdentitySource
	// ErrZeroLayoutGeneration: layout_generation is 0.
	ErrZeroLayoutGeneration
	// ErrZeroFormatField: a CkfFormat field other than the seed is 0.
	ErrZeroFormatField
	// ErrUnsupportedCkfFormat: (format_version, fingerprint_bits,
	// slots_per_bucket) ≠ (1, 16, 4).
	ErrUnsupportedCkfFormat
	// ErrBucketCountTooLarge: bucket_count > 2^24.
	ErrBucketCountTooLarge
	// ErrUnsupportedBucketCount: bucket_count not a power of two ≥ 2.
	ErrUnsupportedBucketCount
	// ErrInvalidText: a text field is empty or has surrounding whitespace.
	ErrInvalidText
	// ErrUnsupportedModelTarget: ModelTarget's oneof is unset (an unknown
	// future alternative).
	ErrUnsupportedModelTarget
	// ErrDuplicateAlias: a registration repeats an alias.
	ErrDuplicateAlias
	// ErrZeroQueryBlockSize: kv_block_size is 0.
	ErrZeroQueryBlockSize
	// ErrQueryHashFormat: hash_format UNSPECIFIED or unknown.
	ErrQueryHashFormat
	// ErrMissingWorkerRoles: a role set that must be non-empty is empty.
	ErrMissingWorkerRoles
	// ErrWorkerRole: a role is UNSPECIFIED or unknown.
	ErrWorkerRole
	// ErrDuplicateWorkerRole: a role set repeats a role.
	ErrDuplicateWorkerRole
	// ErrUnsupportedDuplicateEndpointRole: duplicate_role_endpoints lists a
	// role other than PREFILL or DECODE.
	ErrUnsupportedDuplicateEndpointRole
	// ErrReadinessState: a readiness state is unknown.
	ErrReadinessState
	// ErrMissingTopologyMembers: a topology entry has no members.
	ErrMissingTopologyMembers
	// ErrTopologyNamespaceMismatch: a member's namespace differs from its
	// entry's.
	ErrTopologyNamespaceMismatch
	// ErrDuplicateTopologyMember: an entry repeats a (namespace, component,
	// endpoint) tuple.
	ErrDuplicateTopologyMember
	// ErrDuplicateAdapter: an entry repeats an adapter canonical id.
	ErrDuplicateAdapter
	// ErrDuplicateKey: a complete snapshot (catalog, readiness) lists the
	// same key twice.
	ErrDuplicateKey
	// ErrUnidentifiableEntry: an entry of a complete snapshot has no
	// trustworthy key, so it cannot even be quarantined on its own. The
	// entry's own error is wrapped.
	ErrUnidentifiableEntry
	// ErrProducerMismatch: a frame's producer is not the subscribed key.
	ErrProducerMismatch
	// ErrFilterUpdateKind: a FilterUpdate kind is UNSPECIFIED or unknown.
	ErrFilterUpdateKind
	// ErrFrameSequence: a FilterUpdate's base_sequence/sequence pair breaks
	// its kind's rule (chunks and heartbeats: base = sequence; deltas:
	// sequence = base + 1).
	ErrFrameSequence
	// ErrHeartbeatPayload: a heartbeat carries a payload.
	ErrHeartbeatPayload
	// ErrPayload: the CBI1 payload does not decode, is of the wrong kind, or
	// disagrees with the envelope (dc_id, epoch, base epoch). The CBI1 error
	// is wrapped.
	ErrPayload
)

// Classes, matched by errors.Is against any *ValidationError.
const (
	// ErrUnsupported: the input uses semantics this reader does not know.
	// Quarantine the containing pool or topology entry; keep unrelated ones;
	// never fall back to a default meaning.
	ErrUnsupported Kind = iota + 100
	// ErrMalformed: everything that is not unsupported.
	ErrMalformed
)

func (k Kind) Error() string {
	if s := k.text(); s != "" {
		return "kvrelay: " + s
	}
	return "kvrelay: validation rule " + strconv.Itoa(int(k))
}

func (k Kind) text() string {
	switch k {
	case ErrContractMarker:
		return "invalid contract marker"
	case ErrProtocolVersion:
		return "unsupported protocol version"
	case ErrSubscriberID:
		return "invalid subscriber id"
	case ErrMissingField:
		return "required field missing"
	case ErrPoolIdentityVersion:
		return "unsupported pool identity version"
	case ErrDigestLength:
		return "digest is not 16 bytes"
	case ErrIdentitySource:
		return "invalid identity source"
	case ErrZeroLayoutGeneration:
		return "layout generation must be nonzero"
	case ErrZeroFormatField:
		return "CKF format field is zero"
	case ErrUnsupportedCkfFormat:
		return "unsupported CKF format"
	case ErrBucketCountTooLarge:
		return "CKF bucket count exceeds 16777216"
	case ErrUnsupportedBucketCount:
		return "CKF bucket count is not a power of two >= 2"
	case ErrInvalidText:
		return "text must be non-empty without surrounding whitespace"
	case ErrUnsupportedModelTarget:
		return "model target variant missing or unknown"
	case ErrDuplicateAlias:
		return "model registration repeats an alias"
	case ErrZeroQueryBlockSize:
		return "KV query block size must be nonzero"
	case ErrQueryHashFormat:
		return "unsupported KV query hash format"
	case ErrMissingWorkerRoles:
		return "worker-role set must not be empty"
	case ErrWorkerRole:
		return "unsupported worker role"
	case ErrDuplicateWorkerRole:
		return "worker-role set repeats a role"
	case ErrUnsupportedDuplicateEndpointRole:
		return "duplicate endpoint role must be PREFILL or DECODE"
	case ErrReadinessState:
		return "unsupported readiness state"
	case ErrMissingTopologyMembers:
		return "serving topology has no members"
	case ErrTopologyNamespaceMismatch:
		return "topology member namespace differs from the entry's"
	case ErrDuplicateTopologyMember:
		return "serving topology repeats an endpoint"
	case ErrDuplicateAdapter:
		return "serving topology repeats an adapter"
	case ErrDuplicateKey:
		return "complete snapshot repeats a key"
	case ErrUnidentifiableEntry:
		return "entry has no trustworthy key"
	case ErrProducerMismatch:
		return "frame producer differs from the subscribed producer"
	case ErrFilterUpdateKind:
		return "unsupported filter update kind"
	case ErrFrameSequence:
		return "filter update sequence numbers break the kind's rule"
	case ErrHeartbeatPayload:
		return "heartbeat carries a payload"
	case ErrPayload:
		return "CBI1 payload rejected"
	case ErrUnsupported:
		return "unsupported"
	case ErrMalformed:
		return "malformed"
	}
	return ""
}

// numeric reports whether ValidationError.Value is meaningful for the kind.
func (k Kind) numeric() bool {
	switch k {
	case ErrProtocolVersion, ErrPoolIdentityVersion, ErrDigestLength, ErrIdentitySource, ErrZeroFormatField,
		ErrUnsupportedCkfFormat, ErrBucketCountTooLarge, ErrUnsupportedBucketCount, ErrQueryHashFormat,
		ErrWorkerRole, ErrDuplicateWorkerRole, ErrUnsupportedDuplicateEndpointRole, ErrReadinessState,
		ErrFilterUpdateKind, ErrSubscriberID, ErrUnidentifiableEntry:
		return true
	}
	return false
}

// ValidationError is a failed rule with what failed it.
type ValidationError struct {
	Kind Kind
	// Field names the checked field, in Dynamo's wording ("model target",
	// "cache semantics", "topology namespace", ...), when the rule applies to
	// several fields.
	Field string
	// Value is the offending number (marker, version, enum value, length).
	Value int64
	// Text is the offending text (alias, endpoint, adapter, namespace).
	Text string
	// Err is the underlying error, for ErrPayload the CBI1 decode error.
	Err error
}

func (e *ValidationError) Error() string {
	msg := e.Kind.Error()
	if e.Field != "" {
		msg += " (" + e.Field + ")"
	}
	switch {
	case e.Kind == ErrContractMarker:
		msg += fmt.Sprintf(": %#010x", uint32(e.Value))
	case e.Text != "":
		msg += ": " + strconv.Quote(e.Text)
	case e.Kind.numeric():
		msg += ": " + strconv.FormatInt(e.Value, 10)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap exposes the rule and, for ErrPayload, the CBI1 error.
func (e *ValidationError) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// Is matches the two classes.
func (e *ValidationError) Is(target error) bool {
	switch target {
	case ErrUnsupported:
		return e.Unsupported()
	case ErrMalformed:
		return !e.Unsupported()
	}
	return false
}

// Unsupported reports whether the failure is an unknown-semantics one (§3.4):
// a non-zero unknown identity version, enum value (hash format, role, filter
// update kind) or source; an unset
// ModelTarget; a CKF triple other than (1, 16, 4); a bucket count above
// 2^24; an unknown readiness state. Zeros, UNSPECIFIED, missing fields,
// duplicates and bad text are malformed.
func (e *ValidationError) Unsupported() bool {
	switch e.Kind {
	case ErrPoolIdentityVersion, ErrQueryHashFormat, ErrWorkerRole, ErrIdentitySource, ErrFilterUpdateKind:
		return e.Value != 0
	case ErrUnsupportedModelTarget, ErrUnsupportedCkfFormat, ErrReadinessState, ErrBucketCountTooLarge:
		return true
	}
	return false
}

func verr(k Kind, field string, value int64) error {
	return &ValidationError{Kind: k, Field: field, Value: value}
}

func missing(field string) error { return &ValidationError{Kind: ErrMissingField, Field: field} }
