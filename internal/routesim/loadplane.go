package routesim

import (
	"fmt"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/inflight"
	"github.com/ckfrelay/ckfrelay/pkg/prefillest"
	"github.com/ckfrelay/ckfrelay/pkg/route"
)

// Signal is what the DCs' engines tell the load plane.
type Signal string

// The signals.
const (
	// SignalPrefill: a Dynamo serving-load source, the prompt tokens still
	// to prefill and the blocks in decode, with the request counts.
	SignalPrefill Signal = "prefill"
	// SignalCounts: what vLLM's and SGLang's /metrics give, running and
	// waiting requests and the prompt-token counters of finished requests,
	// the pending prefill estimated from them (pkg/prefillest).
	SignalCounts Signal = "counts"
)

// ParseSignal reads a signal name.
func ParseSignal(s string) (Signal, error) {
	switch Signal(s) {
	case SignalPrefill, SignalCounts:
		return Signal(s), nil
	}
	return "", fmt.Errorf("routesim: unknown signal %q (want prefill or counts)", s)
}

// workerScrape is one engine scrape of a worker, as the engine bridge
// reports it to its relay.
type workerScrape struct {
	seen             bool
	at               int64 // µs
	running, waiting uint64
	prefill, decode  uint64
}

// loadWindow is one relay load window on its way to, or at, the router.
type loadWindow struct {
	// lag is how much older than the window its oldest scrape is (the
	// wire's window time less its serving time); arrive when the router
	// receives it.
	lag, arrive int64
	report      route.LoadReport
}

// loadPlane is the product's load plane as the router sees it: each DC's
// engine bridge scrapes every worker every ScrapeInterval; the relay sums
// the latest scrapes into a load window every WindowInterval (KV occupancy
// from its exact state), which reaches the router half an RTT later; the
// indexer keeps the last window and drops it after --load-max-age by
// receive time. The router adds its in-flight account (pkg/inflight) to
// each lane's load and charges the lane it chose; a window covers what the
// DC can have counted when its oldest scrape was taken. The scrape and
// window clocks of each DC start at a phase drawn from the seed.
type loadPlane struct {
	f       *fleet
	scraped [][]workerScrape
	est     [][]prefillest.Estimator
	transit [][]loadWindow
	last    []loadWindow
	// lastArrival is when the router last received a window of each DC.
	lastArrival []int64
	maxAge      int64
	ledger      *inflight.Ledger
	pending     []uint64
}

func (p *loadPlane) init(f *fleet) error {
	k := len(f.cfg.DCs)
	p.f = f
	p.scraped = make([][]workerScrape, k)
	p.est = make([][]prefillest.Estimator, k)
	for d := range k {
		p.scraped[d] = make([]workerScrape, f.cfg.WorkersPerDC)
		p.est[d] = make([]prefillest.Estimator, f.cfg.WorkersPerDC)
	}
	p.transit = make([][]loadWindow, k)
	p.last = make([]loadWindow, k)
	p.lastArrival = make([]int64, k)
	p.pending = make([]uint64, k)
	p.maxAge = f.settings.LoadMaxAge.Microseconds()
	if f.settings.Route.Inflight.Off {
		return nil
	}
	var err error
	p.ledger, err = inflight.New(inflight.Config{Lanes: k, MaxAge: f.settings.LoadMaxAge, MaxEntries: f.settings.Route.Inflight.MaxEntries})
	return err
}

// start schedules DC d's first scrape and window at their phases.
func (p *loadPlane) start(d int) {
	f := p.f
	s, w := f.cfg.ScrapeInterval.Microseconds(), f.cfg.WindowInterval.Microseconds()
	h := mix(f.cfg.Seed ^ uint64(d+1)*0x2545f4914f6cdd1d)
	f.schedule(int64(h%uint64(s)), evScrape, d, 0)
	f.schedule(int64((h>>32)%uint64(w)), evWindow, d, 0)
}

