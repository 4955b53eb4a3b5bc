package relay

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// relayMetrics are the relay's Prometheus series. Every series carries the
// relay's dc (a constant label), so a dashboard groups relays by DC
// whatever their scrape target.
type relayMetrics struct {
	events          prometheus.Counter
	eventsApplied   atomic.Uint64 // the same count, readable for Status
	badEvents       *prometheus.CounterVec
	eventErrors     *prometheus.CounterVec
	unknownRemovals prometheus.Counter
	zeroParentRoots prometheus.Counter
	refusals        *prometheus.CounterVec
	deltas          prometheus.Counter
	images          prometheus.Counter
	snapshots       *prometheus.CounterVec
	drains          prometheus.Counter
	heartbeats      prometheus.Counter
	fences          *prometheus.CounterVec
	epoch           prometheus.Gauge
	sequence        prometheus.Gauge
	state           *prometheus.GaugeVec
	inputPending    prometheus.Gauge
	uniqueBlocks    prometheus.Gauge
	occupiedSlots   prometheus.Gauge
	publishSeconds  prometheus.Histogram
	cutEvents       prometheus.Histogram

	checkpoints        *prometheus.CounterVec
	checkpointSeconds  prometheus.Histogram
	inputGap           prometheus.Counter
	rebuildTailDropped prometheus.Counter
	setupRetries       prometheus.Counter

	laneForeignWrites prometheus.Counter
	fault             *prometheus.GaugeVec
	setupFailures     *prometheus.CounterVec
	refusedEvents     prometheus.Counter

	loadWindows *prometheus.CounterVec
	workerLoads *prometheus.CounterVec
}

