package wire

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/zeebo/xxh3"
)

// Subject templates (docs/design.md, "Wire and subjects"). One subject space per
// pool; a lane consumer filters LaneFilterT so snapshot markers, deltas, drain
// markers and heartbeats arrive in publish order.
const (
	// LaneSubjectPrefix starts every lane subject.
	LaneSubjectPrefix = "ckf"
	// DeltaSubjectT is ckf.<domain>.<dc>.delta.
	DeltaSubjectT = "ckf.%s.%s.delta"
	// SnapshotSubjectT is ckf.<domain>.<dc>.snap (snapshot markers).
	SnapshotSubjectT = "ckf.%s.%s.snap"
	// DrainSubjectT is ckf.<domain>.<dc>.drain.
	DrainSubjectT = "ckf.%s.%s.drain"
	// HeartbeatSubjectT is ckf.<domain>.<dc>.hb.
	HeartbeatSubjectT = "ckf.%s.%s.hb"
	// LaneFilterT is ckf.<domain>.<dc>.>, every message of one pool.
	LaneFilterT = "ckf.%s.%s.>"

	// WorkerEventsPrefix starts the worker input event subjects.
	WorkerEventsPrefix = "kvevents"
	// WorkerEventsSubjectT is kvevents.<domain>.<dc>.<worker_id> (decimal id).
	WorkerEventsSubjectT = "kvevents.%s.%s.%d"
	// WorkerEventsFilterT is kvevents.<domain>.<dc>.*, every worker of a pool.
	WorkerEventsFilterT = "kvevents.%s.%s.*"

	suffixDelta     = "delta"
	suffixSnap      = "snap"
	suffixDrain     = "drain"
	suffixHeartbeat = "hb"
)

// Bucket names shared by relays and consumers.
const (
	// LeaseBucket is the JetStream KV bucket holding each domain's lane map
	// and each pool's producer lease and epoch (pkg/lease).
	LeaseBucket = "ckf-leases"
	// SnapshotBucket is the JetStream Object Store bucket holding snapshot
	// bodies (EncodeSnapshotBody) named by snapshot markers.
	SnapshotBucket = "ckf-snapshots"
)

// Message headers.
const (
	// HeaderTraceParent and HeaderTraceState carry the W3C trace context
	// (the keys of OpenTelemetry's propagation.TraceContext) from relay to
	// consumer.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	// HeaderMsgID is JetStream's de-duplication header (nats.MsgIdHdr);
	// its value is MsgID's.
	HeaderMsgID = "Nats-Msg-Id"
)

// ValidateToken checks that s can be one token of a NATS subject (and of the
// names derived from it): 1..MaxTokenBytes bytes of valid UTF-8 without '.',
// '*', '>', whitespace or control characters. what names the value in the
// error ("domain", "dc"). Errors are *TokenError wrapping ErrInvalidToken.
func ValidateToken(what, s string) error {
	fail := func(reason string) error { return &TokenError{What: what, Token: s, Reason: reason} }
	switch {
	case s == "":
		return fail("empty")
	case len(s) > MaxTokenBytes:
		return fail("longer than " + strconv.Itoa(MaxTokenBytes) + " bytes")
	case !utf8.ValidString(s):
		return fail("not valid UTF-8")
	}
	for _, c := range s {
		switch {
		case c == '.':
			return fail("contains '.', the subject token separator")
		case c == '*' || c == '>':
			return fail("contains the wildcard " + strconv.QuoteRune(c))
		case unicode.IsSpace(c):
			return fail("contains whitespace")
		case unicode.IsControl(c):
			return fail("contains a control character")
		}
	}
	return nil
}

// MaxNameBytes bounds a domain or DC name (ValidateName).
const MaxNameBytes = 64

// ValidateName is the one check of a domain or DC name, wherever a name
// enters (a flag, a pools file, a catalog's model, a lane map): 1..64
// bytes of [A-Za-z0-9_-], so a name is one subject token, one KV key
// token, one Object Store name part and one metric label value alike.
// what names the value in the error ("domain", "dc"). Errors are
// *TokenError wrapping ErrInvalidToken.
func ValidateName(what, s string) error {
	if s == "" || len(s) > MaxNameBytes {
		return &TokenError{What: what, Token: s, Reason: "must be 1.." + strconv.Itoa(MaxNameBytes) + " characters"}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			continue
		}
		return &TokenError{What: what, Token: s, Reason: fmt.Sprintf("has %q at %d; want [A-Za-z0-9_-]", c, i)}
	}
	return nil
}

// WorkerEventsDomainsFilter is kvevents.*.<dc>.*: the events of every
// worker of every domain of one DC (a relay discovering its pools).
func WorkerEventsDomainsFilter(dc string) (string, error) {
	if err := ValidateToken("dc", dc); err != nil {
		return "", err
	}
	return WorkerEventsPrefix + ".*." + dc + ".*", nil
}

// LaneSubjects are the subjects of one pool (domain, DC).
type LaneSubjects struct {
	Delta     string
	Snapshot  string
	Drain     string
	Heartbeat string
	// Filter matches all of the above, in publish order.
	Filter string
}

