package pools

import "github.com/prometheus/client_golang/prometheus"

// Metric names.
const (
	// MetricPools is the number of pools the process runs.
	MetricPools = "ckf_relay_pools"
	// MetricRefused counts pools refused, by kind (not_allowed,
	// too_many_pools, invalid).
	MetricRefused = "ckf_relay_pools_refused_total"
	// MetricLimit is max_pools.
	MetricLimit = "ckf_relay_pools_limit"
	// MetricFailed counts pools whose relay stopped on an error.
	MetricFailed = "ckf_relay_pool_failures_total"
	// MetricReloads counts pools file reloads, by outcome (ok,
	// invalid_file: the file was refused and nothing changed).
	MetricReloads = "ckf_relay_pools_reloads_total"
)

type metrics struct {
	pools   prometheus.Gauge
	refused *prometheus.CounterVec
	limit   prometheus.Gauge
	failed  *prometheus.CounterVec
	reloads *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		pools: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricPools, Help: "Pools (domains) this relay process runs."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRefused,
			Help: "Pools refused, by kind (not_allowed, too_many_pools, invalid)."}, []string{"kind"}),
		limit: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricLimit, Help: "max_pools of the pools file."}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricFailed,
			Help: "Pools whose relay stopped on an error."}, []string{"domain"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricReloads,
			Help: "Pools file reloads, by outcome (ok, invalid_file)."}, []string{"outcome"}),
	}
	for _, c := range []prometheus.Collector{m.pools, m.refused, m.limit, m.failed, m.reloads} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
