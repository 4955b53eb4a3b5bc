package indexer

import (
	"strconv"
	"strings"

	"github.com/ckfrelay/ckfrelay/pkg/metrics"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Metric names exported by the indexer (labels in braces).
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
	// MetricFaults counts lane faults by kind {lane, kind}.
	MetricFaults = "ckf_indexer_faults_total"
	// MetricMalformed counts refused lane messages by kind {lane, kind}.
	MetricMalformed = "ckf_indexer_malformed_total"
	// MetricSuperseded counts messages of a superseded wire epoch dropped
	// before the pool {lane, kind}.
	MetricSuperseded = "ckf_indexer_superseded_total"
	// MetricBootstraps counts bootstrap attempts {lane,
	// outcome=installed|failed|waiting}; waiting: no snapshot marker yet.
	MetricBootstraps = "ckf_indexer_bootstraps_total"
	// MetricSnapshotRequests counts snapshot requests sent to the producer {lane}.
	MetricSnapshotRequests = "ckf_indexer_snapshot_requests_total"
	// MetricSnapshotFetchRetries counts snapshot body reads retried after a
	// timeout {lane}.
	MetricSnapshotFetchRetries = "ckf_indexer_snapshot_fetch_retries_total"
	// MetricDeltas counts deltas admitted to the pool {lane}.
	MetricDeltas = "ckf_indexer_deltas_total"
	// MetricImages counts bucket images admitted to the pool {lane}.
	MetricImages = "ckf_indexer_images_total"
	// MetricEventToQueryable observes, per delta carrying EventTimeHeader,
	// the seconds from the oldest event of its batch to the moment
	// SubmitDelta returned {lane}. It is approximate: admission precedes the
	// worker's bucket stores by the queue wait (bounded by the pool's
	// MaxDirtyToAppliedAge), and relay and indexer clocks may differ.
	MetricEventToQueryable = "ckf_indexer_event_to_queryable_seconds"
	// MetricWorkerFailures counts ingestion worker failures (recovered
	// panics) reported by the pool.
	MetricWorkerFailures = "ckf_indexer_worker_failures_total"
	// MetricUngrantedEpoch counts lane messages refused because their epoch
	// is above every epoch the lease coordinator has granted the pool, even
	// after re-reading the lease bucket (forged traffic) {lane, kind}.
	MetricUngrantedEpoch = "ckf_indexer_ungranted_epoch_total"
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
	PhaseRefused       = "refused"
)

var phases = []string{PhasePending, PhaseBootstrapping, PhaseActive, PhaseBackoff, PhaseRefused}

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

// faultSuperseded is the fault kind of a lane that dropped superseded
// traffic for Config.SupersededFaultAfter without any of its own epoch.
const faultSuperseded = "superseded_traffic"

type serviceMetrics struct {
	laneState        *metrics.GaugeVec
	laneReady        *metrics.GaugeVec
	installed        *metrics.GaugeVec
	lag              *metrics.GaugeVec
	faults           *metrics.CounterVec
	malformed        *metrics.CounterVec
	superseded       *metrics.CounterVec
	bootstraps       *metrics.CounterVec
	snapshotRequests *metrics.CounterVec
	fetchRetries     *metrics.CounterVec
	deltas           *metrics.CounterVec
	images           *metrics.CounterVec
	latency          *metrics.HistogramVec
	workerFailures   *metrics.Counter
	poolRebuilds     *metrics.Counter
	setupRetries     *metrics.Counter
	ungranted        *metrics.CounterVec
	laneMapRejected  *metrics.CounterVec
	streamRecreated  *metrics.CounterVec
}

