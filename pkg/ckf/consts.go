package ckf

import (
	"fmt"
	"time"
)

// Constants of the 1.4.0 format (spec §1).
const (
	// LaneCount is the number of lanes (DC pools) of the global transposed table.
	LaneCount = 16
	// LaneMask has one bit per lane.
	LaneMask uint16 = 0xFFFF
	// MaxKicks is the upper bound accepted for Config.MaxKicks.
	MaxKicks = 4096
	// MaxVerificationWindow is the upper bound of the search verification window.
	MaxVerificationWindow = 8

	DefaultSeed                   uint64 = 0x5DEE_CE66_D1B5_4A33
	DefaultMaxKicks                      = 500
	DefaultExpectedBlocks                = 1
	DefaultVerificationWindow            = 2
	DefaultPublishEveryNEvents           = 1
	FormatVersion                 uint16 = 1
	FingerprintBits               uint8  = 16
	SlotsPerBucket                uint8  = 4
	AlternateDomain               uint64 = 0x9E37_79B9_7F4A_7C15
	XXH3Seed                      uint64 = 1337
	DefaultIngestionWorkers              = 4
	DefaultIngestionQueue                = 256
	DefaultControlTimeout                = 10 * time.Second
	DefaultMaxDirtyToAppliedAge          = 10 * time.Millisecond
	DefaultRecoveryAttempts              = 8
	DefaultRecoveryInitialBackoff        = 200 * time.Millisecond
	KvEventSubjectStem                   = "kv-events"
)

// HashMode selects how the producer derives the "full hash" it stores.
type HashMode uint8

const (
	// HashModeCanonical resolves each stored block's parent chain into Dynamo's
	// rolling sequence hash (spec §6.9). Required for real engine events.
	HashModeCanonical HashMode = iota
	// HashModeVerbatim stores the event's block_hash as-is (1.4.0 behaviour).
	HashModeVerbatim
)

func (m HashMode) String() string {
	switch m {
	case HashModeCanonical:
		return "canonical"
	case HashModeVerbatim:
		return "verbatim"
	}
	return fmt.Sprintf("HashMode(%d)", uint8(m))
}

// ParseHashMode parses "canonical" or "verbatim".
func ParseHashMode(s string) (HashMode, error) {
	switch s {
	case "canonical", "":
		return HashModeCanonical, nil
	case "verbatim":
		return HashModeVerbatim, nil
	}
	return 0, fmt.Errorf("ckf: unknown hash mode %q (want canonical or verbatim)", s)
}

// PrefixSearchConfig configures the prefix search (spec §11).
type PrefixSearchConfig struct {
	VerificationWindow int
}

// DefaultPrefixSearchConfig returns window 2.
func DefaultPrefixSearchConfig() PrefixSearchConfig {
	return PrefixSearchConfig{VerificationWindow: DefaultVerificationWindow}
}

// Config is CkfConfig: the producer's capacity, addressing and cadence.
type Config struct {
	ExpectedBlocksPerDC uint64
	Seed                uint64
	MaxKicks            int
	Search              PrefixSearchConfig
	PublishEveryNEvents uint64
	Mode                HashMode
}

// NewConfig sets ExpectedBlocksPerDC = n and every other field to its default
// (canonical lineage mode).
func NewConfig(n uint64) Config {
	return Config{
		ExpectedBlocksPerDC: n,
		Seed:                DefaultSeed,
		MaxKicks:            DefaultMaxKicks,
		Search:              DefaultPrefixSearchConfig(),
		PublishEveryNEvents: DefaultPublishEveryNEvents,
		Mode:                HashModeCanonical,
	}
}

// Validate checks the config in the order of spec §1.
func (c Config) Validate() error {
	if c.ExpectedBlocksPerDC == 0 {
		return &BuildError{Kind: ErrExpectedCapacityZero}
	}
	if c.MaxKicks < 1 || c.MaxKicks > MaxKicks {
		return &BuildError{Kind: ErrInvalidMaxKicks, Value: uint64(max(c.MaxKicks, 0)), Maximum: MaxKicks}
	}
	if err := c.Search.Validate(); err != nil {
		return err
	}
	if c.PublishEveryNEvents == 0 {
		return &BuildError{Kind: ErrInvalidPublishEveryNEvents}
	}
	if c.Mode > HashModeVerbatim {
		return &BuildError{Kind: ErrInvalidHashMode, Value: uint64(c.Mode)}
	}
	return nil
}

// Validate checks the verification window.
func (s PrefixSearchConfig) Validate() error {
	if s.VerificationWindow < 1 || s.VerificationWindow > MaxVerificationWindow {
		return &BuildError{Kind: ErrInvalidVerificationWindow, Value: uint64(max(s.VerificationWindow, 0)), Maximum: MaxVerificationWindow}
	}
	return nil
}

// Format returns the format identity the config produces.
func (c Config) Format() (FormatIdentity, error) {
	n, err := BucketCount(c.ExpectedBlocksPerDC)
	if err != nil {
		return FormatIdentity{}, err
	}
	return NewFormatIdentity(c.Seed, n), nil
}

// BuildErrorKind enumerates CkfBuildError and the config validation errors.
// Each kind is itself an error so callers can errors.Is against it.
type BuildErrorKind uint8

const (
	ErrExpectedCapacityZero BuildErrorKind = iota + 1
	ErrInvalidMaxKicks
	ErrInvalidVerificationWindow
	ErrInvalidPublishEveryNEvents
	ErrInvalidHashMode
	ErrCapacityOverflow
	ErrAllocationFailed
)

func (k BuildErrorKind) Error() string {
	switch k {
	case ErrExpectedCapacityZero:
		return "ckf: expected_blocks_per_dc must be nonzero"
	case ErrInvalidMaxKicks:
		return "ckf: max_kicks outside 1..=4096"
	case ErrInvalidVerificationWindow:
		return "ckf: verification_window outside 1..=8"
	case ErrInvalidPublishEveryNEvents:
		return "ckf: publish_every_n_events must be nonzero"
	case ErrInvalidHashMode:
		return "ckf: unknown hash mode"
	case ErrCapacityOverflow:
		return "ckf: capacity arithmetic overflow"
	case ErrAllocationFailed:
		return "ckf: allocation failed"
	}
	return fmt.Sprintf("ckf: build error %d", uint8(k))
}

// BuildError carries a BuildErrorKind and its fields.
type BuildError struct {
	Kind    BuildErrorKind
	Value   uint64
	Maximum uint64
}

func (e *BuildError) Error() string {
	switch e.Kind {
	case ErrInvalidMaxKicks:
		return fmt.Sprintf("ckf: max_kicks %d is outside 1..=%d", e.Value, e.Maximum)
	case ErrInvalidVerificationWindow:
		return fmt.Sprintf("ckf: verification_window %d is outside 1..=%d", e.Value, e.Maximum)
	case ErrInvalidHashMode:
		return fmt.Sprintf("ckf: unknown hash mode %d", e.Value)
	}
	return e.Kind.Error()
}

func (e *BuildError) Unwrap() error { return e.Kind }
