// Package backoff is the one exponential backoff of ckfrelay: the relay's
// epoch restarts, the indexer's lane bootstraps and registry retries, and
// the setup retries of the binaries (pkg/retry) all pace themselves
// with it, so a change of policy is made in one place.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff doubles its wait from Min up to Max. The zero value is not
// usable: set Min and Max (Max < Min is treated as Max = Min).
//
// A Backoff is not safe for concurrent use; each loop owns its own.
type Backoff struct {
	Min, Max time.Duration
	// Jitter, when true, spreads each wait uniformly over [w/2, w] ("equal
	// jitter"), so peers that failed together do not retry together.
	Jitter bool
	// Rand returns a value in [0, n); nil uses math/rand/v2. Tests inject
	// a fixed source.
	Rand func(n int64) int64

	cur time.Duration
}

// New returns a Backoff from lo to hi without jitter.
func New(lo, hi time.Duration) *Backoff { return &Backoff{Min: lo, Max: hi} }

// Next returns the wait before the next attempt and advances the
// schedule: Min, 2·Min, 4·Min, ... capped at Max (before jitter).
func (b *Backoff) Next() time.Duration {
	hi := max(b.Max, b.Min)
	if b.cur == 0 {
		b.cur = b.Min
	} else {
		b.cur = min(2*b.cur, hi)
	}
	if !b.Jitter || b.cur < 2 {
		return b.cur
	}
	half := b.cur / 2
	rnd := b.Rand
	if rnd == nil {
		rnd = rand.Int64N
	}
	return half + time.Duration(rnd(int64(b.cur-half)+1))
}

// Reset starts the schedule again at Min, after a success.
func (b *Backoff) Reset() { b.cur = 0 }
