package pools

import "github.com/prometheus/client_golang/prometheus"

// Metric names.
const (
	// MetricPools is the number of pools the process runs.
	MetricPools = "ckf_relay_pools"
	// MetricRefused counts pools refused, by kind (not_allowed, too_many,
	// invalid: unithost.ErrorKind).
	MetricRefused = "ckf_relay_pools_refused_total"
	// MetricLimit is max_pools (bound="pools").
	MetricLimit = "ckf_relay_pools_limit"
	// MetricFailed counts pools whose relay stopped on an error.
	MetricFailed = "ckf_relay_pool_failures_total"
	// MetricReloads counts pools file reloads, by outcome (ok,
	// invalid_file: the file was refused and nothing changed).
	MetricReloads = "ckf_relay_pools_reloads_total"
)

// metrics are the manager's own; the host exports MetricPools,
// MetricRefused, MetricLimit and MetricFailed.
type metrics struct {
	reloads *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricReloads,
			Help: "Pools file reloads, by outcome (ok, invalid_file)."}, []string{"outcome"}),
	}
	for _, c := range []prometheus.Collector{m.reloads} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
