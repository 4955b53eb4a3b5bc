package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSpecsMatchLabelSubsetsAndValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"lane", "dc"})
	reg.MustRegister(c)
	c.WithLabelValues("0", "a").Add(2)
	c.WithLabelValues("1", "b").Add(3)
	for spec, want := range map[string]bool{
		`c_total 5`: true, `c_total{lane="0"} 2`: true, `c_total{lane="0",dc="a"}`: true,
		`c_total{lane="0"} 3`: false, `c_total{lane="2"}`: false, `{dc="b"} 3`: true, `d_total`: false,
	} {
		if _, ok := Has(reg, spec); ok != want {
			t.Errorf("Has(%s) = %v want %v", spec, ok, want)
		}
	}
	if Count(reg, `c_total{dc="b"}`) != 3 {
		t.Fatal("count")
	}
	if _, _, err := Value(reg, `c_total{lane=0}`); err == nil {
		t.Fatal("unquoted label value accepted")
	}
}
