package lanerules

import (
	"fmt"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
)

// Defaults of the global-indexer binary (and of a zero Rules field).
const (
	// DefaultMaxApplyLag is the binary's apply-lag bound. The seed's
	// ckf.DefaultMaxDirtyToAppliedAge (10 ms, still consumer's library
	// default) retires lanes spuriously on a loaded host, and every
	// retirement costs a snapshot bootstrap and a snapshot request to the
	// relay.
	DefaultMaxApplyLag = 100 * time.Millisecond
	// DefaultLaneStaleAfter: five of the relay's default heartbeat
	// intervals.
	DefaultLaneStaleAfter = 5 * time.Second
	// DefaultSnapshotFetchTimeout is the base deadline of one attempt to
	// read a snapshot body from the Object Store.
	DefaultSnapshotFetchTimeout = 10 * time.Second
	DefaultWorkers              = ckf.DefaultIngestionWorkers
	DefaultQueue                = ckf.DefaultIngestionQueue
	DefaultControlTimeout       = ckf.DefaultControlTimeout
)

// What a stale lane does (Rules.StaleLanes).
const (
	// StaleReport keeps a stale lane in answers, marked and never best.
	StaleReport = "report"
	// StaleExclude leaves it out of answers and of the ready set until it
	// is fresh again.
	StaleExclude = "exclude"
)

// Rules are the lane rules global-indexer has a flag for. A zero field
// takes the binary's default (Defaults).
type Rules struct {
	// ExpectedBlocks fixes the CKF format (--expected-blocks); 0 learns it
	// from the first snapshot a lane reads. Lanes of another format are
	// refused.
	ExpectedBlocks uint64
	// Workers and Queue size the ingestion pool (--workers, --queue).
	Workers int
	Queue   int
	// MaxApplyLag retires a lane whose oldest admitted delta is not
	// applied within this age (--max-apply-lag).
	MaxApplyLag time.Duration
	// ControlTimeout bounds each pool control operation (--control-timeout).
	ControlTimeout time.Duration
	// LaneStaleAfter marks a lane stale when it has not heard from its
	// relay for this long (--lane-stale-after).
	LaneStaleAfter time.Duration
	// StaleLanes is StaleReport or StaleExclude (--stale-lanes).
	StaleLanes string
	// SnapshotFetchTimeout is the base deadline of one snapshot body read
	// (--snapshot-fetch-timeout).
	SnapshotFetchTimeout time.Duration
}

// Defaults returns the binary's rules.
func Defaults() Rules {
	return Rules{
		Workers:              DefaultWorkers,
		Queue:                DefaultQueue,
		MaxApplyLag:          DefaultMaxApplyLag,
		ControlTimeout:       DefaultControlTimeout,
		LaneStaleAfter:       DefaultLaneStaleAfter,
		StaleLanes:           StaleReport,
		SnapshotFetchTimeout: DefaultSnapshotFetchTimeout,
	}
}

// WithDefaults returns r with every zero field set to its default.
func (r Rules) WithDefaults() Rules {
	d := Defaults()
	if r.Workers == 0 {
		r.Workers = d.Workers
	}
	if r.Queue == 0 {
		r.Queue = d.Queue
	}
	if r.MaxApplyLag == 0 {
		r.MaxApplyLag = d.MaxApplyLag
	}
	if r.ControlTimeout == 0 {
		r.ControlTimeout = d.ControlTimeout
	}
	if r.LaneStaleAfter == 0 {
		r.LaneStaleAfter = d.LaneStaleAfter
	}
	if r.StaleLanes == "" {
		r.StaleLanes = d.StaleLanes
	}
	if r.SnapshotFetchTimeout == 0 {
		r.SnapshotFetchTimeout = d.SnapshotFetchTimeout
	}
	return r
}

// Error is an invalid rule; Field is the Rules field.
type Error struct {
	Field  string
	Reason string
	Err    error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("lane rules: %s: %s: %v", e.Field, e.Reason, e.Err)
	}
	return fmt.Sprintf("lane rules: %s: %s", e.Field, e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }

// Validate checks r with its defaults applied; the error is an *Error.
func (r Rules) Validate() error {
	r = r.WithDefaults()
	switch {
	case r.Workers < 1:
		return &Error{Field: "Workers", Reason: fmt.Sprintf("%d, want at least 1", r.Workers)}
	case r.Queue < 1:
		return &Error{Field: "Queue", Reason: fmt.Sprintf("%d, want at least 1", r.Queue)}
	case r.MaxApplyLag < 0:
		return &Error{Field: "MaxApplyLag", Reason: fmt.Sprintf("negative duration %s", r.MaxApplyLag)}
	case r.ControlTimeout < 0:
		return &Error{Field: "ControlTimeout", Reason: fmt.Sprintf("negative duration %s", r.ControlTimeout)}
	case r.LaneStaleAfter < 0:
		return &Error{Field: "LaneStaleAfter", Reason: fmt.Sprintf("negative duration %s", r.LaneStaleAfter)}
	case r.StaleLanes != StaleReport && r.StaleLanes != StaleExclude:
		return &Error{Field: "StaleLanes", Reason: fmt.Sprintf("%q, want %s or %s", r.StaleLanes, StaleReport, StaleExclude)}
	case r.SnapshotFetchTimeout < 0:
		return &Error{Field: "SnapshotFetchTimeout", Reason: fmt.Sprintf("negative duration %s", r.SnapshotFetchTimeout)}
	}
	if _, err := r.Format(); err != nil {
		return err
	}
	return nil
}

// PoolConfig is the ingestion pool configuration of r (defaults applied).
func (r Rules) PoolConfig() consumer.PoolConfig {
	r = r.WithDefaults()
	pc := consumer.DefaultPoolConfig()
	pc.WorkerCount, pc.QueueCapacity = r.Workers, r.Queue
	pc.MaxDirtyToAppliedAge, pc.ControlTimeout = r.MaxApplyLag, r.ControlTimeout
	return pc
}

// Format is the CKF format ExpectedBlocks fixes; nil when it is 0 (learn
// it from the first snapshot).
func (r Rules) Format() (*ckf.FormatIdentity, error) {
	if r.ExpectedBlocks == 0 {
		return nil, nil
	}
	f, err := ckf.NewConfig(r.ExpectedBlocks).Format()
	if err != nil {
		return nil, &Error{Field: "ExpectedBlocks", Reason: fmt.Sprint(r.ExpectedBlocks), Err: err}
	}
	return &f, nil
}
