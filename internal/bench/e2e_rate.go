package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/ctxwait"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// RateSide is one side (pipeline or raw JetStream) of a paced run.
type RateSide struct {
	// Events were offered at the target rate, over SendSeconds.
	Events      int     `json:"events"`
	SendSeconds float64 `json:"send_seconds"`
	// AppliedPerSec is Events over the time from the first publish until
	// the last event was applied (pipeline: by its relay and installed by
	// the indexer; raw: received by the consumer).
	AppliedPerSec float64 `json:"applied_events_per_sec"`
	// DrainMs is how long after the last publish everything was applied:
	// a pipeline that keeps up drains in about one publish interval.
	DrainMs float64 `json:"drain_ms"`
	// Probe latencies under the load: event → queryable (pipeline) or
	// publish → receipt (raw), one probe every ProbeGap.
	Probes int     `json:"probes"`
	P50Ns  float64 `json:"p50_ns"`
	P99Ns  float64 `json:"p99_ns"`
	// Behind: the side did not keep up (applied < 90% of the target rate,
	// or a drain longer than a quarter of the send time).
	Behind bool `json:"behind"`
	// CPUCores is the process's CPU time from the first publish until
	// everything was applied, over that time: the paced generator, the
	// server and the side's consumers together. Near the machine's core
	// count the side is bound by CPU, and what it applies is what the
	// cores left it.
	CPUCores float64 `json:"cpu_cores"`
}

// E2ERate is one input rate of the sweep.
type E2ERate struct {
	TargetRate float64  `json:"target_events_per_sec"`
	Pipeline   RateSide `json:"pipeline"`
	Raw        RateSide `json:"raw"`
}

// RateConfig sizes a paced sweep.
type RateConfig struct {
	// Rates are the target input rates in events/s (default 10k, 50k, 100k).
	Rates []float64
	// Duration is the send time per rate and side (default 2s).
	Duration time.Duration
	// ProbeGap is the pause between latency probes (default 10ms).
	ProbeGap time.Duration
}

func (c RateConfig) withDefaults() RateConfig {
	if c.Rates == nil {
		c.Rates = []float64{10000, 50000, 100000}
	}
	if c.Duration == 0 {
		c.Duration = 2 * time.Second
	}
	if c.ProbeGap == 0 {
		c.ProbeGap = 10 * time.Millisecond
	}
	return c
}

// batchOf replays requests until the batch holds at least events events.
func (e *Env) batchOf(events int) (*Batch, error) {
	b := &Batch{PerDC: make([]int, len(e.cfg.DCs))}
	for b.Events < events {
		nb, err := e.NextBatch(500)
		if err != nil {
			return nil, err
		}
		b.Msgs = append(b.Msgs, nb.Msgs...)
		b.Events += nb.Events
		for i, n := range nb.PerDC {
			b.PerDC[i] += n
		}
	}
	return b, nil
}

// pace publishes msgs (subjects rewritten by subj) so that event k leaves
// at start + k/rate, and waits for every ack. It returns when the last
// message was published.
func (e *Env) pace(ctx context.Context, msgs []BatchMsg, rate float64, subj func(string) string) (start, last time.Time, err error) {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	start = time.Now()
	sent := 0
	for _, m := range msgs {
		due := start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
		if d := time.Until(due); d > 200*time.Microsecond {
			if !ctxwait.Sleep(ctx, d) {
				return start, last, ctx.Err()
			}
		}
		f, err := e.publishAsync(ctx, subj(m.Subject), m.Data)
		if err != nil {
			return start, last, fmt.Errorf("bench: paced publish: %w", err)
		}
		futures = append(futures, f)
		sent += m.Events
	}
	last = time.Now()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return start, last, fmt.Errorf("bench: paced publish ack: %w", err)
		case <-ctx.Done():
			return start, last, ctx.Err()
		}
	}
	return start, last, nil
}

