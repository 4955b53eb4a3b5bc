// Package metrics is a small, dependency-free Prometheus text-format
// registry: counters, gauges and histograms, optionally labelled.
//
// Concurrency: every metric is safe for concurrent use. Increments on a
// metric (or on a child obtained once from a vector) are single atomic
// operations; vector lookups take a mutex, so hot paths keep the child.
package metrics

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Registry holds metrics in registration order.
type Registry struct {
	mu      sync.Mutex
	metrics []collector
	names   map[string]bool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{names: make(map[string]bool)} }

type collector interface {
	write(w io.Writer)
	name() string
}

func (r *Registry) register(c collector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names[c.name()] {
		panic("metrics: duplicate metric " + c.name())
	}
	r.names[c.name()] = true
	r.metrics = append(r.metrics, c)
}

// WritePrometheus writes every metric in the text exposition format.
func (r *Registry) WritePrometheus(w io.Writer) {
	r.mu.Lock()
	ms := append([]collector(nil), r.metrics...)
	r.mu.Unlock()
	for _, m := range ms {
		m.write(w)
	}
}

// Handler serves the registry at /metrics.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		r.WritePrometheus(w)
	})
}

type desc struct {
	n, help, kind string
	labels        []string
}

func (d *desc) name() string { return d.n }

func (d *desc) header(w io.Writer) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", d.n, d.help, d.n, d.kind)
}

func labelString(names, values []string, extra ...string) string {
	if len(names) == 0 && len(extra) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteString(`="`)
		b.WriteString(escape(values[i]))
		b.WriteByte('"')
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if len(names) > 0 || i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(extra[i])
		b.WriteString(`="`)
		b.WriteString(extra[i+1])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func escape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Counter is a monotonically increasing count.
type Counter struct{ v atomic.Uint64 }

// Inc adds one.
func (c *Counter) Inc() { c.v.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Value returns the current count.
func (c *Counter) Value() uint64 { return c.v.Load() }

// Gauge is a float value that can go up and down.
type Gauge struct{ bits atomic.Uint64 }

// Set stores v.
func (g *Gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Add adds d atomically.
func (g *Gauge) Add(d float64) {
	for {
		old := g.bits.Load()
		if g.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Value returns the current value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

// Histogram counts observations into fixed cumulative buckets.
type Histogram struct {
	upper  []float64
	counts []atomic.Uint64
	count  atomic.Uint64
	sum    Gauge
}

func newHistogram(buckets []float64) *Histogram {
	b := append([]float64(nil), buckets...)
	sort.Float64s(b)
	return &Histogram{upper: b, counts: make([]atomic.Uint64, len(b))}
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.upper, v)
	if i < len(h.counts) {
		h.counts[i].Add(1)
	}
	h.count.Add(1)
	h.sum.Add(v)
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.count.Load() }

// Quantile estimates quantile q (0..1) as the upper bound of the bucket
// holding it; +Inf when it lies above every bucket.
func (h *Histogram) Quantile(q float64) float64 {
	total := h.count.Load()
	if total == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var cum uint64
	for i := range h.counts {
		cum += h.counts[i].Load()
		if cum >= rank {
			return h.upper[i]
		}
	}
	return math.Inf(1)
}

func (h *Histogram) write(w io.Writer, name string, names, values []string) {
	var cum uint64
	for i, u := range h.upper {
		cum += h.counts[i].Load()
		fmt.Fprintf(w, "%s_bucket%s %d\n", name, labelString(names, values, "le", formatFloat(u)), cum)
	}
	fmt.Fprintf(w, "%s_bucket%s %d\n", name, labelString(names, values, "le", "+Inf"), h.count.Load())
	fmt.Fprintf(w, "%s_sum%s %s\n", name, labelString(names, values), formatFloat(h.sum.Value()))
	fmt.Fprintf(w, "%s_count%s %d\n", name, labelString(names, values), h.count.Load())
}

// ExponentialBuckets returns n upper bounds start, start*factor, ...
func ExponentialBuckets(start, factor float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = start
		start *= factor
	}
	return out
}

type vec[T any] struct {
	desc
	mu       sync.Mutex
	children map[string]*child[T]
	mk       func() *T
}

type child[T any] struct {
	values []string
	m      *T
}

func (v *vec[T]) with(values ...string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("metrics: %s wants %d label values, got %d", v.n, len(v.labels), len(values)))
	}
	key := strings.Join(values, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.children[key]
	if !ok {
		c = &child[T]{values: append([]string(nil), values...), m: v.mk()}
		v.children[key] = c
	}
	return c.m
}

func (v *vec[T]) sorted() []*child[T] {
	v.mu.Lock()
	out := make([]*child[T], 0, len(v.children))
	for _, c := range v.children {
		out = append(out, c)
	}
	v.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return strings.Join(out[i].values, "\xff") < strings.Join(out[j].values, "\xff")
	})
	return out
}

