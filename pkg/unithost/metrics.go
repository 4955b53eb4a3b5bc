package unithost

import "github.com/prometheus/client_golang/prometheus"

type hostMetrics struct {
	units   prometheus.Gauge
	refused func(kind string)
	limit   *prometheus.GaugeVec
	failed  func(name string)
}

func newHostMetrics(reg prometheus.Registerer, n MetricNames) (hostMetrics, error) {
	m := hostMetrics{units: prometheus.NewGauge(prometheus.GaugeOpts{Name: "unithost_units", Help: "-"}),
		refused: func(string) {}, failed: func(string) {}}
	var cs []prometheus.Collector
	if n.Units != "" {
		m.units = prometheus.NewGauge(prometheus.GaugeOpts{Name: n.Units, Help: "Units (one per domain) this process hosts."})
		cs = append(cs, m.units)
	}
	if n.Refused != "" {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: n.Refused,
			Help: "Units refused, by kind (too_many, not_allowed, invalid, over_budget)."}, []string{"kind"})
		m.refused = func(kind string) { v.WithLabelValues(kind).Inc() }
		cs = append(cs, v)
	}
	if n.Limit != "" {
		m.limit = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: n.Limit, Help: "The host's bounds, by bound."}, []string{"bound"})
		cs = append(cs, m.limit)
	}
	if n.Failed != "" {
		label := n.FailedLabel
		if label == "" {
			label = "unit"
		}
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: n.Failed, Help: "Units whose Run returned an error."}, []string{label})
		m.failed = func(name string) { v.WithLabelValues(name).Inc() }
		cs = append(cs, v)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return hostMetrics{}, err
		}
	}
	return m, nil
}

func (m hostMetrics) setLimit(bound string, max int) { m.setLimitF(bound, float64(max)) }

func (m hostMetrics) setLimitF(bound string, v float64) {
	if m.limit != nil {
		m.limit.WithLabelValues(bound).Set(v)
	}
}
