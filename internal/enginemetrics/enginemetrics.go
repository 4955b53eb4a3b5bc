// Package enginemetrics reads an inference engine's serving load from the
// Prometheus endpoint it serves: vLLM (vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:kv_cache_usage_perc or the older
// vllm:gpu_cache_usage_perc, vllm:cache_config_info's num_gpu_blocks) and
// SGLang (sglang:num_running_reqs, sglang:num_queue_reqs,
// sglang:token_usage, sglang:max_total_num_tokens), and the counters over
// finished requests that give their mean prompt length (vLLM's
// vllm:request_prompt_tokens histogram, else vllm:prompt_tokens_total with
// vllm:request_success_total; SGLang's sglang:prompt_tokens_total with
// sglang:num_requests_total), from which package prefillest estimates the
// prompt tokens the waiting requests hold. A value the endpoint does not
// serve stays unknown (its flag clear), never zero.
package enginemetrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ckfrelay/ckfrelay/pkg/prefillest"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Load is one engine's serving load.
type Load struct {
	// Flags: LoadRequests (Running, Waiting), LoadDecode
	// (ActiveDecodeBlocks: the KV blocks the running requests hold, usage ×
	// capacity), LoadKV (CapacityBlocks, the engine's KV capacity).
	Flags          wire.LoadFlags
	Running        uint64
	Waiting        uint64
	ActiveDecode   uint64
	CapacityBlocks uint64
	// HasCounters: Counters are the engine's cumulative prompt tokens and
	// number of finished requests (finite, non-negative).
	HasCounters bool
	Counters    prefillest.Counters
}

// Add sums o into l; a value is known in the sum only if it is in both.
// The sums saturate at the wire's bounds.
func (l *Load) Add(o Load) {
	l.Flags &= o.Flags
	l.Running = wire.AddLoad(l.Running, o.Running, wire.MaxLoadRequests)
	l.Waiting = wire.AddLoad(l.Waiting, o.Waiting, wire.MaxLoadRequests)
	l.ActiveDecode = wire.AddLoad(l.ActiveDecode, o.ActiveDecode, wire.MaxLoadBlocks)
	l.CapacityBlocks = wire.AddLoad(l.CapacityBlocks, o.CapacityBlocks, wire.MaxLoadBlocks)
	l.HasCounters = l.HasCounters && o.HasCounters
	l.Counters.PromptTokens += o.Counters.PromptTokens
	l.Counters.Requests += o.Counters.Requests
}

// ErrNoLoad: the exposition holds none of the series this package reads
// (not a vLLM or SGLang endpoint).
var ErrNoLoad = errors.New("enginemetrics: no engine load series")

// ErrOutOfRange: a series this package reads holds a value no engine can
// have (negative, NaN, infinite, or past the wire's bound, as from a
// counter that underflowed). The scrape is refused: read as 0 it would
// make the engine look idle, read as huge it would shut it out.
var ErrOutOfRange = errors.New("enginemetrics: load value out of range")

// bounded checks a count read from a series: a finite value in [0, bound].
func bounded(name string, v float64, bound uint64) error {
	if !(v >= 0 && v <= float64(bound)) {
		return fmt.Errorf("%w: %s = %v (want 0..%d)", ErrOutOfRange, name, v, bound)
	}
	return nil
}

// MaxExpositionBytes bounds one scrape's body.
const MaxExpositionBytes = 8 << 20

