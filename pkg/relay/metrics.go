package relay

import "github.com/ckfrelay/ckfrelay/pkg/metrics"

// relayMetrics are the relay's Prometheus series.
type relayMetrics struct {
	events          *metrics.Counter
	badEvents       *metrics.CounterVec
	eventErrors     *metrics.CounterVec
	unknownRemovals *metrics.Counter
	deltas          *metrics.Counter
	images          *metrics.Counter
	snapshots       *metrics.CounterVec
	drains          *metrics.Counter
	heartbeats      *metrics.Counter
	fences          *metrics.CounterVec
	epoch           *metrics.Gauge
	sequence        *metrics.Gauge
	state           *metrics.GaugeVec
	inputLag        *metrics.Gauge
	uniqueBlocks    *metrics.Gauge
	occupiedSlots   *metrics.Gauge
	publishSeconds  *metrics.Histogram

	checkpoints       *metrics.CounterVec
	checkpointSeconds *metrics.Histogram
	inputGap          *metrics.Counter
	setupRetries      *metrics.Counter

	laneForeignWrites *metrics.Counter
	fault             *metrics.GaugeVec
	setupFailures     *metrics.CounterVec
	refusedEvents     *metrics.Counter
}

func newRelayMetrics(reg *metrics.Registry) *relayMetrics {
	if reg == nil {
		reg = metrics.NewRegistry()
	}
	return &relayMetrics{
		events:          reg.NewCounter("ckf_relay_events_total", "Worker KV events applied to the pool state."),
		badEvents:       reg.NewCounterVec("ckf_relay_bad_events_total", "Input messages rejected before apply, by reason.", "reason"),
		eventErrors:     reg.NewCounterVec("ckf_relay_event_errors_total", "Applied events that reported an error, by kind.", "kind"),
		unknownRemovals: reg.NewCounter("ckf_relay_unknown_removals_total", "Removals of blocks the pool did not track."),
		deltas:          reg.NewCounter("ckf_relay_deltas_published_total", "Deltas accepted by JetStream."),
		images:          reg.NewCounter("ckf_relay_images_published_total", "Bucket images published in deltas."),
		snapshots:       reg.NewCounterVec("ckf_relay_snapshots_total", "Barrier snapshots published, by trigger.", "trigger"),
		drains:          reg.NewCounter("ckf_relay_drain_markers_total", "Drain markers published."),
		heartbeats:      reg.NewCounter("ckf_relay_heartbeats_total", "Heartbeats published."),
		fences:          reg.NewCounterVec("ckf_relay_fences_total", "Times the relay stopped publishing under an epoch, by reason.", "reason"),
		epoch:           reg.NewGauge("ckf_relay_epoch", "Producer lease epoch currently published under (0 when standby)."),
		sequence:        reg.NewGauge("ckf_relay_sequence", "Last published lane sequence."),
		state:           reg.NewGaugeVec("ckf_relay_state", "1 for the relay's current state.", "state"),
		inputLag:        reg.NewGauge("ckf_relay_input_pending", "Input events stored in JetStream but not yet applied."),
		uniqueBlocks:    reg.NewGauge("ckf_relay_unique_blocks", "Distinct blocks the pool tracks."),
		occupiedSlots:   reg.NewGauge("ckf_relay_occupied_slots", "Occupied CKF slots."),
		publishSeconds:  reg.NewHistogram("ckf_relay_publish_seconds", "Time to publish one delta (JetStream ack included).", metrics.ExponentialBuckets(1e-5, 2, 18)),
		checkpoints: reg.NewCounterVec("ckf_relay_checkpoints_total",
			"State checkpoints by outcome: written, write_error (stores); restored, absent, rejected_format, rejected_corrupt, rejected_stream, load_error (loads at rebuild).", "outcome"),
		inputGap: reg.NewCounter("ckf_relay_input_gap_messages_total",
			"Input stream sequences a rebuild needed but retention (or a purge) had already dropped; events of this DC among them are missing from the exact state."),
		setupRetries: reg.NewCounter("ckf_relay_setup_retries_total",
			"Start-up steps (ensure streams, open the lease bucket, register the lane) retried while NATS or JetStream was unreachable."),
		laneForeignWrites: reg.NewCounter("ckf_relay_lane_foreign_writes_total",
			"Publishes refused because another writer moved the lane while this relay still held its lease (junk on the lane subjects); each was retried, none fenced the relay."),
		fault: reg.NewGaugeVec("ckf_relay_fault",
			"1 while a standing fault holds: epoch_exhausted (the pool's epoch counter is at its maximum), tracked_blocks (--max-tracked-blocks reached), setup (streams, buckets or the lane could not be set up).", "kind"),
		setupFailures: reg.NewCounterVec("ckf_relay_setup_failures_total",
			"Failed (re)creations of the JetStream resources, the lease coordinator or the lane registration, by step; retried with bounded backoff.", "step"),
		refusedEvents: reg.NewCounter("ckf_relay_refused_events_total",
			"Stored events refused because the pool tracks --max-tracked-blocks blocks (their blocks are missing from the index)."),
		checkpointSeconds: reg.NewHistogram("ckf_relay_checkpoint_seconds", "Time to encode and store one state checkpoint (the actor pauses meanwhile).", metrics.ExponentialBuckets(1e-3, 2, 16)),
	}
}
