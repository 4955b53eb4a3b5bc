package unithost

import "fmt"

// ErrorKind classifies a host's errors; each kind is itself an error, so
// errors.Is(err, ErrTooMany) matches any *Error of that kind.
type ErrorKind uint8

const (
	// ErrTooMany: the unit would pass the bound on units.
	ErrTooMany ErrorKind = iota + 1
	// ErrNotAllowed: the admission policy refuses the name.
	ErrNotAllowed
	// ErrInvalid: the unit could not be built (bad name or settings).
	ErrInvalid
	// ErrOverBudget: the unit would pass a resource bound of the hosting
	// package (e.g. the indexer's table memory).
	ErrOverBudget
	// ErrExists: the name is a unit already (Add is then a no-op).
	ErrExists
	// ErrNotRunning: the host's Run has returned.
	ErrNotRunning
	// ErrAlreadyRunning: Run was called twice.
	ErrAlreadyRunning
	// ErrFailed: a unit's Run returned an error (Run's result).
	ErrFailed
)

// String is the kind's metric label.
func (k ErrorKind) String() string {
	switch k {
	case ErrTooMany:
		return "too_many"
	case ErrNotAllowed:
		return "not_allowed"
	case ErrInvalid:
		return "invalid"
	case ErrOverBudget:
		return "over_budget"
	case ErrExists:
		return "exists"
	case ErrNotRunning:
		return "not_running"
	case ErrAlreadyRunning:
		return "already_running"
	case ErrFailed:
		return "failed"
	}
	return fmt.Sprintf("ErrorKind(%d)", uint8(k))
}

func (k ErrorKind) Error() string { return "unithost: " + k.String() }

// Error is a host's error about one unit (Name empty: about the host).
type Error struct {
	Kind ErrorKind
	// Noun is what the host calls a unit ("pool", "domain").
	Noun   string
	Name   string
	Detail string
	Err    error
}

func (e *Error) Error() string {
	s := e.Noun
	if e.Name != "" {
		s += fmt.Sprintf(" %q", e.Name)
	}
	s += ": " + e.Kind.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap matches the kind and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}
