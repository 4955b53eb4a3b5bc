package producer

import (
	"errors"
	"fmt"
)

// ErrCheckpoint is matched (errors.Is) by every CheckpointError: the input
// is not a usable checkpoint for the given configuration. Failures of the
// underlying reader or writer are returned wrapped and do not match it.
var ErrCheckpoint = errors.New("producer: invalid checkpoint")

// CheckpointErrorKind says why RestoreState refused its input. Each kind is
// an error so callers can errors.Is against it.
type CheckpointErrorKind uint8

const (
	// ErrCheckpointMagic: the input does not start with "CKC1".
	ErrCheckpointMagic CheckpointErrorKind = iota + 1
	// ErrCheckpointVersion: an encoding version this build cannot read.
	ErrCheckpointVersion
	// ErrCheckpointFormat: the checkpoint's format identity or hash mode
	// differs from the configuration it is restored with.
	ErrCheckpointFormat
	// ErrCheckpointTruncated: the input ended before the checkpoint did.
	ErrCheckpointTruncated
	// ErrCheckpointMalformed: a length beyond the declared body or a sane
	// limit, a broken invariant (order, refcount, residency), or trailing
	// bytes.
	ErrCheckpointMalformed
	// ErrCheckpointChecksum: the XXH3 checksum does not match the content.
	ErrCheckpointChecksum
	// ErrCheckpointOverBudget: an intact checkpoint (its checksum matches)
	// whose tables need more slots than the restore budget allows (see
	// slotBudget). RestoreState allocated none of them. State.CheckpointFits
	// and Checkpoint refuse such a state with this kind before writing.
	ErrCheckpointOverBudget
)

func (k CheckpointErrorKind) String() string {
	switch k {
	case ErrCheckpointMagic:
		return "bad_magic"
	case ErrCheckpointVersion:
		return "unsupported_version"
	case ErrCheckpointFormat:
		return "format_mismatch"
	case ErrCheckpointTruncated:
		return "truncated"
	case ErrCheckpointMalformed:
		return "malformed"
	case ErrCheckpointChecksum:
		return "checksum_mismatch"
	case ErrCheckpointOverBudget:
		return "over_budget"
	}
	return fmt.Sprintf("CheckpointErrorKind(%d)", uint8(k))
}

func (k CheckpointErrorKind) Error() string { return "producer: checkpoint " + k.String() }

// CheckpointError carries the kind and a short description of what was
// found; errors.Is matches the kind and ErrCheckpoint.
type CheckpointError struct {
	Kind   CheckpointErrorKind
	Detail string
}

func (e *CheckpointError) Error() string {
	if e.Detail == "" {
		return e.Kind.Error()
	}
	return e.Kind.Error() + ": " + e.Detail
}

func (e *CheckpointError) Unwrap() []error { return []error{e.Kind, ErrCheckpoint} }

func checkpointErr(kind CheckpointErrorKind, format string, a ...any) error {
	return &CheckpointError{Kind: kind, Detail: fmt.Sprintf(format, a...)}
}