// newRelayMetrics registers the relay's series on reg (a private registry
// when nil). Registering twice on one registry fails: one relay per
// registry.
func newRelayMetrics(reg prometheus.Registerer, dc string) (*relayMetrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"dc": dc}, reg)
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	}
	m := &relayMetrics{
		events:          counter("ckf_relay_events_total", "Worker KV events applied to the pool state."),
		badEvents:       counterVec("ckf_relay_bad_events_total", "Input messages rejected before apply, by reason.", "reason"),
		eventErrors:     counterVec("ckf_relay_event_errors_total", "Applied events that reported an error, by kind.", "kind"),
		unknownRemovals: counter("ckf_relay_unknown_removals_total", "Removals of blocks the pool did not track."),
		refusals: counterVec("ckf_relay_refusals_total",
			"Worker events refused whole, by reason (parent_block_not_found, invalid_block_sequence, unsupported_residency_domain, worker_mismatch, tracked_blocks): their blocks are missing from the index.", "reason"),
		zeroParentRoots: counter("ckf_relay_zero_parent_roots_total",
			"Stored events whose parent hash 0 the worker did not hold, read as having no parent (the array form of engines that write 0 for none, as llm-d-inference-sim does)."),
		deltas:        counter("ckf_relay_deltas_published_total", "Deltas accepted by JetStream."),
		images:        counter("ckf_relay_images_published_total", "Bucket images published in deltas."),
		snapshots:     counterVec("ckf_relay_snapshots_total", "Barrier snapshots published, by trigger.", "trigger"),
		drains:        counter("ckf_relay_drain_markers_total", "Drain markers published."),
		heartbeats:    counter("ckf_relay_heartbeats_total", "Heartbeats published."),
		fences:        counterVec("ckf_relay_fences_total", "Times the relay stopped publishing under an epoch, by reason.", "reason"),
		epoch:         gauge("ckf_relay_epoch", "Producer lease epoch currently published under (0 when standby)."),
		sequence:      gauge("ckf_relay_sequence", "Last published lane sequence."),
		state:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ckf_relay_state", Help: "1 for the relay's current state."}, []string{"state"}),
		inputPending:  gauge("ckf_relay_input_pending_messages", "Input messages stored in JetStream but not yet applied."),
		uniqueBlocks:  gauge("ckf_relay_unique_blocks", "Distinct blocks the pool tracks."),
		occupiedSlots: gauge("ckf_relay_occupied_slots", "Occupied CKF slots."),
		publishSeconds: histogram("ckf_relay_publish_duration_seconds", "Time to publish one delta (JetStream ack included); exemplars carry the publish span's trace id.",
			prometheus.ExponentialBuckets(1e-5, 2, 18)),
		cutEvents: histogram("ckf_relay_delta_events",
			"Events applied into one publication window (a cut: one delta, more when it exceeds --max-delta-images); with ckf_relay_deltas_published_total against ckf_relay_events_total it shows how many events a lane message carries as the rate rises.",
			prometheus.ExponentialBuckets(1, 4, 10)),
		checkpoints: counterVec("ckf_relay_checkpoints_total",
			"State checkpoints by outcome: written, write_error, skipped_lease_not_held, skipped_unread_checkpoint, skipped_over_budget (stores); restored, restored_recreated_stream, absent, rejected_format, rejected_corrupt, rejected_over_budget, rejected_stream, load_error (loads at rebuild).", "outcome"),
		inputGap: counter("ckf_relay_input_gap_messages_total",
			"Input stream sequences a rebuild needed but retention (or a purge) had already dropped; events of this DC among them are missing from the exact state."),
		rebuildTailDropped: counter("ckf_relay_rebuild_tail_dropped_total",
			"Rebuilds whose last expected input message left the stream (retention or a purge) before it was applied; each ended at what the stream still held."),
		checkpointSeconds: histogram("ckf_relay_checkpoint_duration_seconds", "Time to encode and store one state checkpoint (the actor pauses meanwhile).",
			prometheus.ExponentialBuckets(1e-3, 2, 16)),
		setupRetries: counter("ckf_relay_setup_retries_total",
			"Start-up steps (ensure streams, open the lease bucket, register the lane) retried while NATS or JetStream was unreachable."),
		laneForeignWrites: counter("ckf_relay_lane_foreign_writes_total",
			"Publishes refused because another writer moved the lane while this relay still held its lease (junk on the lane subjects); each was retried, none fenced the relay."),
		fault: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ckf_relay_fault",
			Help: "1 while a standing fault holds: epoch_exhausted (the pool's epoch counter is at its maximum), tracked_blocks (--max-tracked-blocks reached), setup (streams, buckets or the lane could not be set up), refused_events (most of a worker's recent events refused)."}, []string{"kind"}),
		setupFailures: counterVec("ckf_relay_setup_failures_total",
			"Failed (re)creations of the JetStream resources, the lease coordinator or the lane registration, by step; retried with bounded backoff.", "step"),
		refusedEvents: counter("ckf_relay_refused_events_total",
			"Stored events refused because the pool tracks --max-tracked-blocks blocks (their blocks are missing from the index)."),
		loadWindows: counterVec("ckf_relay_load_windows_total",
			"Load windows of the pool by outcome: published, publish_error, encode_error.", "outcome"),
		workerLoads: counterVec("ckf_relay_worker_load_reports_total",
			"Worker load reports received by outcome: accepted, malformed, bad_subject.", "outcome"),
	}
	for _, c := range []prometheus.Collector{m.events, m.badEvents, m.eventErrors, m.unknownRemovals, m.zeroParentRoots, m.refusals, m.deltas, m.images,
		m.snapshots, m.drains, m.heartbeats, m.fences, m.epoch, m.sequence, m.state, m.inputPending, m.uniqueBlocks,
		m.occupiedSlots, m.publishSeconds, m.cutEvents, m.checkpoints, m.inputGap, m.rebuildTailDropped, m.checkpointSeconds,
		m.setupRetries, m.laneForeignWrites, m.fault, m.setupFailures, m.refusedEvents, m.loadWindows, m.workerLoads} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// addEvents counts applied events.
func (m *relayMetrics) addEvents(n int) {
	m.events.Add(float64(n))
	m.eventsApplied.Add(uint64(n))
}
