// Package wanprobe measures a DC's pipeline end to end the way a router
// sees it (cmd/ckf-wanprobe, docs/chaos.md): a probe publishes one Stored
// event of a fresh block to the DC's KVEVENTS (acknowledged by the DC's
// JetStream, as a worker's event is) and polls the global indexer until
// the DC's lane answers that block: event → queryable. A paced load of
// single-block Stored/Removed events may run beside the probes, to tell
// whether the relay keeps up at a given rate.
package wanprobe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Matcher answers prefix queries (pkg/client's HTTP or NATS client).
type Matcher interface {
	Match(ctx context.Context, req api.MatchRequest) (api.MatchResponse, error)
}

// ErrNotQueryable is returned when a probe's block never became queryable
// within Config.Timeout.
var ErrNotQueryable = errors.New("wanprobe: block not queryable in time")

// ErrInvalidConfig is wrapped by Config.Validate's errors.
var ErrInvalidConfig = errors.New("wanprobe: invalid config")

// Config configures probes and load against one DC.
type Config struct {
	// JS is the DC's JetStream (its leaf's own domain), holding KVEVENTS.
	JS      jetstream.JetStream
	Indexer Matcher
	Domain  string
	DC      string
	// Worker is the first simulated worker id (probes use Worker, the
	// load Worker+1 … Worker+LoadWorkers).
	Worker uint64
	// Poll is the pause between two queries of one probe (default 1ms).
	Poll time.Duration
	// Timeout bounds one probe (default 30s).
	Timeout time.Duration
}

// Validate fills the defaults and reports what is missing.
func (c *Config) Validate() error {
	if c.JS == nil || c.Indexer == nil {
		return fmt.Errorf("%w: JetStream and indexer are required", ErrInvalidConfig)
	}
	if err := wire.ValidateName("domain", c.Domain); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := wire.ValidateName("dc", c.DC); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.Poll <= 0 {
		c.Poll = time.Millisecond
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	return nil
}

// Prober runs probes and load against one DC. Safe for concurrent use.
type Prober struct {
	cfg     Config
	eventID atomic.Uint64
}

// New returns a prober; cfg is validated.
func New(cfg Config) (*Prober, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Prober{cfg: cfg}, nil
}

// engineHash is the engine's block hash the probe gives a local hash.
func engineHash(local uint64) uint64 { return local ^ 0x5eed_0f_9a0be_0001 }

func (p *Prober) stored(worker, local uint64) routerevent.RouterEvent {
	return routerevent.RouterEvent{WorkerID: worker, Event: routerevent.KvCacheEvent{
		EventID: p.eventID.Add(1),
		Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{
			Blocks: []routerevent.StoredBlock{{BlockHash: engineHash(local), TokensHash: local}},
		}},
	}}
}

func (p *Prober) removed(worker, local uint64) routerevent.RouterEvent {
	return routerevent.RouterEvent{WorkerID: worker, Event: routerevent.KvCacheEvent{
		EventID: p.eventID.Add(1),
		Data:    routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{BlockHashes: []uint64{engineHash(local)}}},
	}}
}

func (p *Prober) encode(worker uint64, ev routerevent.RouterEvent) (string, []byte, error) {
	subj, err := wire.WorkerEventsSubject(p.cfg.Domain, p.cfg.DC, worker)
	if err != nil {
		return "", nil, err
	}
	b, err := json.Marshal([]routerevent.RouterEvent{ev})
	return subj, b, err
}

// depth asks the indexer for local and returns the DC's lane depth.
func (p *Prober) depth(ctx context.Context, local uint64) (int, error) {
	resp, err := p.cfg.Indexer.Match(ctx, api.MatchRequest{LocalHashes: []uint64{local}})
	if err != nil {
		return 0, err
	}
	for _, l := range resp.Lanes {
		if l.DC == p.cfg.DC {
			return int(l.Depth), nil
		}
	}
	return 0, nil
}

// Probe stores one fresh block and returns the time from just before its
// publish until the indexer answered it on the DC's lane, and the part of
// it spent waiting for the DC's JetStream ack. The block is removed again
// afterwards (not timed).
func (p *Prober) Probe(ctx context.Context) (total, ack time.Duration, err error) {
	local := rand.Uint64()
	subj, body, err := p.encode(p.cfg.Worker, p.stored(p.cfg.Worker, local))
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	start := time.Now()
	if _, err := p.cfg.JS.Publish(ctx, subj, body); err != nil {
		return 0, 0, fmt.Errorf("wanprobe: publish: %w", err)
	}
	ack = time.Since(start)
	for {
		d, err := p.depth(ctx, local)
		if err == nil && d >= 1 {
			total = time.Since(start)
			break
		}
		select {
		case <-ctx.Done():
			return 0, ack, fmt.Errorf("%w after %s (last error: %v)", ErrNotQueryable, time.Since(start).Round(time.Millisecond), err)
		case <-time.After(p.cfg.Poll):
		}
	}
	subj, body, err = p.encode(p.cfg.Worker, p.removed(p.cfg.Worker, local))
	if err == nil {
		_, err = p.cfg.JS.Publish(ctx, subj, body)
	}
	return total, ack, err
}

// Stats summarises probe latencies.
type Stats struct {
	N, Failed     int
	P50, P99, Max time.Duration
	// AckP50 is the median wait for the DC's JetStream ack, within P50.
	AckP50 time.Duration
}

func (s Stats) String() string {
	return fmt.Sprintf("probes=%d failed=%d event→queryable p50=%s p99=%s max=%s (DC ack p50=%s)",
		s.N, s.Failed, s.P50.Round(100*time.Microsecond), s.P99.Round(100*time.Microsecond), s.Max.Round(100*time.Microsecond), s.AckP50.Round(10*time.Microsecond))
}