func newServiceMetrics(reg *metrics.Registry) *serviceMetrics {
	return &serviceMetrics{
		laneState:        reg.NewGaugeVec(MetricLaneState, "Lane runner phase (1 for the current phase).", "lane", "dc", "state"),
		laneReady:        reg.NewGaugeVec(MetricLaneReady, "Lane ready bit in the indexer.", "lane", "dc"),
		installed:        reg.NewGaugeVec(MetricInstalledSequence, "Last installed or admitted lane sequence.", "lane", "dc"),
		lag:              reg.NewGaugeVec(MetricStreamLag, "Lane stream messages not yet consumed.", "lane", "dc"),
		faults:           reg.NewCounterVec(MetricFaults, "Lane faults by kind.", "lane", "kind"),
		malformed:        reg.NewCounterVec(MetricMalformed, "Refused lane messages by kind.", "lane", "kind"),
		superseded:       reg.NewCounterVec(MetricSuperseded, "Messages of a superseded producer epoch dropped.", "lane", "kind"),
		bootstraps:       reg.NewCounterVec(MetricBootstraps, "Lane bootstrap attempts by outcome.", "lane", "outcome"),
		snapshotRequests: reg.NewCounterVec(MetricSnapshotRequests, "Snapshot requests sent to the producer.", "lane"),
		fetchRetries:     reg.NewCounterVec(MetricSnapshotFetchRetries, "Snapshot body reads retried after a timeout.", "lane"),
		deltas:           reg.NewCounterVec(MetricDeltas, "Deltas admitted to the ingestion pool.", "lane"),
		images:           reg.NewCounterVec(MetricImages, "Bucket images admitted to the ingestion pool.", "lane"),
		latency: reg.NewHistogramVec(MetricEventToQueryable, "Oldest event of a delta to its admission (approximate).",
			metrics.ExponentialBuckets(1e-4, 2, 20), "lane"),
		workerFailures: reg.NewCounter(MetricWorkerFailures, "Ingestion worker failures reported by the pool."),
		poolRebuilds:   reg.NewCounter(MetricPoolRebuilds, "Ingestion pools rebuilt after a worker failure."),
		setupRetries:   reg.NewCounter(MetricSetupRetries, "Start-up steps retried while NATS or the hub's JetStream was unreachable."),
		ungranted: reg.NewCounterVec(MetricUngrantedEpoch,
			"Lane messages refused: their epoch was never granted by the lease coordinator.", "lane", "kind"),
		streamRecreated: reg.NewCounterVec(MetricLaneStreamRecreated,
			"Lane stream incarnations replaced: recreated by another process, or created by this indexer after it went missing.", "outcome"),
		laneMapRejected: reg.NewCounterVec(MetricLaneMapRejected,
			"Lane map entries (entry=lane) or whole maps (entry=map) refused on read.", "entry"),
	}
}

// laneMetrics holds one lane's children so the hot path skips vector lookups.
type laneMetrics struct {
	m        *serviceMetrics
	lane, dc string
	ready    *metrics.Gauge
	install  *metrics.Gauge
	lag      *metrics.Gauge
	deltas   *metrics.Counter
	images   *metrics.Counter
	latency  *metrics.Histogram
}

func (m *serviceMetrics) forLane(lane int, dc string) *laneMetrics {
	l := strconv.Itoa(lane)
	return &laneMetrics{
		m: m, lane: l, dc: dc,
		ready:   m.laneReady.With(l, dc),
		install: m.installed.With(l, dc),
		lag:     m.lag.With(l, dc),
		deltas:  m.deltas.With(l),
		images:  m.images.With(l),
		latency: m.latency.With(l),
	}
}

func (lm *laneMetrics) setPhase(phase string) {
	for _, p := range phases {
		v := 0.0
		if p == phase {
			v = 1
		}
		lm.m.laneState.With(lm.lane, lm.dc, p).Set(v)
	}
}

func (lm *laneMetrics) fault(kind string)      { lm.m.faults.With(lm.lane, kind).Inc() }
func (lm *laneMetrics) malformed(kind string)  { lm.m.malformed.With(lm.lane, kind).Inc() }
func (lm *laneMetrics) superseded(kind string) { lm.m.superseded.With(lm.lane, kind).Inc() }
func (lm *laneMetrics) bootstrap(outcome string) {
	lm.m.bootstraps.With(lm.lane, outcome).Inc()
}
func (lm *laneMetrics) ungranted(kind string) { lm.m.ungranted.With(lm.lane, kind).Inc() }
func (lm *laneMetrics) snapshotRequested()    { lm.m.snapshotRequests.With(lm.lane).Inc() }

func (lm *laneMetrics) fetchRetried() { lm.m.fetchRetries.With(lm.lane).Inc() }

// wireKindLabel turns a wire decode error kind into a metric label
// ("trailing bytes" → "trailing_bytes").
func wireKindLabel(k wire.ErrorKind) string {
	return strings.ReplaceAll(k.String(), " ", "_")
}
