package wanproxy

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error about an unusable route or toxic.
var ErrInvalid = errors.New("wanproxy: invalid")

// ErrClosed is returned by the operations of a closed link.
var ErrClosed = errors.New("wanproxy: link closed")

// InvalidError names what is unusable and why; it matches ErrInvalid.
type InvalidError struct {
	What   string // "route", "latency", "bandwidth", "stall", "direction"
	Value  string
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("wanproxy: invalid %s %q: %s", e.What, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(what, value, reason string) error {
	return &InvalidError{What: what, Value: value, Reason: reason}
}