// Quantile is the q-quantile (nearest rank) of d.
func Quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	c := slices.Clone(d)
	slices.Sort(c)
	i := int(q*float64(len(c))+0.5) - 1
	return c[min(max(i, 0), len(c)-1)]
}

// Probes starts n probes gap apart (each in its own goroutine, so a slow
// link does not slow the sampling) and summarises them.
func (p *Prober) Probes(ctx context.Context, n int, gap time.Duration) Stats {
	var mu sync.Mutex
	var lat, acks []time.Duration
	failed := 0
	var wg sync.WaitGroup
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t, a, err := p.Probe(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			lat, acks = append(lat, t), append(acks, a)
		}()
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	wg.Wait()
	return Stats{N: len(lat), Failed: failed, P50: Quantile(lat, 0.5), P99: Quantile(lat, 0.99), Max: Quantile(lat, 1), AckP50: Quantile(acks, 0.5)}
}

// LoadConfig shapes a paced load.
type LoadConfig struct {
	// Rate is the offered events per second; Duration how long.
	Rate     float64
	Duration time.Duration
	// Live is how many blocks stay stored: past it each Stored event is
	// followed by the Removed event of the oldest block (default 16384).
	Live int
	// Workers spreads the events over this many workers (default 4).
	Workers int
	// MaxPending bounds unacknowledged publishes (default 1024); the
	// JetStream context's own bound (jetstream.WithPublishAsyncMaxPending,
	// 4000 by default) must be above it.
	MaxPending int
}

// LoadResult is what a paced load did.
type LoadResult struct {
	Offered, Acked, Failed int
	SendSeconds            float64
	// AckedPerSecond is Acked over the time from the first publish to
	// the last ack.
	AckedPerSecond float64
	// Drain is the time from the last ack until the load's last stored
	// block was queryable: about one probe's latency when the relay kept
	// up, the backlog's worth when it did not.
	Drain time.Duration
}

func (r LoadResult) String() string {
	return fmt.Sprintf("offered=%d acked=%d failed=%d in %.1fs: %.0f events/s acknowledged; last block queryable %s after the last ack",
		r.Offered, r.Acked, r.Failed, r.SendSeconds, r.AckedPerSecond, r.Drain.Round(time.Millisecond))
}

// Load publishes single-block events at cfg.Rate for cfg.Duration with
// asynchronous acks, then waits until its last stored block is queryable.
func (p *Prober) Load(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	if cfg.Rate <= 0 || cfg.Duration <= 0 {
		return LoadResult{}, fmt.Errorf("%w: load rate and duration must be positive", ErrInvalidConfig)
	}
	if cfg.Live <= 0 {
		cfg.Live = 16384
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 1024
	}
	type block struct{ worker, local uint64 }
	live := make([]block, 0, cfg.Live)
	var res LoadResult
	var lastLocal uint64
	start := time.Now()
	total := int(cfg.Rate * cfg.Duration.Seconds())
	sem := make(chan struct{}, cfg.MaxPending)
	var acked, failed atomic.Int64
	var lastAck atomic.Int64
	var wg sync.WaitGroup
	// publish sends one event; counted ones are the load's (the clean-up
	// at the end is not).
	publish := func(worker uint64, ev routerevent.RouterEvent, counted bool) error {
		subj, body, err := p.encode(worker, ev)
		if err != nil {
			return err
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		f, err := p.cfg.JS.PublishAsync(subj, body)
		if !counted {
			if err != nil {
				<-sem
				return err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				select {
				case <-f.Ok():
				case <-f.Err():
				case <-ctx.Done():
				}
			}()
			return nil
		}
		res.Offered++
		if err != nil {
			<-sem
			failed.Add(1)
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			select {
			case <-f.Ok():
				acked.Add(1)
				lastAck.Store(time.Now().UnixNano())
			case <-f.Err():
				failed.Add(1)
			case <-ctx.Done():
			}
		}()
		return nil
	}
	for i := 0; i < total && ctx.Err() == nil; {
		// Pace: event i is due at start + i/Rate.
		if d := time.Until(start.Add(time.Duration(float64(i) / cfg.Rate * float64(time.Second)))); d > 0 {
			time.Sleep(d)
		}
		w := p.cfg.Worker + 1 + uint64(i%cfg.Workers)
		b := block{worker: w, local: rand.Uint64()}
		if err := publish(w, p.stored(w, b.local), true); err != nil {
			return res, err
		}
		lastLocal = b.local
		live = append(live, b)
		i++
		if len(live) > cfg.Live && i < total {
			old := live[0]
			live = live[1:]
			if err := publish(old.worker, p.removed(old.worker, old.local), true); err != nil {
				return res, err
			}
			i++
		}
	}
	res.SendSeconds = time.Since(start).Seconds()
	wg.Wait()
	res.Acked, res.Failed = int(acked.Load()), int(failed.Load())
	end := time.Unix(0, lastAck.Load())
	if res.Acked > 0 {
		res.AckedPerSecond = float64(res.Acked) / end.Sub(start).Seconds()
	}
	// Drain: the last stored block answered by the indexer.
	dctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout*4)
	defer cancel()
	for {
		d, err := p.depth(dctx, lastLocal)
		if err == nil && d >= 1 {
			res.Drain = time.Since(end)
			break
		}
		select {
		case <-dctx.Done():
			return res, fmt.Errorf("%w: the load's last block, %s after its ack", ErrNotQueryable, time.Since(end).Round(time.Millisecond))
		case <-time.After(p.cfg.Poll):
		}
	}
	// Leave the DC as it was: remove what is still stored.
	for _, b := range live {
		if err := publish(b.worker, p.removed(b.worker, b.local), false); err != nil {
			return res, err
		}
	}
	wg.Wait()
	return res, nil
}
