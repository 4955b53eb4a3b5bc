package client

import (
	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// LaneSink receives one pool's validated lane. The Follower calls it from
// one goroutine at a time (see the package's concurrency contract).
type LaneSink interface {
	// Admit is asked, before subscribing, whether the selected pool can be
	// mirrored at all (its CKF format and query semantics), and again when
	// the catalog changes the selected producer or its query semantics. An
	// error wrapping ErrIncompatible refuses it for good: the Follower
	// counts ReasonRefused, calls Invalidate and waits for the catalog to
	// change. Any other error is passing: the Follower counts
	// ReasonAdmitFailed, calls Invalidate and asks again after backoff (or
	// once a wrapped RetryHint is ready).
	Admit(sel Selection) error
	// Install receives a completely assembled snapshot. s.Words is the
	// caller's to keep. An error ends the stream (ReasonSink).
	Install(s Snapshot) error
	// Apply receives the next contiguous delta: d.BaseSequence is the
	// installed (or last applied) sequence. d.Images is valid only during
	// the call. A delta may hold no image (legal in CBI1). An error ends
	// the stream (ReasonSink).
	Apply(d Delta) error
	// Heartbeat reports that the producer is alive at the installed
	// sequence seq. An error ends the stream (ReasonSink).
	Heartbeat(seq uint64) error
	// Invalidate withdraws the lane: from its return until the next Install
	// nothing of it may be answered. It must not block for long.
	Invalidate(reason Reason, detail string)
}

// Selection is the catalog descriptor a Follower chose.
type Selection struct {
	// Key is the descriptor's producer key (subscription key).
	Key kvrelay.ProducerKey
	// Descriptor is the validated descriptor; shared, do not modify.
	Descriptor *kvrelayv1.KvPoolDescriptor
	// Relay is the relay identity of the catalog stream.
	Relay *kvrelayv1.RelayIdentity
}

// Snapshot is an installed-to-be lane image at Sequence.
type Snapshot struct {
	Selection Selection
	Sequence  uint64
	// Words holds Key.BucketCount bucket words.
	Words []uint64
}

// Delta is one contiguous delta BaseSequence → Sequence (= BaseSequence+1).
type Delta struct {
	Selection    Selection
	BaseSequence uint64
	Sequence     uint64
	// Images views the frame's payload; valid only during Apply.
	Images cbi1.Delta
	// SendTime is the relay's send_ts_us (informational: relay clock).
	SendTimeUs uint64
}
