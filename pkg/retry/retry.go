// Package retry repeats a setup step with exponential backoff until it
// succeeds, fails permanently, or its context ends. The binaries use it so
// any start order of NATS servers and services converges instead of
// exiting on the first "no responders" or "no servers available".
package retry

import (
	"context"
	"errors"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/backoff"

	"github.com/ckfrelay/ckfrelay/pkg/ctxwait"
)

// Defaults of a zero Policy.
const (
	DefaultMin     = 100 * time.Millisecond
	DefaultMax     = 5 * time.Second
	DefaultAttempt = 10 * time.Second
)

// Policy paces the attempts. The zero value uses the defaults.
type Policy struct {
	// Min is the first wait; each further wait doubles up to Max.
	Min, Max time.Duration
	// Attempt bounds one call of the step (its context deadline).
	Attempt time.Duration
	// OnRetry, when set, is called after each failed attempt with the
	// attempt number (1-based), the error and the wait before the next.
	OnRetry func(attempt int, err error, wait time.Duration)
}

// permanent marks an error Do must not retry.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so Do returns it at once (a configuration error
// that no amount of waiting fixes). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// Do calls step until it returns nil (Do returns nil), a Permanent error
// (returned unwrapped), or ctx ends (Do returns the last step error joined
// with the context's error).
func (p Policy) Do(ctx context.Context, step func(context.Context) error) error {
	lo, hi, per := p.Min, p.Max, p.Attempt
	if lo <= 0 {
		lo = DefaultMin
	}
	if hi < lo {
		hi = max(DefaultMax, lo)
	}
	if per <= 0 {
		per = DefaultAttempt
	}
	bo := backoff.New(lo, hi)
	wait := bo.Next()
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, per)
		err := step(actx)
		cancel()
		if err == nil {
			return nil
		}
		var perm permanent
		if errors.As(err, &perm) {
			return perm.err
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		if p.OnRetry != nil {
			p.OnRetry(attempt, err, wait)
		}
		if !ctxwait.Sleep(ctx, wait) {
			return errors.Join(err, ctx.Err())
		}
		wait = bo.Next()
	}
}
