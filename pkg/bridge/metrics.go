package bridge

import "github.com/ckfrelay/ckfrelay/pkg/metrics"

// bridgeMetrics are the bridge's Prometheus series (kept in this one file
// so a registry migration touches nothing else).
type bridgeMetrics struct {
	batches       *metrics.Counter
	malformed     *metrics.Counter
	unknownFields *metrics.Counter
	events        *metrics.CounterVec
	dropped       *metrics.CounterVec
	blocks        *metrics.Counter
	published     *metrics.Counter
	publishErrors *metrics.Counter
	resent        *metrics.Counter
	duplicates    *metrics.Counter
	replays       *metrics.CounterVec
	gaps          *metrics.CounterVec
	gapBatches    *metrics.Counter
	restarts      *metrics.Counter
	clears        *metrics.CounterVec
	reconnects    *metrics.Counter
	checkpoints   *metrics.CounterVec
	connected     *metrics.GaugeVec
	lastSeq       *metrics.GaugeVec
}

func newBridgeMetrics(reg *metrics.Registry) *bridgeMetrics {
	if reg == nil {
		reg = metrics.NewRegistry()
	}
	return &bridgeMetrics{
		batches:       reg.NewCounter("ckf_bridge_batches_total", "Engine event batches applied (decoded, converted, handed to JetStream)."),
		malformed:     reg.NewCounter("ckf_bridge_malformed_batches_total", "Engine batches rejected as malformed msgpack or framing (skipped; their sequence still counts)."),
		unknownFields: reg.NewCounter("ckf_bridge_unknown_fields_total", "Unknown map keys and trailing array elements skipped while decoding."),
		events:        reg.NewCounterVec("ckf_bridge_events_total", "RouterEvents published, by kind.", "kind"),
		dropped:       reg.NewCounterVec("ckf_bridge_dropped_events_total", "Engine events not published, by reason.", "reason"),
		blocks:        reg.NewCounter("ckf_bridge_stored_blocks_total", "Blocks published in stored events."),
		published:     reg.NewCounter("ckf_bridge_published_total", "KVEVENTS messages acknowledged by JetStream."),
		publishErrors: reg.NewCounter("ckf_bridge_publish_errors_total", "KVEVENTS publishes that failed or timed out (the engine is then replayed from the last acknowledged batch)."),
		resent:        reg.NewCounter("ckf_bridge_deduplicated_publishes_total", "Re-sent batches JetStream dropped as duplicates of an earlier publish (same Nats-Msg-Id)."),
		duplicates:    reg.NewCounter("ckf_bridge_duplicate_batches_total", "Batches dropped because their sequence was already applied (live/replay overlap)."),
		replays:       reg.NewCounterVec("ckf_bridge_replays_total", "Replay requests, by outcome.", "outcome"),
		gaps:          reg.NewCounterVec("ckf_bridge_gaps_total", "Sequence gaps, by outcome (recovered by replay, or unrecoverable: worker cleared).", "outcome"),
		gapBatches:    reg.NewCounter("ckf_bridge_gap_batches_lost_total", "Engine batches lost in unrecoverable gaps."),
		restarts:      reg.NewCounter("ckf_bridge_engine_restarts_total", "Engine restarts detected (sequence went back or replay disagreed)."),
		clears:        reg.NewCounterVec("ckf_bridge_worker_clears_total", "Worker clears the bridge published, by reason.", "reason"),
		reconnects:    reg.NewCounter("ckf_bridge_reconnects_total", "ZMQ (re)connection attempts after a failure."),
		checkpoints:   reg.NewCounterVec("ckf_bridge_checkpoints_total", "Per-engine resume checkpoints, by outcome.", "outcome"),
		connected:     reg.NewGaugeVec("ckf_bridge_engine_connected", "1 while the engine's live socket is connected.", "worker_id", "endpoint"),
		lastSeq:       reg.NewGaugeVec("ckf_bridge_engine_last_sequence", "Last applied engine sequence.", "worker_id", "endpoint"),
	}
}
