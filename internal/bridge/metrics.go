package bridge

import "github.com/prometheus/client_golang/prometheus"

// bridgeMetrics are the bridge's Prometheus series (kept in this one file
// so a registry migration touches nothing else).
type bridgeMetrics struct {
	batches       prometheus.Counter
	malformed     prometheus.Counter
	unknownFields prometheus.Counter
	events        *prometheus.CounterVec
	dropped       *prometheus.CounterVec
	blocks        prometheus.Counter
	published     prometheus.Counter
	publishErrors prometheus.Counter
	resent        prometheus.Counter
	duplicates    prometheus.Counter
	replays       *prometheus.CounterVec
	gaps          *prometheus.CounterVec
	gapBatches    prometheus.Counter
	restarts      prometheus.Counter
	clears        *prometheus.CounterVec
	reconnects    prometheus.Counter
	checkpoints   *prometheus.CounterVec
	loadScrapes   *prometheus.CounterVec
	loadReports   prometheus.Counter
	connected     *prometheus.GaugeVec
	lastSeq       *prometheus.GaugeVec
}

// convertCounters are the children the per-batch path adds to, resolved
// once: a vector lookup takes a lock and allocates.
type convertCounters struct {
	stored, removed, cleared                                 prometheus.Counter
	tier, unknownMedium, blockSize, nonMain, remote, dupHash prometheus.Counter
	emptyStore, shortTokens, unknownEvent, badEvent          prometheus.Counter
}

func (m *bridgeMetrics) convertCounters() convertCounters {
	return convertCounters{
		stored: m.events.WithLabelValues("stored"), removed: m.events.WithLabelValues("removed"), cleared: m.events.WithLabelValues("cleared"),
		tier: m.dropped.WithLabelValues("tier"), unknownMedium: m.dropped.WithLabelValues("unknown_medium"), blockSize: m.dropped.WithLabelValues("block_size"),
		nonMain: m.dropped.WithLabelValues("non_main_group"), remote: m.dropped.WithLabelValues("remote_locality"), dupHash: m.dropped.WithLabelValues("duplicate_hashes"),
		emptyStore: m.dropped.WithLabelValues("empty_store"), shortTokens: m.dropped.WithLabelValues("short_tokens"),
		unknownEvent: m.dropped.WithLabelValues("unknown_event"), badEvent: m.dropped.WithLabelValues("bad_event"),
	}
}

// newBridgeMetrics registers the bridge's series on reg (a private
// registry when nil); a second bridge on one registerer fails.
func newBridgeMetrics(reg prometheus.Registerer) (*bridgeMetrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	gaugeVec := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	m := &bridgeMetrics{
		batches:       counter("ckf_bridge_batches_total", "Engine event batches applied (decoded, converted, handed to JetStream)."),
		malformed:     counter("ckf_bridge_malformed_batches_total", "Engine batches rejected as malformed msgpack or framing (skipped; their sequence still counts)."),
		unknownFields: counter("ckf_bridge_unknown_fields_total", "Unknown map keys and trailing array elements skipped while decoding."),
		events:        counterVec("ckf_bridge_events_total", "RouterEvents published, by kind.", "kind"),
		dropped:       counterVec("ckf_bridge_dropped_events_total", "Engine events not published, by reason.", "reason"),
		blocks:        counter("ckf_bridge_stored_blocks_total", "Blocks published in stored events."),
		published:     counter("ckf_bridge_published_total", "KVEVENTS messages acknowledged by JetStream."),
		publishErrors: counter("ckf_bridge_publish_errors_total", "KVEVENTS publishes that failed or timed out (the engine is then replayed from the last acknowledged batch)."),
		resent:        counter("ckf_bridge_deduplicated_publishes_total", "Re-sent batches JetStream dropped as duplicates of an earlier publish (same Nats-Msg-Id)."),
		duplicates:    counter("ckf_bridge_duplicate_batches_total", "Batches dropped because their sequence was already applied (live/replay overlap)."),
		replays:       counterVec("ckf_bridge_replays_total", "Replay requests, by outcome.", "outcome"),
		gaps:          counterVec("ckf_bridge_gaps_total", "Sequence gaps, by outcome (recovered by replay, or unrecoverable: worker cleared).", "outcome"),
		gapBatches:    counter("ckf_bridge_gap_batches_lost_total", "Engine batches lost in unrecoverable gaps."),
		restarts:      counter("ckf_bridge_engine_restarts_total", "Engine restarts detected (sequence went back or replay disagreed)."),
		clears:        counterVec("ckf_bridge_worker_clears_total", "Worker clears the bridge published, by reason.", "reason"),
		reconnects:    counter("ckf_bridge_reconnects_total", "ZMQ (re)connection attempts after a failure."),
		checkpoints:   counterVec("ckf_bridge_checkpoints_total", "Per-engine resume checkpoints, by outcome.", "outcome"),
		loadScrapes:   counterVec("ckf_bridge_load_scrapes_total", "Scrapes of the engines' metrics endpoints, by outcome (ok, error, out_of_range: a value no engine can have, refused).", "outcome"),
		loadReports: prometheus.NewCounter(prometheus.CounterOpts{Name: "ckf_bridge_load_reports_total",
			Help: "Worker load reports published for the relay (one per worker whose every engine was scraped)."}),
		connected: gaugeVec("ckf_bridge_engine_connected", "1 while the engine's live socket is connected.", "worker_id", "endpoint"),
		lastSeq:   gaugeVec("ckf_bridge_engine_last_sequence", "Last applied engine sequence.", "worker_id", "endpoint"),
	}
	for _, c := range []prometheus.Collector{m.batches, m.malformed, m.unknownFields, m.events, m.dropped, m.blocks,
		m.published, m.publishErrors, m.resent, m.duplicates, m.replays, m.gaps, m.gapBatches, m.restarts, m.clears,
		m.reconnects, m.checkpoints, m.connected, m.lastSeq, m.loadScrapes, m.loadReports} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