// NewLaneSubjects validates the domain and DC names (ValidateToken) and
// builds the pool's subjects.
func NewLaneSubjects(domain, dc string) (LaneSubjects, error) {
	if err := validatePool(domain, dc); err != nil {
		return LaneSubjects{}, err
	}
	base := LaneSubjectPrefix + "." + domain + "." + dc + "."
	return LaneSubjects{
		Delta:     base + suffixDelta,
		Snapshot:  base + suffixSnap,
		Drain:     base + suffixDrain,
		Heartbeat: base + suffixHeartbeat,
		Filter:    base + ">",
	}, nil
}

// For returns the subject carrying messages of kind k ("" for an unknown kind).
func (s LaneSubjects) For(k MessageKind) string {
	switch k {
	case KindDelta:
		return s.Delta
	case KindSnapshotMarker:
		return s.Snapshot
	case KindDrainMarker:
		return s.Drain
	case KindHeartbeat:
		return s.Heartbeat
	}
	return ""
}

func validatePool(domain, dc string) error {
	if err := ValidateToken("domain", domain); err != nil {
		return err
	}
	return ValidateToken("dc", dc)
}

// ParseLaneSubject splits ckf.<domain>.<dc>.<suffix> and returns the message
// kind its suffix carries. Errors wrap ErrInvalidToken.
func ParseLaneSubject(subject string) (domain, dc string, kind MessageKind, err error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 || parts[0] != LaneSubjectPrefix {
		return "", "", 0, &TokenError{What: "lane subject", Token: subject, Reason: "want ckf.<domain>.<dc>.<delta|snap|drain|hb>"}
	}
	if err := validatePool(parts[1], parts[2]); err != nil {
		return "", "", 0, err
	}
	for k := KindDelta; k <= KindHeartbeat; k++ {
		if parts[3] == k.String() {
			return parts[1], parts[2], k, nil
		}
	}
	return "", "", 0, &TokenError{What: "lane subject", Token: subject, Reason: "unknown suffix " + strconv.Quote(parts[3])}
}

// WorkerEventsSubject is kvevents.<domain>.<dc>.<worker_id>, where one
// worker's KV events enter the relay of its pool.
func WorkerEventsSubject(domain, dc string, workerID uint64) (string, error) {
	if err := validatePool(domain, dc); err != nil {
		return "", err
	}
	return WorkerEventsPrefix + "." + domain + "." + dc + "." + strconv.FormatUint(workerID, 10), nil
}

// WorkerEventsFilter is kvevents.<domain>.<dc>.*, the events of every worker
// of one pool.
func WorkerEventsFilter(domain, dc string) (string, error) {
	if err := validatePool(domain, dc); err != nil {
		return "", err
	}
	return WorkerEventsPrefix + "." + domain + "." + dc + ".*", nil
}

// ParseWorkerEventsSubject splits kvevents.<domain>.<dc>.<worker_id>.
func ParseWorkerEventsSubject(subject string) (domain, dc string, workerID uint64, err error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 || parts[0] != WorkerEventsPrefix {
		return "", "", 0, &TokenError{What: "worker events subject", Token: subject, Reason: "want kvevents.<domain>.<dc>.<worker_id>"}
	}
	if err := validatePool(parts[1], parts[2]); err != nil {
		return "", "", 0, err
	}
	id, perr := strconv.ParseUint(parts[3], 10, 64)
	if perr != nil || strconv.FormatUint(id, 10) != parts[3] {
		return "", "", 0, &TokenError{What: "worker id", Token: parts[3], Reason: "not a canonical decimal u64"}
	}
	return parts[1], parts[2], id, nil
}

// SnapshotObjectName names the Object Store object holding the snapshot body
// of a pool at (epoch, sequence). Deterministic, so a relay retrying a
// snapshot overwrites its own partial object.
func SnapshotObjectName(domain, dc string, epoch, sequence uint64) (string, error) {
	if err := validatePool(domain, dc); err != nil {
		return "", err
	}
	return "snap/" + domain + "/" + dc + "/" + strconv.FormatUint(epoch, 10) + "-" + strconv.FormatUint(sequence, 10), nil
}

// IdentityKey is a stable 32-hex-character digest of a producer identity
// (XXH3-128 of its wire encoding): short enough for message ids and logs,
// different for any two identities a deployment will see.
func IdentityKey(id *ckf.ProducerIdentity) string {
	var buf [128]byte
	sum := xxh3.Hash128(appendIdentity(buf[:0], id)).Bytes()
	return hex.EncodeToString(sum[:])
}

// MsgID is the Nats-Msg-Id of a message: kind, identity, wire epoch and
// sequence, so a relay re-publishing the same message after an uncertain
// ack is de-duplicated by JetStream, while different messages never collide.
// The kind is part of the id because a delta and the drain marker that
// follows it share epoch and sequence. Heartbeats repeat the same
// (epoch, sequence) by design and must be published without a Msg-Id.
func MsgID(kind MessageKind, id *ckf.ProducerIdentity, epoch, sequence uint64) string {
	return kind.String() + "-" + IdentityKey(id) + "-" + strconv.FormatUint(epoch, 10) + "-" + strconv.FormatUint(sequence, 10)
}