// CounterVec is a labelled family of counters.
type CounterVec struct{ vec[Counter] }

// With returns the child for the label values (created on first use).
func (v *CounterVec) With(values ...string) *Counter { return v.with(values...) }

func (v *CounterVec) write(w io.Writer) {
	v.header(w)
	for _, c := range v.sorted() {
		fmt.Fprintf(w, "%s%s %d\n", v.n, labelString(v.labels, c.values), c.m.Value())
	}
}

// GaugeVec is a labelled family of gauges.
type GaugeVec struct{ vec[Gauge] }

// With returns the child for the label values (created on first use).
func (v *GaugeVec) With(values ...string) *Gauge { return v.with(values...) }

func (v *GaugeVec) write(w io.Writer) {
	v.header(w)
	for _, c := range v.sorted() {
		fmt.Fprintf(w, "%s%s %s\n", v.n, labelString(v.labels, c.values), formatFloat(c.m.Value()))
	}
}

// HistogramVec is a labelled family of histograms.
type HistogramVec struct{ vec[Histogram] }

// With returns the child for the label values (created on first use).
func (v *HistogramVec) With(values ...string) *Histogram { return v.with(values...) }

func (v *HistogramVec) write(w io.Writer) {
	v.header(w)
	for _, c := range v.sorted() {
		c.m.write(w, v.n, v.labels, c.values)
	}
}

// NewCounterVec registers a counter family; with no labels use With().
func (r *Registry) NewCounterVec(name, help string, labels ...string) *CounterVec {
	v := &CounterVec{vec[Counter]{desc: desc{name, help, "counter", labels}, children: map[string]*child[Counter]{}, mk: func() *Counter { return new(Counter) }}}
	r.register(v)
	return v
}

// NewCounter registers an unlabelled counter.
func (r *Registry) NewCounter(name, help string) *Counter { return r.NewCounterVec(name, help).With() }

// NewGaugeVec registers a gauge family.
func (r *Registry) NewGaugeVec(name, help string, labels ...string) *GaugeVec {
	v := &GaugeVec{vec[Gauge]{desc: desc{name, help, "gauge", labels}, children: map[string]*child[Gauge]{}, mk: func() *Gauge { return new(Gauge) }}}
	r.register(v)
	return v
}

// NewGauge registers an unlabelled gauge.
func (r *Registry) NewGauge(name, help string) *Gauge { return r.NewGaugeVec(name, help).With() }

// NewHistogramVec registers a histogram family with the given bucket bounds.
func (r *Registry) NewHistogramVec(name, help string, buckets []float64, labels ...string) *HistogramVec {
	v := &HistogramVec{vec[Histogram]{desc: desc{name, help, "histogram", labels}, children: map[string]*child[Histogram]{}, mk: func() *Histogram { return newHistogram(buckets) }}}
	r.register(v)
	return v
}

// NewHistogram registers an unlabelled histogram.
func (r *Registry) NewHistogram(name, help string, buckets []float64) *Histogram {
	return r.NewHistogramVec(name, help, buckets).With()
}
