package consumer

import (
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// PoolConfig configures a Pool. Use DefaultPoolConfig and override fields.
type PoolConfig struct {
	// WorkerCount is the number of ingestion workers (default 4).
	WorkerCount int
	// QueueCapacity bounds each worker's FIFO, shared by its lanes (default 256).
	QueueCapacity int
	// ControlTimeout bounds each send and each reply of Assign,
	// InstallSnapshot and CompleteDrain (default 10s).
	ControlTimeout time.Duration
	// MaxOutstandingImagesPerLane bounds the images admitted but not yet
	// applied on one lane. Zero means the default, one complete lane
	// (bucket_count), unless OutstandingImageBoundSet is true, in which case
	// zero is rejected (the seed's Some(0)).
	MaxOutstandingImagesPerLane uint64
	// OutstandingImageBoundSet marks MaxOutstandingImagesPerLane as explicit.
	OutstandingImageBoundSet bool
	// MaxDirtyToAppliedAge retires a lane whose oldest admitted delta has not
	// been applied within this age (default 10ms).
	MaxDirtyToAppliedAge time.Duration
}

// DefaultPoolConfig returns the seed's defaults.
func DefaultPoolConfig() PoolConfig {
	return PoolConfig{
		WorkerCount:          ckf.DefaultIngestionWorkers,
		QueueCapacity:        ckf.DefaultIngestionQueue,
		ControlTimeout:       ckf.DefaultControlTimeout,
		MaxDirtyToAppliedAge: ckf.DefaultMaxDirtyToAppliedAge,
	}
}

// Validate checks the config in the seed's order.
func (c PoolConfig) Validate() error {
	switch {
	case c.WorkerCount <= 0:
		return &PoolBuildError{Kind: ErrInvalidWorkerCount}
	case c.QueueCapacity <= 0:
		return &PoolBuildError{Kind: ErrInvalidQueueCapacity}
	case c.ControlTimeout <= 0:
		return &PoolBuildError{Kind: ErrInvalidControlTimeout}
	case c.OutstandingImageBoundSet && c.MaxOutstandingImagesPerLane == 0:
		return &PoolBuildError{Kind: ErrInvalidOutstandingImageBound}
	case c.MaxDirtyToAppliedAge <= 0:
		return &PoolBuildError{Kind: ErrInvalidDirtyToAppliedAge}
	}
	return nil
}