// simTime is a simulated instant as the ledger's clock.
func simTime(us int64) time.Time { return time.Unix(0, us*1000) }

// scrape is DC d's engine bridge reading every worker's /metrics.
func (p *loadPlane) scrape(d int) {
	f := p.f
	for i, w := range f.workers[d] {
		s := &p.scraped[d][i]
		s.seen, s.at = true, f.now
		s.running, s.waiting = uint64(len(w.running)), uint64(len(w.waiting))
		switch f.cfg.Signal {
		case SignalCounts:
			s.prefill = p.est[d][i].Observe(s.waiting, prefillest.Counters{PromptTokens: float64(w.donePrompt), Requests: float64(w.doneRequests)}, true)
			s.decode = 0
		default:
			s.prefill, s.decode = uint64(w.pendingPrefill()), uint64(w.decodeBlocks())
		}
	}
}

// window is DC d's relay publishing a load window: serving load only when
// every worker has been scraped.
func (p *loadPlane) window(d int) {
	f := p.f
	var l route.LoadReport
	l.HasKV = true
	for _, w := range f.workers[d] {
		l.KVUsedBlocks += uint64(w.allocated + w.free)
		l.KVCapacityBlocks += uint64(w.capacity)
	}
	oldest, complete := f.now, true
	for _, s := range p.scraped[d] {
		if !s.seen {
			complete = false
			break
		}
		oldest = min(oldest, s.at)
		l.Running += s.running
		l.Waiting += s.waiting
		l.ActivePrefillTokens += s.prefill
		l.ActiveDecodeBlocks += s.decode
	}
	if complete {
		l.Workers = uint64(len(p.scraped[d]))
		l.HasRequests, l.HasPrefill = true, true
		l.HasDecode = f.cfg.Signal != SignalCounts
		l.PrefillEstimated = f.cfg.Signal == SignalCounts
	} else {
		l.Running, l.Waiting, l.ActivePrefillTokens, l.ActiveDecodeBlocks = 0, 0, 0, 0
	}
	p.transit[d] = append(p.transit[d], loadWindow{lag: f.now - oldest, arrive: f.now + f.halfRTT[d], report: l})
}

// deliver hands the router the windows that reached it. Each covers the
// in-flight entries due by its receive time less its scrape lag (capped at
// --load-max-age), as the indexer's windowObserved reads a window.
func (p *loadPlane) deliver() {
	now := p.f.now
	for d, q := range p.transit {
		n := 0
		for n < len(q) && q[n].arrive <= now {
			p.last[d] = q[n]
			p.lastArrival[d] = q[n].arrive
			if p.ledger != nil {
				observed := simTime(q[n].arrive - min(q[n].lag, p.maxAge))
				if q[n].report.PrefillEstimated {
					p.ledger.CoverPrefilling(d, observed, p.f.settings.Route.InflightDrainRate(p.f.cfg.DCs[d].Name))
				} else {
					p.ledger.Cover(d, observed)
				}
			}
			n++
		}
		if n > 0 {
			p.transit[d] = append(q[:0], q[n:]...)
		}
	}
	if p.ledger != nil {
		p.ledger.PendingInto(simTime(now), p.pending)
	}
}

// candidateLoad sets c's load as the indexer reads it (the last window, if
// younger than --load-max-age, by receive time), plus the lane's in-flight
// tokens.
func (p *loadPlane) candidateLoad(d int, c *route.Candidate, waitingTokens float64) {
	w := &p.last[d]
	if !w.report.Known() {
		return
	}
	age := p.f.now - w.arrive
	if age > p.maxAge {
		return
	}
	c.Load = w.report
	c.Load.Age = time.Duration(age) * time.Microsecond
	inflight.Apply(c, p.pending[d], waitingTokens, p.f.cfg.BlockSize)
}

// routed charges the decision to the ledger.
func (p *loadPlane) routed(dec *route.Decision, inputTokens int) {
	if p.ledger != nil {
		p.ledger.Record(dec, inputTokens, simTime(p.f.now))
	}
}
