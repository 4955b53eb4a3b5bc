package lease

import (
	"fmt"
	"strings"
	"time"
)

// ErrorKind classifies lease coordinator failures. Each kind is itself an
// error, so callers branch with errors.Is(err, lease.ErrLeaseHeld) and read
// the details with errors.As(err, &*lease.Error).
type ErrorKind uint8

const (
	// ErrInvalidName: a domain or DC name is not a single NATS key token.
	ErrInvalidName ErrorKind = iota + 1
	// ErrInvalidArgument: a non-name argument is unusable (empty owner,
	// non-positive TTL).
	ErrInvalidArgument
	// ErrInvalidOption: a coordinator option or the existing bucket's
	// configuration is unusable.
	ErrInvalidOption
	// ErrNoFreeLane: all ckf.LaneCount lanes of the domain are taken.
	ErrNoFreeLane
	// ErrLaneConflict: the DC name and the pool id disagree with an existing
	// lane (same name for another pool, or the pool under another name).
	ErrLaneConflict
	// ErrLeaseHeld: another owner holds a live lease on the pool.
	ErrLeaseHeld
	// ErrLeaseLost: the lease was taken over, expired or its revision moved;
	// the holder must stop publishing at once.
	ErrLeaseLost
	// ErrLeaseReleased: the lease was released by its holder.
	ErrLeaseReleased
	// ErrNoLease: no lease record exists for the pool.
	ErrNoLease
	// ErrContention: compare-and-set kept failing for the configured number
	// of attempts.
	ErrContention
	// ErrCorruptRecord: a stored value does not decode.
	ErrCorruptRecord
	// ErrEpochExhausted: the pool's epoch counter is at its maximum; no
	// further epoch can be granted (the counter never wraps). An operator
	// must inspect the epoch key (a value that high was not written by a
	// relay).
	ErrEpochExhausted
	// ErrLeaseOrphaned: the holder stopped renewing without releasing
	// (Session.Orphan); the server removes the stored record at its TTL,
	// and only then can another owner take the lease.
	ErrLeaseOrphaned
)

func (k ErrorKind) Error() string { return "lease: " + k.String() }

func (k ErrorKind) String() string {
	switch k {
	case ErrInvalidName:
		return "invalid name"
	case ErrInvalidArgument:
		return "invalid argument"
	case ErrInvalidOption:
		return "invalid option"
	case ErrNoFreeLane:
		return "no free lane"
	case ErrLaneConflict:
		return "lane conflict"
	case ErrLeaseHeld:
		return "lease held by another owner"
	case ErrLeaseLost:
		return "lease lost"
	case ErrLeaseReleased:
		return "lease released"
	case ErrNoLease:
		return "no lease"
	case ErrContention:
		return "compare-and-set contention"
	case ErrCorruptRecord:
		return "corrupt record"
	case ErrEpochExhausted:
		return "epoch counter exhausted"
	case ErrLeaseOrphaned:
		return "lease orphaned"
	}
	return fmt.Sprintf("unknown error kind %d", uint8(k))
}

// Error is the detailed form of every failure the package returns. Fields
// that do not apply to a kind are zero.
type Error struct {
	Kind   ErrorKind
	Domain string
	Dc     string
	// Lane is the lane involved (ErrLaneConflict), -1 when none.
	Lane int
	// Holder, Epoch and ExpiresAt describe the lease in the way
	// (ErrLeaseHeld), the lease that was lost (ErrLeaseLost) or the one
	// left to lapse (ErrLeaseOrphaned). ExpiresAt is by the holder's
	// clock, information only: the server decides when a record expires.
	Holder    string
	Epoch     uint64
	ExpiresAt time.Time
	// Detail is a human explanation.
	Detail string
	// Err is the underlying cause, e.g. jetstream.ErrKeyRevisionMismatch.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	if e.Domain != "" {
		fmt.Fprintf(&b, ": domain %s", e.Domain)
	}
	if e.Dc != "" {
		fmt.Fprintf(&b, " dc %s", e.Dc)
	}
	if e.Lane >= 0 && e.Kind == ErrLaneConflict {
		fmt.Fprintf(&b, " lane %d", e.Lane)
	}
	if e.Holder != "" {
		fmt.Fprintf(&b, " holder %s", e.Holder)
	}
	if e.Epoch != 0 {
		fmt.Fprintf(&b, " epoch %d", e.Epoch)
	}
	if !e.ExpiresAt.IsZero() {
		fmt.Fprintf(&b, " expires %s", e.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap exposes both the kind and the cause, so errors.Is matches either
// (lease.ErrLeaseLost and jetstream.ErrKeyRevisionMismatch).
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

func newError(kind ErrorKind, domain, dc, detail string) *Error {
	return &Error{Kind: kind, Domain: domain, Dc: dc, Lane: -1, Detail: detail}
}
