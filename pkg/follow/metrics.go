package follow

import (
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/pkg/promx"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Metric names exported by the indexer (labels in braces). Every per-lane
// series carries lane and dc; they are deleted when the lane's runner goes
// away (the service stops), so a registry outliving a service keeps no
// stale lane.
const (
	// MetricLaneState is 1 for the lane runner's current phase and 0 for the
	// others {lane, dc, state}; states are the Phase* constants.
	MetricLaneState = "ckf_indexer_lane_state"
	// MetricLaneReady is the lane's ready bit in the indexer {lane, dc}.
	MetricLaneReady = "ckf_indexer_lane_ready"
	// MetricInstalledSequence is the lane's last installed or admitted
	// sequence {lane, dc}.
	MetricInstalledSequence = "ckf_indexer_installed_sequence"
	// MetricStreamLag is the number of lane messages in the stream not yet
	// consumed, from the ordered consumer's NumPending {lane, dc}.
	MetricStreamLag = "ckf_indexer_stream_lag_messages"
	// MetricLaneAge is how long ago the lane last heard from its relay, in
	// seconds, by the store time of that message (-0.001: never) {lane, dc};
	// past --lane-stale-after the lane is stale.
	MetricLaneAge = "ckf_indexer_lane_age_seconds"
	// MetricFaults counts lane faults by kind {lane, dc, kind}.
	MetricFaults = "ckf_indexer_faults_total"
	// MetricMalformed counts refused lane messages by kind {lane, dc, kind}.
	MetricMalformed = "ckf_indexer_malformed_total"
	// MetricSuperseded counts messages of a superseded wire epoch dropped
	// before the pool {lane, dc, kind}.
	MetricSuperseded = "ckf_indexer_superseded_total"
	// MetricBootstraps counts bootstrap attempts {lane, dc,
	// outcome=installed|failed|waiting}; waiting: no snapshot marker yet.
	MetricBootstraps = "ckf_indexer_bootstraps_total"
	// MetricSnapshotRequests counts snapshot requests sent to the producer
	// {lane, dc}.
	MetricSnapshotRequests = "ckf_indexer_snapshot_requests_total"
	// MetricSnapshotFetchRetries counts snapshot body reads retried after a
	// timeout {lane, dc}.
	MetricSnapshotFetchRetries = "ckf_indexer_snapshot_fetch_retries_total"
	// MetricConsumerRestarts counts lane consumers replaced after they
	// delivered nothing for the lane's silence bound (lane.go, consume).
	MetricConsumerRestarts = "ckf_indexer_lane_consumer_restarts_total"
	// MetricDeltas counts deltas admitted to the pool {lane, dc}.
	MetricDeltas = "ckf_indexer_deltas_total"
	// MetricImages counts bucket images admitted to the pool {lane, dc}.
	MetricImages = "ckf_indexer_images_total"
	// MetricEventToQueryable observes, per delta carrying EventTimeHeader,
	// the seconds from the oldest event of its batch to the moment
	// SubmitDelta returned {lane, dc}, with the lane_apply span's trace id
	// as exemplar. It is approximate: admission precedes the
	// worker's bucket stores by the queue wait (bounded by the pool's
	// MaxDirtyToAppliedAge), and relay and indexer clocks may differ.
	MetricEventToQueryable = "ckf_indexer_event_to_queryable_seconds"
	// MetricWorkerFailures counts ingestion worker failures (recovered
	// panics) reported by the pool.
	MetricWorkerFailures = "ckf_indexer_worker_failures_total"
	// MetricUngrantedEpoch counts lane messages refused because the lease
	// coordinator never granted their epoch, even after re-reading the
	// lease bucket (forged traffic) {lane, dc, kind}: a snapshot marker's
	// epoch is above the pool's epoch counter, another message's is above
	// the epoch of the pool's lease record (so a burnt epoch, one a lost
	// acquire race left the counter at, counts here).
	MetricUngrantedEpoch = "ckf_indexer_ungranted_epoch_total"
	// MetricNewerEpochWithoutMarker counts lane messages (not markers) of
	// a granted newer epoch skipped because the lane's latest marker was its
	// installed one: instead of bootstrapping from that marker again (and
	// meeting the same traffic after it), the lane left the ready set and
	// asked for a snapshot {lane, dc, kind}.
	MetricNewerEpochWithoutMarker = "ckf_indexer_newer_epoch_without_marker_total"
	// MetricLanesRetired counts lanes dropped because their relay retired
	// them on purpose (the pool was removed; lease.LaneEntry.RetiredAt).
	MetricLanesRetired = "ckf_indexer_lanes_retired_total"
	// MetricLaneMapRejected counts lane map entries refused on read (bad DC
	// name, DC id not derived from the name, duplicate), and maps that did
	// not decode at all (entry="map").
	MetricLaneMapRejected = "ckf_indexer_lane_map_rejected_total"
	// MetricLaneStreamRecreated counts lane stream incarnations the indexer
	// saw replaced (outcome=recreated: someone else recreated it; created:
	// this indexer recreated a missing one).
	MetricLaneStreamRecreated = "ckf_indexer_lane_stream_recreated_total"
	// MetricPoolRebuilds counts ingestion pools rebuilt after a worker
	// failure.
	MetricPoolRebuilds = "ckf_indexer_pool_rebuilds_total"
	// MetricSetupRetries counts start-up steps retried while NATS or the
	// hub's JetStream was unreachable.
	MetricSetupRetries = "ckf_indexer_setup_retries_total"
)

// Lane runner phases, reported by Lanes() and MetricLaneState.
const (
	PhasePending       = "pending"
	PhaseBootstrapping = "bootstrapping"
	PhaseActive        = "active"
	PhaseBackoff       = "backoff"
	// PhaseAwaitingSnapshot: consuming, out of the ready set, because a
	// granted newer epoch's traffic came without a marker to bootstrap
	// from, or a heartbeat of the installed epoch named a sequence the
	// lane never reached; the lane asked for a snapshot and waits for a
	// marker.
	PhaseAwaitingSnapshot = "awaiting_snapshot"
	PhaseRefused          = "refused"
)

var phases = []string{PhasePending, PhaseBootstrapping, PhaseActive, PhaseBackoff, PhaseAwaitingSnapshot, PhaseRefused}

// Malformed kinds beyond the wire decode error kinds.
const (
	malformedSubject     = "subject_mismatch"
	malformedForeignPool = "foreign_pool"
	// malformedIdentity: traffic of the installed epoch under another
	// producer identity (a relay keeps one identity per epoch).
	malformedIdentity = "identity_mismatch"
	// malformedObject: a marker naming a body outside the configured
	// bucket or this pool's object names, or whose stored object disagrees
	// with it (size, digest) before any byte is read.
	malformedObject = "snapshot_object"
)

// faultNewerEpoch is the fault kind of a lane that met a granted newer
// epoch's traffic without that epoch's snapshot marker.
const faultNewerEpoch = "newer_epoch"

// faultHeartbeatGap is the fault kind of a lane that met a heartbeat of
// its installed epoch at a sequence other than the one it reached.
const faultHeartbeatGap = "heartbeat_sequence_mismatch"

// faultSuperseded is the fault kind of a lane that dropped superseded
// traffic for Config.SupersededFaultAfter without any of its own epoch.
const faultSuperseded = "superseded_traffic"

type serviceMetrics struct {
	laneState        *prometheus.GaugeVec
	laneReady        *prometheus.GaugeVec
	installed        *prometheus.GaugeVec
	lag              *prometheus.GaugeVec
	age              *prometheus.GaugeVec
	faults           *prometheus.CounterVec
	malformed        *prometheus.CounterVec
	superseded       *prometheus.CounterVec
	bootstraps       *prometheus.CounterVec
	snapshotRequests *prometheus.CounterVec
	fetchRetries     *prometheus.CounterVec
	consumerRestarts *prometheus.CounterVec
	deltas           *prometheus.CounterVec
	images           *prometheus.CounterVec
	latency          *prometheus.HistogramVec
	workerFailures   prometheus.Counter
	poolRebuilds     prometheus.Counter
	rebuildCount     atomic.Uint64 // poolRebuilds, readable for logs
	setupRetries     prometheus.Counter
	ungranted        *prometheus.CounterVec
	withoutMarker    *prometheus.CounterVec
	laneMapRejected  *prometheus.CounterVec
	streamRecreated  *prometheus.CounterVec
	lanesRetired     prometheus.Counter
}

// perLane are the vectors whose series a lane owns.
func (m *serviceMetrics) perLane() []interface {
	DeletePartialMatch(prometheus.Labels) int
} {
	return []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{m.laneState, m.laneReady, m.installed, m.lag, m.age, m.faults, m.malformed, m.superseded, m.bootstraps,
		m.snapshotRequests, m.fetchRetries, m.consumerRestarts, m.deltas, m.images, m.latency, m.ungranted, m.withoutMarker}
}

func newServiceMetrics(reg prometheus.Registerer) (*serviceMetrics, error) {
	gauges := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, append([]string{"lane", "dc"}, labels...))
	}
	counters := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{"lane", "dc"}, labels...))
	}
	m := &serviceMetrics{
		laneState:        gauges(MetricLaneState, "Lane runner phase (1 for the current phase).", "state"),
		laneReady:        gauges(MetricLaneReady, "Lane ready bit in the indexer."),
		installed:        gauges(MetricInstalledSequence, "Last installed or admitted lane sequence."),
		lag:              gauges(MetricStreamLag, "Lane stream messages not yet consumed."),
		age:              gauges(MetricLaneAge, "Seconds since the lane last heard from its relay (store time of that message)."),
		faults:           counters(MetricFaults, "Lane faults by kind.", "kind"),
		malformed:        counters(MetricMalformed, "Refused lane messages by kind.", "kind"),
		superseded:       counters(MetricSuperseded, "Messages of a superseded producer epoch dropped.", "kind"),
		bootstraps:       counters(MetricBootstraps, "Lane bootstrap attempts by outcome.", "outcome"),
		snapshotRequests: counters(MetricSnapshotRequests, "Snapshot requests sent to the producer."),
		fetchRetries:     counters(MetricSnapshotFetchRetries, "Snapshot body reads retried after a timeout."),
		consumerRestarts: counters(MetricConsumerRestarts, "Lane consumers replaced after delivering nothing for the lane's silence bound."),
		deltas:           counters(MetricDeltas, "Deltas admitted to the ingestion pool."),
		images:           counters(MetricImages, "Bucket images admitted to the ingestion pool."),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricEventToQueryable,
			Help:    "Oldest event of a delta to its admission (approximate); exemplars carry the lane_apply trace id.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 2, 20)}, []string{"lane", "dc"}),
		workerFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricWorkerFailures, Help: "Ingestion worker failures reported by the pool."}),
		poolRebuilds:   prometheus.NewCounter(prometheus.CounterOpts{Name: MetricPoolRebuilds, Help: "Ingestion pools rebuilt after a worker failure."}),
		setupRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricSetupRetries,
			Help: "Start-up steps retried while NATS or the hub's JetStream was unreachable."}),
		ungranted: counters(MetricUngrantedEpoch, "Lane messages refused: their epoch was never granted by the lease coordinator.", "kind"),
		withoutMarker: counters(MetricNewerEpochWithoutMarker,
			"Lane messages of a granted newer epoch skipped while the lane waits for that epoch's marker (its latest marker was the installed one).", "kind"),
		laneMapRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricLaneMapRejected,
			Help: "Lane map entries (entry=lane) or whole maps (entry=map) refused on read."}, []string{"entry"}),
		lanesRetired: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricLanesRetired,
			Help: "Lanes no longer followed because their relay retired them on purpose (the pool was removed)."}),
		streamRecreated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricLaneStreamRecreated,
			Help: "Lane stream incarnations replaced: recreated by another process, or created by this indexer after it went missing."}, []string{"outcome"}),
	}
	for _, c := range []prometheus.Collector{m.laneState, m.laneReady, m.installed, m.lag, m.age, m.faults, m.malformed, m.superseded,
		m.bootstraps, m.snapshotRequests, m.fetchRetries, m.consumerRestarts, m.deltas, m.images, m.latency, m.workerFailures, m.poolRebuilds,
		m.setupRetries, m.ungranted, m.withoutMarker, m.laneMapRejected, m.streamRecreated, m.lanesRetired} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// laneMetrics holds one lane's children so the hot path skips vector lookups.
