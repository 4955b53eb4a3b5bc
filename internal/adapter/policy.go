package adapter

import (
	"math"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// RecoveryPolicy is LocalCkfRecoveryPolicy: how often RecoverSnapshot retries
// within one call, and the backoff schedule a lifecycle coordinator should
// apply between calls.
//
// The adapter exposes the schedule but never sleeps, so a coordinator can
// wait without blocking the actor or an ingestion worker.
type RecoveryPolicy struct {
	// MaxAttempts bounds the attempts of one RecoverSnapshot call; it must be
	// positive (New rejects zero with ErrZeroRecoveryAttempts).
	MaxAttempts int
	// InitialBackoff is the delay after the first failed attempt; it doubles
	// after each further failure. A negative value counts as zero.
	InitialBackoff time.Duration
}

// DefaultRecoveryPolicy returns the seed's defaults: 8 attempts, 200ms.
func DefaultRecoveryPolicy() RecoveryPolicy {
	return RecoveryPolicy{
		MaxAttempts:    ckf.DefaultRecoveryAttempts,
		InitialBackoff: ckf.DefaultRecoveryInitialBackoff,
	}
}

// DelayAfterFailure returns the delay to wait after failed attempt n
// (1-based): InitialBackoff·2^(n-1), saturating at the largest Duration.
// There is none for n ≤ 0 or n ≥ MaxAttempts (no further attempt follows).
func (p RecoveryPolicy) DelayAfterFailure(n int) (time.Duration, bool) {
	if n <= 0 || n >= p.MaxAttempts {
		return 0, false
	}
	// Like the seed, the factor is a u32 power of two that saturates at
	// u32::MAX once the exponent leaves its range.
	factor := uint64(math.MaxUint32)
	if exp := n - 1; exp < 32 {
		factor = 1 << exp
	}
	initial := max(p.InitialBackoff, 0)
	if initial != 0 && factor > uint64(math.MaxInt64/initial) {
		return time.Duration(math.MaxInt64), true
	}
	return initial * time.Duration(factor), true
}
