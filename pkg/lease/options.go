package lease

import (
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket is the KV bucket holding lane maps, leases, epoch counters
// and snapshot requests.
const DefaultBucket = "ckf-leases"

// DefaultHistory is the number of revisions kept per key: a few, so an
// operator can see the last hand-overs.
const DefaultHistory = 5

// DefaultCASAttempts bounds every compare-and-set retry loop. A conflict
// means another writer made progress, and a domain's lane map changes at most
// ckf.LaneCount times by registration, so a generous bound is never reached
// under honest contention.
const DefaultCASAttempts = 64

type settings struct {
	bucket      string
	history     uint8
	replicas    int
	storage     jetstream.StorageType
	casAttempts int
}

func defaultSettings() settings {
	return settings{
		bucket:      DefaultBucket,
		history:     DefaultHistory,
		replicas:    1,
		storage:     jetstream.FileStorage,
		casAttempts: DefaultCASAttempts,
	}
}

// Option tunes a Coordinator. Invalid values make New fail with
// ErrInvalidOption.
type Option func(*settings) error

// WithBucket names the KV bucket (default DefaultBucket).
func WithBucket(name string) Option {
	return func(s *settings) error {
		if name == "" {
			return newError(ErrInvalidOption, "", "", "empty bucket name")
		}
		s.bucket = name
		return nil
	}
}

// WithHistory sets the revisions kept per key when the bucket is created,
// 1..64 (default DefaultHistory). An existing bucket keeps its setting.
func WithHistory(n int) Option {
	return func(s *settings) error {
		if n < 1 || n > jetstream.KeyValueMaxHistory {
			return newError(ErrInvalidOption, "", "", fmt.Sprintf("history %d, want 1..%d", n, jetstream.KeyValueMaxHistory))
		}
		s.history = uint8(n)
		return nil
	}
}

// WithReplicas sets the bucket's replica count when it is created (default 1).
func WithReplicas(n int) Option {
	return func(s *settings) error {
		if n < 1 || n > 5 {
			return newError(ErrInvalidOption, "", "", fmt.Sprintf("replicas %d, want 1..5", n))
		}
		s.replicas = n
		return nil
	}
}

// WithMemoryStorage keeps a newly created bucket in memory instead of on
// disk (default file storage). Epoch counters then do not survive a server
// restart, so use it only in tests.
func WithMemoryStorage() Option {
	return func(s *settings) error {
		s.storage = jetstream.MemoryStorage
		return nil
	}
}

// WithCASAttempts bounds every compare-and-set retry loop (default
// DefaultCASAttempts); exhausting it returns ErrContention.
func WithCASAttempts(n int) Option {
	return func(s *settings) error {
		if n < 1 {
			return newError(ErrInvalidOption, "", "", fmt.Sprintf("CAS attempts %d, want >= 1", n))
		}
		s.casAttempts = n
		return nil
	}
}
