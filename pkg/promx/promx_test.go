package promx

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

func TestRegistryHasRuntimeCollectorsAndBuildInfo(t *testing.T) {
	reg := NewRegistry("relay-producer", "v1.2.3")
	for _, spec := range []string{
		"go_goroutines", "go_memstats_heap_alloc_bytes",
		`ckf_build_info{service="relay-producer",version="v1.2.3",goversion="` + runtime.Version() + `"} 1`,
	} {
		if text, ok := promtest.Has(reg, spec); !ok {
			t.Errorf("no %s in\n%s", spec, text)
		}
	}
	if runtime.GOOS == "linux" {
		if _, ok := promtest.Has(reg, "process_resident_memory_bytes"); !ok {
			t.Error("no process_ metrics on linux")
		}
	}
}

func TestExemplarsOnlyForSampledTracesAndServedAsOpenMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds", Help: "h", Buckets: []float64{1, 2}})
	reg.MustRegister(h)
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{1}})
	Observe(h, 0.5, sampled)
	Observe(h, 1.5, unsampled)
	Observe(h, 1.7, trace.SpanContext{})

	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	if !strings.Contains(text, `x_seconds_bucket{le="1.0"} 1 # {trace_id="`+sampled.TraceID().String()+`"} 0.5`) {
		t.Fatalf("no exemplar for the sampled trace:\n%s", text)
	}
	if strings.Contains(text, unsampled.TraceID().String()) || strings.Count(text, "# {") != 1 {
		t.Fatalf("exemplar for an unsampled trace:\n%s", text)
	}
	if v, _ := promtest.Has(reg, "x_seconds 3"); !strings.Contains(v, "x_seconds_count 3") {
		t.Fatalf("observations lost:\n%s", v)
	}
}

// A scope's collectors leave with it, so the same component registers
// again; another scope's series stay.
func TestScopeUnregistersOnClose(t *testing.T) {
	reg := prometheus.NewRegistry()
	mk := func() prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "ckf_test_total", Help: "test"})
	}
	a, b := NewScope(reg, prometheus.Labels{"domain": "a"}), NewScope(reg, prometheus.Labels{"domain": "b"})
	a.MustRegister(mk())
	b.MustRegister(mk())
	if err := a.Register(mk()); err == nil {
		t.Fatal("a second collector of the same series registered")
	}
	a.Close()
	if err := a.Register(mk()); err != nil {
		t.Fatalf("registering again after Close: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || len(mfs[0].GetMetric()) != 2 {
		t.Fatalf("gathered %v, want ckf_test_total for a and b", mfs)
	}
	b.Close()
	a.Close()
	if mfs, _ = reg.Gather(); len(mfs) != 0 {
		t.Fatalf("gathered %v after both scopes closed", mfs)
	}
}
