// Package promx holds what every ckfrelay metrics file shares on top of
// prometheus/client_golang: registries with the runtime collectors and
// ckf_build_info, the /metrics handler (OpenMetrics, so exemplars are
// served), and trace exemplars on histograms.
package promx

import (
	"net/http"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
)

// BuildInfoName is the gauge (always 1) whose labels carry the service,
// its version and the Go version.
const BuildInfoName = "ckf_build_info"

// NewRegistry returns a registry holding the go_ and process_ collectors
// and ckf_build_info{service, version, goversion}.
func NewRegistry(service, version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        BuildInfoName,
		Help:        "Build of the running binary (always 1).",
		ConstLabels: prometheus.Labels{"service": service, "version": version, "goversion": runtime.Version()},
	})
	info.Set(1)
	reg.MustRegister(info)
	return reg
}

// Handler serves g in the format the scraper asks for; OpenMetrics (the
// only text format that carries exemplars) when it accepts it.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// ExemplarTraceID is the exemplar label holding a trace id.
const ExemplarTraceID = "trace_id"

// Observe records v on h, with the trace id of sc as an exemplar when sc
// is sampled (an unsampled trace cannot be looked up).
func Observe(h prometheus.Observer, v float64, sc trace.SpanContext) {
	if eo, ok := h.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		eo.ObserveWithExemplar(v, prometheus.Labels{ExemplarTraceID: sc.TraceID().String()})
		return
	}
	h.Observe(v)
}
