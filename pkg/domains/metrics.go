package domains

import "github.com/prometheus/client_golang/prometheus"

// Metric names.
const (
	// MetricDomains is the number of domains served.
	MetricDomains = "ckf_indexer_domains"
	// MetricRefused counts domains refused, by kind (too_many, over_budget:
	// table memory, not_allowed, invalid: unithost.ErrorKind).
	MetricRefused = "ckf_indexer_domains_refused_total"
	// MetricTableBytes is the table memory the domains reserved.
	MetricTableBytes = "ckf_indexer_domains_table_bytes"
	// MetricLimit is each bound: domains, table_bytes.
	MetricLimit = "ckf_indexer_domains_limit"
	// MetricFailed counts domains whose service stopped on an error.
	MetricFailed = "ckf_indexer_domain_failures_total"
)

// metrics are the registry's own; the host exports MetricDomains,
// MetricRefused, MetricLimit (bound="domains"; the registry adds
// bound="table_bytes") and MetricFailed.
type metrics struct {
	tableBytes prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		tableBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricTableBytes, Help: "Table memory reserved by the domains, in bytes."}),
	}
	for _, c := range []prometheus.Collector{m.tableBytes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