// RatePipeline offers the pipeline rate events/s of replayed trace events
// for d while probing event→queryable latency every gap.
func (e *Env) RatePipeline(ctx context.Context, rate float64, d, gap time.Duration) (RateSide, error) {
	if e.ix == nil {
		return RateSide{}, errors.New("bench: pipeline not started")
	}
	b, err := e.batchOf(int(rate * d.Seconds()))
	if err != nil {
		return RateSide{}, err
	}
	base := make([]uint64, len(e.relays))
	for i, r := range e.relays {
		base[i] = r.Status().Events
	}
	probes, stopProbes, probeErr := e.probeWhile(ctx, gap)
	cpu := processCPU()
	start, last, err := e.pace(ctx, b.Msgs, rate, func(s string) string { return s })
	if err != nil {
		stopProbes()
		return RateSide{}, err
	}
	// Probe events add to DC 0's count; wait for at least the load's.
	if err := e.waitFor(ctx, "relays applied the paced load", func() bool {
		for i, r := range e.relays {
			if r.Status().Events-base[i] < uint64(b.PerDC[i]) {
				return false
			}
		}
		return true
	}); err != nil {
		stopProbes()
		return RateSide{}, err
	}
	if err := e.waitFor(ctx, "indexer installed the paced load", func() bool {
		for i, r := range e.relays {
			st := r.Status()
			l, ok := e.lane(e.cfg.DCs[i])
			if !ok || l.State != follow.PhaseActive || l.Epoch < st.Epoch || (l.Epoch == st.Epoch && l.InstalledSequence < st.Sequence) {
				return false
			}
		}
		return true
	}); err != nil {
		stopProbes()
		return RateSide{}, err
	}
	done := time.Now()
	cpu = processCPU() - cpu
	stopProbes()
	if err := <-probeErr; err != nil {
		return RateSide{}, err
	}
	return rateSide(b.Events, rate, start, last, done, cpu, *probes), nil
}

// probeWhile measures event→queryable probes every gap until stopped.
func (e *Env) probeWhile(ctx context.Context, gap time.Duration) (*[]time.Duration, func(), <-chan error) {
	var out []time.Duration
	pctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	var once sync.Once
	done := make(chan struct{})
	go func() {
		defer close(done)
		dc := e.cfg.DCs[0]
		subj, err := wire.WorkerEventsSubject(e.cfg.Domain, dc, probeWorker)
		if err != nil {
			errc <- err
			return
		}
		for pctx.Err() == nil {
			locals, store, remove, err := e.probeEvents()
			if err != nil {
				errc <- err
				return
			}
			t0 := time.Now()
			f, err := e.publishProbe(pctx, subj, store)
			if err != nil {
				break // stopped mid-publish
			}
			lat, err := awaitProbe(pctx, t0, e.cfg.Timeout, func() bool { return e.visible(locals, dc) }, nil)
			if pctx.Err() != nil {
				break
			}
			if err != nil {
				errc <- fmt.Errorf("bench: paced pipeline probe: %w", err)
				return
			}
			out = append(out, lat)
			if err := e.ackProbe(pctx, f); err != nil {
				break
			}
			if _, err := e.pubJS.Publish(pctx, subj, remove); err != nil {
				break
			}
			ctxwait.Sleep(pctx, gap)
		}
		errc <- nil
	}()
	stop := func() { once.Do(func() { cancel(); <-done }) }
	return &out, stop, errc
}

