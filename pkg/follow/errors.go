package follow

import (
	"fmt"
)

// ErrorKind classifies indexer failures. Each kind is itself an error, so
// callers branch with errors.Is(err, follow.ErrInvalidConfig).
type ErrorKind uint8

const (
	// ErrInvalidConfig: a Config field is out of range.
	ErrInvalidConfig ErrorKind = iota + 1
	// ErrAlreadyRunning: Run was called twice on one Service.
	ErrAlreadyRunning
	// ErrNoSnapshot: the lane has no snapshot marker yet.
	ErrNoSnapshot
	// ErrSnapshotFetch: the snapshot body object could not be read.
	ErrSnapshotFetch
	// ErrSnapshotInvalid: the marker or its body was refused (decode,
	// size, digest, foreign pool).
	ErrSnapshotInvalid
	// ErrWrongFormat: the lane's CKF format differs from the indexer's.
	ErrWrongFormat
	// ErrAssign: the pool refused the lane assignment.
	ErrAssign
	// ErrInstall: the pool refused or failed the snapshot install.
	ErrInstall
	// ErrLaneConfig: the lane could not be configured in the pool (mixed
	// domain, duplicate DC).
	ErrLaneConfig
	// ErrConsumer: the lane's ordered consumer could not be created.
	ErrConsumer
)

func (k ErrorKind) String() string {
	switch k {
	case ErrInvalidConfig:
		return "invalid_config"
	case ErrAlreadyRunning:
		return "already_running"
	case ErrNoSnapshot:
		return "no_snapshot"
	case ErrSnapshotFetch:
		return "snapshot_fetch"
	case ErrSnapshotInvalid:
		return "snapshot_invalid"
	case ErrWrongFormat:
		return "wrong_format"
	case ErrAssign:
		return "assign"
	case ErrInstall:
		return "install"
	case ErrLaneConfig:
		return "lane_config"
	case ErrConsumer:
		return "consumer"
	}
	return fmt.Sprintf("ErrorKind(%d)", uint8(k))
}

func (k ErrorKind) Error() string { return "indexer: " + k.String() }

// Error carries a kind, the lane it concerns (-1 for none), a detail and
// the underlying cause. errors.Is matches both the kind and the cause.
type Error struct {
	Kind   ErrorKind
	Lane   int
	Field  string
	Detail string
	Err    error
}

func (e *Error) Error() string {
	s := "indexer: " + e.Kind.String()
	if e.Lane >= 0 {
		s += fmt.Sprintf(" (lane %d)", e.Lane)
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap exposes the kind and the cause.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

func configError(field, format string, args ...any) error {
	return &Error{Kind: ErrInvalidConfig, Lane: -1, Field: field, Detail: fmt.Sprintf(format, args...)}
}

func laneError(kind ErrorKind, lane int, err error, format string, args ...any) *Error {
	return &Error{Kind: kind, Lane: lane, Detail: fmt.Sprintf(format, args...), Err: err}
}