type laneMetrics struct {
	m        *serviceMetrics
	lane, dc string
	ready    prometheus.Gauge
	install  prometheus.Gauge
	lag      prometheus.Gauge
	age      prometheus.Gauge
	deltas   prometheus.Counter
	images   prometheus.Counter
	latency  prometheus.Observer
}

func (m *serviceMetrics) forLane(lane int, dc string) *laneMetrics {
	l := strconv.Itoa(lane)
	return &laneMetrics{
		m: m, lane: l, dc: dc,
		ready:   m.laneReady.WithLabelValues(l, dc),
		install: m.installed.WithLabelValues(l, dc),
		lag:     m.lag.WithLabelValues(l, dc),
		age:     m.age.WithLabelValues(l, dc),
		deltas:  m.deltas.WithLabelValues(l, dc),
		images:  m.images.WithLabelValues(l, dc),
		latency: m.latency.WithLabelValues(l, dc),
	}
}

// remove deletes every series of the lane.
func (lm *laneMetrics) remove() {
	for _, v := range lm.m.perLane() {
		v.DeletePartialMatch(prometheus.Labels{"lane": lm.lane, "dc": lm.dc})
	}
}

func (lm *laneMetrics) setPhase(phase string) {
	for _, p := range phases {
		v := 0.0
		if p == phase {
			v = 1
		}
		lm.m.laneState.WithLabelValues(lm.lane, lm.dc, p).Set(v)
	}
}

