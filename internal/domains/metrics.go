package domains

import "github.com/prometheus/client_golang/prometheus"

// Metric names.
const (
	// MetricDomains is the number of domains served.
	MetricDomains = "ckf_indexer_domains"
	// MetricRefused counts domains refused, by kind (too_many_domains,
	// table_memory, not_allowed, invalid_domain).
	MetricRefused = "ckf_indexer_domains_refused_total"
	// MetricTableBytes is the table memory the domains reserved.
	MetricTableBytes = "ckf_indexer_domains_table_bytes"
	// MetricLimit is each bound: domains, table_bytes.
	MetricLimit = "ckf_indexer_domains_limit"
	// MetricFailed counts domains whose service stopped on an error.
	MetricFailed = "ckf_indexer_domain_failures_total"
)

type metrics struct {
	domains    prometheus.Gauge
	refused    *prometheus.CounterVec
	tableBytes prometheus.Gauge
	limit      *prometheus.GaugeVec
	failed     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		domains: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricDomains, Help: "Domains (models) this indexer serves."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRefused,
			Help: "Domains refused, by kind (too_many_domains, table_memory, not_allowed, invalid_domain)."}, []string{"kind"}),
		tableBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricTableBytes, Help: "Table memory reserved by the domains, in bytes."}),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricLimit,
			Help: "The registry's bounds: domains, table_bytes."}, []string{"bound"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricFailed,
			Help: "Domains whose service stopped on an error."}, []string{"domain"}),
	}
	for _, c := range []prometheus.Collector{m.domains, m.refused, m.tableBytes, m.limit, m.failed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
