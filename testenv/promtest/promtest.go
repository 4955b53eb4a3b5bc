// Package promtest reads metrics back from a prometheus.Gatherer for
// tests: a series is named by its metric name and a subset of its labels,
// written as in the text format: name{k="v",...}.
package promtest

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Value sums the counter, gauge or untyped samples (the sample count for
// a histogram) of the series matching spec; ok is false when none does. An
// empty metric name (`{lane="0"}`) matches every family.
func Value(g prometheus.Gatherer, spec string) (v float64, ok bool, err error) {
	name, want, err := parseSpec(spec)
	if err != nil {
		return 0, false, err
	}
	mfs, err := g.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, mf := range mfs {
		if name != "" && mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !matches(m, want) {
				continue
			}
			ok = true
			switch {
			case m.Counter != nil:
				v += m.GetCounter().GetValue()
			case m.Gauge != nil:
				v += m.GetGauge().GetValue()
			case m.Histogram != nil:
				v += float64(m.GetHistogram().GetSampleCount())
			case m.Untyped != nil:
				v += m.GetUntyped().GetValue()
			}
		}
	}
	return v, ok, nil
}

// Count is Value as a uint64, 0 when no series matches; a bad spec panics
// (it is a test's literal).
func Count(g prometheus.Gatherer, spec string) uint64 {
	v, _, err := Value(g, spec)
	if err != nil {
		panic(err)
	}
	return uint64(v)
}

// Has reports whether a series matches spec and, when spec ends with a
// value (`name{...} 3`), whether the series' sum equals it. It also returns
// the exposition for a failure message.
func Has(g prometheus.Gatherer, spec string) (string, bool) {
	spec = strings.TrimSpace(spec)
	var want *float64
	if i := strings.LastIndexAny(spec, "} "); i >= 0 && spec[i] == ' ' {
		if f, err := strconv.ParseFloat(spec[i+1:], 64); err == nil {
			want, spec = &f, strings.TrimSpace(spec[:i])
		}
	}
	v, ok, err := Value(g, spec)
	if err != nil {
		return err.Error(), false
	}
	return Text(g), ok && (want == nil || v == *want)
}

// Text is the text exposition of g.
func Text(g prometheus.Gatherer) string {
	mfs, err := g.Gather()
	if err != nil {
		return err.Error()
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		_, _ = expfmt.MetricFamilyToText(&b, mf)
	}
	return b.String()
}

func matches(m *dto.Metric, want map[string]string) bool {
	have := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		have[lp.GetName()] = lp.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// parseSpec splits name{k="v",...}; values must not contain `",`.
func parseSpec(spec string) (string, map[string]string, error) {
	name, rest, found := strings.Cut(spec, "{")
	want := map[string]string{}
	if !found {
		return spec, want, nil
	}
	rest, ok := strings.CutSuffix(rest, "}")
	if !ok {
		return "", nil, fmt.Errorf("promtest: bad series %q", spec)
	}
	for _, pair := range strings.Split(rest, ",") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		uq, err := strconv.Unquote(v)
		if !ok || err != nil {
			return "", nil, fmt.Errorf("promtest: bad label %q in %q", pair, spec)
		}
		want[k] = uq
	}
	return name, want, nil
}