func (lm *laneMetrics) fault(kind string) { lm.m.faults.WithLabelValues(lm.lane, lm.dc, kind).Inc() }
func (lm *laneMetrics) malformed(kind string) {
	lm.m.malformed.WithLabelValues(lm.lane, lm.dc, kind).Inc()
}
func (lm *laneMetrics) superseded(kind string) {
	lm.m.superseded.WithLabelValues(lm.lane, lm.dc, kind).Inc()
}
func (lm *laneMetrics) bootstrap(outcome string) {
	lm.m.bootstraps.WithLabelValues(lm.lane, lm.dc, outcome).Inc()
}
func (lm *laneMetrics) ungranted(kind string) {
	lm.m.ungranted.WithLabelValues(lm.lane, lm.dc, kind).Inc()
}
func (lm *laneMetrics) withoutMarker(kind string) {
	lm.m.withoutMarker.WithLabelValues(lm.lane, lm.dc, kind).Inc()
}
func (lm *laneMetrics) snapshotRequested() {
	lm.m.snapshotRequests.WithLabelValues(lm.lane, lm.dc).Inc()
}
func (lm *laneMetrics) fetchRetried() { lm.m.fetchRetries.WithLabelValues(lm.lane, lm.dc).Inc() }
func (lm *laneMetrics) consumerRestarted() {
	lm.m.consumerRestarts.WithLabelValues(lm.lane, lm.dc).Inc()
}

// observeLatency records one event-to-queryable latency, with the trace
// of the lane apply as exemplar when it is sampled.
func (lm *laneMetrics) observeLatency(seconds float64, sc trace.SpanContext) {
	promx.Observe(lm.latency, seconds, sc)
}

func (m *serviceMetrics) poolRebuilt() uint64 {
	m.poolRebuilds.Inc()
	return m.rebuildCount.Add(1)
}

// wireKindLabel turns a wire decode error kind into a metric label
// ("trailing bytes" → "trailing_bytes").
func wireKindLabel(k wire.ErrorKind) string {
	return strings.ReplaceAll(k.String(), " ", "_")
}