// RateRaw is RatePipeline's baseline: the same kind of payloads paced into
// a plain stream, drained by one pull consumer, while probe messages on
// their own subject are timed publish → receipt by a second consumer
// (polled like the pipeline's probes, see awaitProbe).
func (e *Env) RateRaw(ctx context.Context, b *Batch, rate float64, gap time.Duration) (RateSide, error) {
	load, stopLoad, err := e.newRawConsumer(ctx, rawPrefix+".load.>", len(b.Msgs)+1)
	if err != nil {
		return RateSide{}, err
	}
	defer stopLoad()
	probe, stopProbe, err := e.newRawConsumer(ctx, rawLatSubject, 1)
	if err != nil {
		return RateSide{}, err
	}
	defer stopProbe()
	_, payload, _, err := e.probeEvents()
	if err != nil {
		return RateSide{}, err
	}
	var lats []time.Duration
	pctx, cancel := context.WithCancel(ctx)
	probeDone := make(chan error, 1)
	go func() {
		for pctx.Err() == nil {
			t0 := time.Now()
			f, err := e.publishProbe(pctx, rawLatSubject, payload)
			if err != nil {
				break // stopped mid-publish
			}
			lat, err := awaitProbe(pctx, t0, e.cfg.Timeout, probe.received, nil)
			if pctx.Err() != nil {
				break
			}
			if err != nil {
				probeDone <- fmt.Errorf("bench: paced raw probe: %w", err)
				return
			}
			lats = append(lats, lat)
			if err := e.ackProbe(pctx, f); err != nil {
				break
			}
			ctxwait.Sleep(pctx, gap)
		}
		probeDone <- nil
	}()
	cpu := processCPU()
	start, last, err := e.pace(ctx, b.Msgs, rate, func(s string) string { return rawPrefix + ".load." + s })
	if err != nil {
		cancel()
		<-probeDone
		return RateSide{}, err
	}
	var done time.Time
	timeout := time.After(e.cfg.Timeout)
	for range len(b.Msgs) {
		select {
		case done = <-load.at:
		case <-timeout:
			cancel()
			<-probeDone
			return RateSide{}, fmt.Errorf("bench: raw consumer did not receive %d paced messages within %s", len(b.Msgs), e.cfg.Timeout)
		case <-ctx.Done():
			cancel()
			<-probeDone
			return RateSide{}, ctx.Err()
		}
	}
	done = maxTime(done, last)
	cpu = processCPU() - cpu
	cancel()
	if err := <-probeDone; err != nil {
		return RateSide{}, err
	}
	return rateSide(b.Events, rate, start, last, done, cpu, lats), nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func rateSide(events int, rate float64, start, last, done time.Time, cpu time.Duration, lat []time.Duration) RateSide {
	l := summarize(lat)
	s := RateSide{
		Events:      events,
		SendSeconds: last.Sub(start).Seconds(),
		DrainMs:     float64(done.Sub(last).Microseconds()) / 1e3,
		Probes:      len(lat),
		P50Ns:       float64(l.P50.Nanoseconds()),
		P99Ns:       float64(l.P99.Nanoseconds()),
	}
	if el := done.Sub(start).Seconds(); el > 0 {
		s.AppliedPerSec = float64(events) / el
		s.CPUCores = cpu.Seconds() / el
	}
	s.Behind = s.AppliedPerSec < 0.9*rate || s.DrainMs > 250*s.SendSeconds
	return s
}

// RateSweep runs both sides at every rate of cfg, pipeline first, on the
// same payloads.
func (e *Env) RateSweep(ctx context.Context, cfg RateConfig, progress func(string, ...any)) ([]E2ERate, error) {
	cfg = cfg.withDefaults()
	var out []E2ERate
	for _, rate := range cfg.Rates {
		if rate <= 0 {
			return nil, fmt.Errorf("bench: rate %v is not positive", rate)
		}
		progress("e2e: paced input at %.0f events/s for %s, pipeline", rate, cfg.Duration)
		p, err := e.RatePipeline(ctx, rate, cfg.Duration, cfg.ProbeGap)
		if err != nil {
			return out, err
		}
		progress("e2e: paced input at %.0f events/s for %s, raw JetStream", rate, cfg.Duration)
		b, err := e.batchOf(int(rate * cfg.Duration.Seconds()))
		if err != nil {
			return out, err
		}
		r, err := e.RateRaw(ctx, b, rate, cfg.ProbeGap)
		if err != nil {
			return out, err
		}
		out = append(out, E2ERate{TargetRate: rate, Pipeline: p, Raw: r})
	}
	return out, nil
}
