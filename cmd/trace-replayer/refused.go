package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// refusedFamily is the relays' count of worker events refused whole.
const refusedFamily = "ckf_relay_refusals_total"

// maxMetricsBytes bounds one relay's exposition.
const maxMetricsBytes = 8 << 20

// relayRefusals sums ckf_relay_refusals_total over the relays' metrics
// endpoints, so the status line shows events the pipeline dropped
// instead of only answers that came out short. ok is false when an
// endpoint did not answer (the figure would undercount).
func relayRefusals(ctx context.Context, hc *http.Client, urls []string) (total uint64, ok bool) {
	ok = true
	for _, u := range urls {
		n, err := scrapeRefusals(ctx, hc, u)
		if err != nil {
			ok = false
			continue
		}
		total += n
	}
	return total, ok
}

func scrapeRefusals(ctx context.Context, hc *http.Client, url string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", url, err)
	}
	var n uint64
	for _, m := range fams[refusedFamily].GetMetric() {
		v := m.GetCounter().GetValue() + m.GetUntyped().GetValue()
		if v > 0 && v < 1<<53 {
			n += uint64(v)
		}
	}
	return n, nil
}
