package client

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
)

// Metric names (labels in braces).
const (
	// MetricFaults counts invalidations {source, reason}.
	MetricFaults = "ckf_kvrelay_client_faults_total"
	// MetricFrames counts accepted pool stream frames {source, kind}.
	MetricFrames = "ckf_kvrelay_client_frames_total"
	// MetricInstalls counts installed snapshots {source}.
	MetricInstalls = "ckf_kvrelay_client_installs_total"
	// MetricEpochs counts connection epochs started {source}.
	MetricEpochs = "ckf_kvrelay_client_epochs_total"
	// MetricInstalled is 1 while the source's lane is installed {source}.
	MetricInstalled = "ckf_kvrelay_client_installed"
)

// Metrics are the series of every Follower of one process; one Metrics
// per registry. Safe for concurrent use.
type Metrics struct {
	faults    *prometheus.CounterVec
	frames    *prometheus.CounterVec
	installs  *prometheus.CounterVec
	epochs    *prometheus.CounterVec
	installed *prometheus.GaugeVec
	// loadWindows counts the load streams' windows (load.go).
	loadWindows *prometheus.CounterVec
}

// NewMetrics registers the follower series on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		faults:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricFaults, Help: "dynamo.kvrelay.v1 lane invalidations by reason."}, []string{"source", "reason"}),
		frames:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricFrames, Help: "dynamo.kvrelay.v1 pool stream frames accepted, by kind."}, []string{"source", "kind"}),
		installs:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricInstalls, Help: "dynamo.kvrelay.v1 snapshots installed."}, []string{"source"}),
		epochs:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricEpochs, Help: "dynamo.kvrelay.v1 connection epochs started."}, []string{"source"}),
		installed:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricInstalled, Help: "1 while the source's lane is installed."}, []string{"source"}),
		loadWindows: newLoadWindowsVec(),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.faults, m.frames, m.installs, m.epochs, m.installed, m.loadWindows} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// Faults returns the number of invalidations of source for reason (tests,
// status pages).
func (m *Metrics) Faults(source string, reason Reason) float64 {
	return counterValue(m.faults.WithLabelValues(source, string(reason)))
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// The nil-safe series of one source (nil when m is nil).

func (m *Metrics) epochsFor(source string) interface{ Inc() } {
	if m == nil {
		return nil
	}
	return m.epochs.WithLabelValues(source)
}

func (m *Metrics) installsFor(source string) interface{ Inc() } {
	if m == nil {
		return nil
	}
	return m.installs.WithLabelValues(source)
}

func (m *Metrics) framesFor(source string, kind kvrelayv1.FilterUpdateKind) interface{ Inc() } {
	if m == nil {
		return nil
	}
	return m.frames.WithLabelValues(source, kindLabel(kind))
}

func kindLabel(k kvrelayv1.FilterUpdateKind) string {
	switch k {
	case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK:
		return "snapshot_chunk"
	case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_DELTA:
		return "delta"
	case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_HEARTBEAT:
		return "heartbeat"
	}
	return "other"
}