// Parse reads a text exposition. blockSize converts SGLang's token
// capacity into blocks (0: its capacity stays unknown).
func Parse(r io.Reader, blockSize int) (Load, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Load{}, fmt.Errorf("enginemetrics: %w", err)
	}
	sum := func(names ...string) (float64, bool) {
		for _, n := range names {
			if f, ok := fams[n]; ok && len(f.GetMetric()) > 0 {
				v := 0.0
				for _, m := range f.GetMetric() {
					v += value(m)
				}
				return v, true
			}
		}
		return 0, false
	}
	mean := func(names ...string) (float64, bool) {
		for _, n := range names {
			if f, ok := fams[n]; ok && len(f.GetMetric()) > 0 {
				v, _ := sum(n)
				return v / float64(len(f.GetMetric())), true
			}
		}
		return 0, false
	}
	var l Load
	running, okR := sum("vllm:num_requests_running", "sglang:num_running_reqs")
	waiting, okW := sum("vllm:num_requests_waiting", "sglang:num_queue_reqs")
	if okR && okW {
		if err := errors.Join(bounded("running", running, wire.MaxLoadRequests), bounded("waiting", waiting, wire.MaxLoadRequests)); err != nil {
			return Load{}, err
		}
		l.Flags |= wire.LoadRequests
		l.Running, l.Waiting = count(running), count(waiting)
	}
	capacity, okC := vllmBlocks(fams["vllm:cache_config_info"])
	if !okC && blockSize > 0 {
		if tokens, ok := sum("sglang:max_total_num_tokens"); ok && tokens > 0 {
			if err := bounded("max_total_num_tokens", tokens/float64(blockSize), wire.MaxLoadBlocks); err != nil {
				return Load{}, err
			}
			capacity, okC = count(tokens)/uint64(blockSize), true
		}
	}
	if okC && capacity > wire.MaxLoadBlocks {
		return Load{}, fmt.Errorf("%w: num_gpu_blocks = %d (want 0..%d)", ErrOutOfRange, capacity, wire.MaxLoadBlocks)
	}
	if okC && capacity > 0 {
		l.Flags |= wire.LoadKV
		l.CapacityBlocks = capacity
		if usage, ok := mean("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"); ok {
			// A usage a little above 1 is rounding; NaN or a negative one is not.
			if !(usage >= 0) || math.IsInf(usage, 1) {
				return Load{}, fmt.Errorf("%w: KV usage = %v", ErrOutOfRange, usage)
			}
			l.Flags |= wire.LoadDecode
			l.ActiveDecode = count(min(usage, 1) * float64(capacity))
		}
	}
	if l.Flags == 0 && !okR && !okW {
		return Load{}, ErrNoLoad
	}
	l.Counters, l.HasCounters = counters(fams, sum)
	return l, nil
}

// counters reads the prompt-token and finished-request counters: vLLM's
// prompt length histogram (one pair, both counted at a request's end),
// else the counter pairs of vLLM and SGLang.
func counters(fams map[string]*dto.MetricFamily, sum func(...string) (float64, bool)) (prefillest.Counters, bool) {
	var c prefillest.Counters
	ok := false
	if f := fams["vllm:request_prompt_tokens"]; f != nil && f.GetType() == dto.MetricType_HISTOGRAM && len(f.GetMetric()) > 0 {
		for _, m := range f.GetMetric() {
			c.PromptTokens += m.GetHistogram().GetSampleSum()
			c.Requests += float64(m.GetHistogram().GetSampleCount())
		}
		ok = true
	} else {
		for _, pair := range [][2]string{{"vllm:prompt_tokens_total", "vllm:request_success_total"}, {"sglang:prompt_tokens_total", "sglang:num_requests_total"}} {
			t, okT := sum(pair[0])
			r, okR := sum(pair[1])
			if okT && okR {
				c, ok = prefillest.Counters{PromptTokens: t, Requests: r}, true
				break
			}
		}
	}
	finite := func(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }
	if !ok || !finite(c.PromptTokens) || !finite(c.Requests) {
		return prefillest.Counters{}, false
	}
	return c, true
}

// vllmBlocks sums num_gpu_blocks over cache_config_info's series (one per
// engine core).
func vllmBlocks(f *dto.MetricFamily) (uint64, bool) {
	if f == nil {
		return 0, false
	}
	var n uint64
	for _, m := range f.GetMetric() {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "num_gpu_blocks" {
				v, err := strconv.ParseUint(lp.GetValue(), 10, 64)
				if err != nil {
					return 0, false // "None": not known yet
				}
				n = wire.AddLoad(n, v, wire.MaxLoadBlocks+1) // past the bound: refused by Parse
				found = true
			}
		}
		if !found {
			return 0, false
		}
	}
	return n, n > 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// count turns a gauge into a count: NaN and negatives are 0.
func count(v float64) uint64 {
	if !(v > 0) {
		return 0
	}
	if v >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(math.Round(v))
}

// Scrape GETs url and parses its exposition (at most MaxExpositionBytes).
func Scrape(ctx context.Context, hc *http.Client, url string, blockSize int) (Load, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Load{}, fmt.Errorf("enginemetrics: %w", err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := hc.Do(req)
	if err != nil {
		return Load{}, fmt.Errorf("enginemetrics: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Load{}, fmt.Errorf("enginemetrics: scrape %s: status %d", url, resp.StatusCode)
	}
	body := io.LimitReader(resp.Body, MaxExpositionBytes+1)
	b, err := io.ReadAll(body)
	if err != nil {
		return Load{}, fmt.Errorf("enginemetrics: scrape %s: %w", url, err)
	}
	if len(b) > MaxExpositionBytes {
		return Load{}, fmt.Errorf("enginemetrics: scrape %s: body over %d bytes", url, MaxExpositionBytes)
	}
	return Parse(bytes.NewReader(b), blockSize)
}
