package bridge

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ckfrelay/ckfrelay/internal/enginemetrics"
	"github.com/ckfrelay/ckfrelay/pkg/prefillest"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Serving load (docs/protocol.md §6): every LoadInterval the bridge scrapes
// the Prometheus endpoint of each engine given a metrics= option and
// publishes, per worker, the sum over its engines (data-parallel ranks) as
// a wire.WorkerLoad on ckfload.<domain>.<dc>.worker.<worker_id>, which the
// DC's relay folds into its load windows. A worker is reported only when
// every one of its engines has an endpoint and answered this round: a
// partial sum would read as less load than there is. A worker left
// unreported goes stale at the relay, whose serving load is then missing.

// DefaultLoadInterval is the default Config.LoadInterval.
const DefaultLoadInterval = 200 * time.Millisecond

// loadWorkers groups the engines by worker, keeping the workers whose
// every engine has a metrics endpoint.
func (b *Bridge) loadWorkers() map[uint64][]string {
	out := map[uint64][]string{}
	partial := map[uint64]bool{}
	for _, s := range b.cfg.Engines {
		if s.Metrics == "" {
			partial[s.WorkerID] = true
			continue
		}
		out[s.WorkerID] = append(out[s.WorkerID], s.Metrics)
	}
	for w := range partial {
		if _, ok := out[w]; ok {
			b.log.Warn().Uint64("worker_id", w).Msg("some engines of this worker have no metrics endpoint: its serving load is not reported")
			delete(out, w)
		}
	}
	return out
}

// reportLoad scrapes and publishes until ctx ends.
func (b *Bridge) reportLoad(ctx context.Context, nc *nats.Conn, workers map[uint64][]string) {
	ids := make([]uint64, 0, len(workers))
	for w := range workers {
		ids = append(ids, w)
	}
	slices.Sort(ids)
	seq := map[uint64]uint64{}
	est := map[uint64]*prefillest.Estimator{}
	for _, w := range ids {
		est[w] = new(prefillest.Estimator)
	}
	t := time.NewTicker(b.cfg.LoadInterval)
	defer t.Stop()
	var buf []byte
	for {
		for _, w := range ids {
			rep, ok := b.scrapeWorker(ctx, w, workers[w], est[w])
			if !ok {
				continue
			}
			seq[w]++
			rep.Sequence = seq[w]
			out, err := wire.AppendWorkerLoad(buf[:0], &rep)
			if err != nil {
				b.log.Error().Err(err).Uint64("worker_id", w).Msg("worker load does not encode")
				continue
			}
			buf = out
			subj, _ := wire.WorkerLoadSubject(b.cfg.Domain, b.cfg.DC, w) // validated in New
			if err := nc.Publish(subj, buf); err == nil {
				b.m.loadReports.Inc()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrapeWorker sums one worker's engines; false when any scrape failed.
// When every engine serves the prompt-token and request counters, est
// turns the waiting requests into prompt tokens to prefill (LoadPrefill):
// waiting × the mean prompt of the recently finished requests
// (package prefillest).
func (b *Bridge) scrapeWorker(ctx context.Context, worker uint64, urls []string, est *prefillest.Estimator) (wire.WorkerLoad, bool) {
	sum := enginemetrics.Load{Flags: wire.LoadRequests | wire.LoadKV | wire.LoadDecode, HasCounters: true}
	for _, u := range urls {
		l, err := enginemetrics.Scrape(ctx, b.cfg.HTTPClient, u, b.cfg.BlockSize)
		if err != nil {
			outcome := "error"
			if errors.Is(err, enginemetrics.ErrOutOfRange) {
				outcome = "out_of_range" // an engine serving absurd load: refused, not read as idle
			}
			b.m.loadScrapes.WithLabelValues(outcome).Inc()
			if ctx.Err() == nil {
				b.log.Debug().Err(err).Uint64("worker_id", worker).Str("url", u).Msg("engine metrics scrape failed")
			}
			return wire.WorkerLoad{}, false
		}
		b.m.loadScrapes.WithLabelValues("ok").Inc()
		sum.Add(l)
	}
	rep := wire.WorkerLoad{WorkerID: worker, Time: b.now(), Flags: sum.Flags}
	if sum.Flags.Has(wire.LoadRequests) {
		rep.Serving.Running, rep.Serving.Waiting = sum.Running, sum.Waiting
		if sum.HasCounters {
			rep.Flags |= wire.LoadPrefill | wire.LoadPrefillEstimated
			rep.Serving.ActivePrefillTokens = est.Observe(sum.Waiting, sum.Counters, true)
		}
	}
	if sum.Flags.Has(wire.LoadKV) {
		rep.KVCapacityBlocks = sum.CapacityBlocks
	}
	if sum.Flags.Has(wire.LoadDecode) {
		rep.Serving.ActiveDecodeBlocks = sum.ActiveDecode
	}
	return rep, true
}
