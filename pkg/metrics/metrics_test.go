package metrics

import (
	"math"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestExpositionFormat(t *testing.T) {
	r := NewRegistry()
	c := r.NewCounterVec("ckf_faults_total", "Faults by kind.", "lane", "kind")
	c.With("3", "saturated").Add(2)
	c.With("1", `we"ird`).Inc()
	g := r.NewGauge("ckf_ready_lanes", "Ready lanes.")
	g.Set(3)
	h := r.NewHistogram("ckf_latency_seconds", "Latency.", []float64{0.001, 0.01})
	h.Observe(0.0005)
	h.Observe(0.005)
	h.Observe(5)
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := rec.Body.String()
	for _, want := range []string{
		"# TYPE ckf_faults_total counter",
		`ckf_faults_total{lane="1",kind="we\"ird"} 1`,
		`ckf_faults_total{lane="3",kind="saturated"} 2`,
		"ckf_ready_lanes 3",
		`ckf_latency_seconds_bucket{le="0.001"} 1`,
		`ckf_latency_seconds_bucket{le="0.01"} 2`,
		`ckf_latency_seconds_bucket{le="+Inf"} 3`,
		"ckf_latency_seconds_count 3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if q := h.Quantile(0.5); q != 0.01 {
		t.Fatalf("p50 = %v", q)
	}
	if q := h.Quantile(0.99); !math.IsInf(q, 1) {
		t.Fatalf("p99 = %v", q)
	}
}

func TestConcurrentIncrements(t *testing.T) {
	r := NewRegistry()
	c := r.NewCounter("n_total", "n")
	g := r.NewGauge("g", "g")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Inc()
				g.Add(1)
			}
		}()
	}
	wg.Wait()
	if c.Value() != 8000 || g.Value() != 8000 {
		t.Fatalf("counter %d gauge %v", c.Value(), g.Value())
	}
}

func TestDuplicateRegistrationPanics(t *testing.T) {
	r := NewRegistry()
	r.NewCounter("x", "x")
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	r.NewGauge("x", "x")
}
