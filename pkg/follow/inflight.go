package follow

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/inflight"
	"github.com/ckfrelay/ckfrelay/pkg/route"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// The in-flight account of routes (package inflight): a route counts the
// prompt tokens it sends to a DC against that DC's lane until a load window
// of the lane, observed after the request can have arrived there (route
// time + the RTT the route used), covers it. What a route sees as a lane's
// load is its last window plus the lane's uncovered tokens. Each account
// goes out on ckfload.<domain>.<dc>.inflight, and the accounts of the other
// routers of the domain (indexer replicas of one queue group, in-process
// mirrors) come in there, so N routers do not all pick the same DC between
// two windows. A route asked with probe counts nothing.

// InflightConfig configures the in-flight account.
type InflightConfig struct {
	// Off turns the account off: a route sees the last load window only,
	// and the service neither publishes nor applies accounts.
	Off bool
	// MaxEntries bounds each lane's entries (0: inflight.DefaultMaxEntries);
	// a route past it drops the lane's oldest entry. Entries live at most
	// Config.LoadMaxAge.
	MaxEntries int
	// PrefillSlowdown applies to lanes whose windows estimate their
	// prefill from request counts (wire.LoadPrefillEstimated: vLLM's and
	// SGLang's /metrics), which cannot show the prompts being prefilled: a
	// covered entry stays in the account while its prompt is prefilled, at
	// one worker's prefill rate ÷ PrefillSlowdown (the worker is shared
	// with decodes and other prefills). 0 takes
	// DefaultInflightPrefillSlowdown; from 1 to MaxInflightPrefillSlowdown.
	PrefillSlowdown float64
}

// Bounds of InflightConfig.PrefillSlowdown.
const (
	// DefaultInflightPrefillSlowdown: a prompt drains at one worker's
	// prefill rate. The routing benchmark's conversation trace chose it
	// among 1 to 3 (docs/benchmarks.md).
	DefaultInflightPrefillSlowdown = 1.0
	MaxInflightPrefillSlowdown     = 100.0
)

func (c InflightConfig) validate() error {
	if c.MaxEntries < 0 || c.MaxEntries > inflight.MaxEntriesLimit {
		return configError("route.inflight.max_entries", "%d: want 0..%d", c.MaxEntries, inflight.MaxEntriesLimit)
	}
	if c.PrefillSlowdown != 0 && !(c.PrefillSlowdown >= 1 && c.PrefillSlowdown <= MaxInflightPrefillSlowdown) {
		return configError("route.inflight.prefill_slowdown", "%v: want 1..%v (0: %v)", c.PrefillSlowdown, MaxInflightPrefillSlowdown, DefaultInflightPrefillSlowdown)
	}
	return nil
}

// InflightDrainRate is how fast, in tokens/s, an in-flight entry of DC dc
// drains while its prompt is prefilled, when the DC's windows estimate
// their prefill from request counts: the DC's prefill rate of one worker
// ÷ Inflight.PrefillSlowdown (each with its default).
func (c RouteConfig) InflightDrainRate(dc string) float64 {
	rate := c.PrefillRate[dc]
	if !(rate > 0) {
		rate = c.Policy.DefaultPrefillTokensPerSec
	}
	if !(rate > 0) {
		rate = route.DefaultConfig().DefaultPrefillTokensPerSec
	}
	slow := c.Inflight.PrefillSlowdown
	if slow == 0 {
		slow = DefaultInflightPrefillSlowdown
	}
	return rate / slow
}

// In-flight metric names.
const (
	// MetricInflightPending is each lane's uncovered routed prompt tokens
	// {lane, dc}.
	MetricInflightPending = "ckf_indexer_inflight_pending_tokens"
	// MetricInflightEntries is the number of entries held {state}: pending
	// (waiting for a window) or prefilling (covered by a window that
	// estimates its prefill from request counts, still draining).
	MetricInflightEntries = "ckf_indexer_inflight_entries"
	// MetricInflightEvents counts entries by what became of them {outcome}:
	// added, covered (a window showed them), expired (no window within
	// --load-max-age), dropped (past the lane's maximum entries), drained
	// (a prefilling entry left).
	MetricInflightEvents = "ckf_indexer_inflight_entries_total"
	// MetricInflightAccounts counts route accounts {direction, outcome}:
	// published ok|error; received applied|own|malformed|subject|unknown_dc.
	MetricInflightAccounts = "ckf_indexer_inflight_accounts_total"
)

// inflightCollector reads the ledger at scrape time.
type inflightCollector struct {
	s *Service
	// l is the service's ledger, held here because the collector is
	// registered (and may be scraped through a shared registry) before
	// New assigns s.ledger.
	l                       *inflight.Ledger
	pending, entries, total *prometheus.Desc
}

func (c *inflightCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.entries
	ch <- c.total
}

func (c *inflightCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.l
	var pending [ckf.LaneCount]uint64
	l.PendingInto(c.s.now(), pending[:])
	// Only the lanes that run: a lane's series go away with it (and all of
	// them with the service).
	var live [ckf.LaneCount]bool
	c.s.mu.Lock()
	for lane, r := range c.s.runners {
		live[lane] = r != nil && !c.s.closing
	}
	c.s.mu.Unlock()
	labels := c.s.labels.Load()
	for lane, lbl := range labels {
		if lbl.dc != "" && live[lane] {
			ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending[lane]), strconv.Itoa(lane), lbl.dc)
		}
	}
	st := l.Stats()
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(st.Entries), "pending")
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(st.Prefilling), "prefilling")
	for _, o := range []struct {
		name string
		v    uint64
	}{{"added", st.Added}, {"covered", st.Covered}, {"expired", st.Expired}, {"dropped", st.Dropped}, {"drained", st.Drained}} {
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.CounterValue, float64(o.v), o.name)
	}
}

// maxOutbox bounds the accounts waiting to be published.
const maxOutbox = 4096

// outAccount is one account waiting to be published.
type outAccount struct {
	dc     string
	tokens uint64
	rtt    time.Duration
}

// inflightState is the service's account: nil when InflightConfig.Off.
type inflightState struct {
	accounts *prometheus.CounterVec
	// The accounts' series, resolved once (the route path takes no label
	// lookup).
	publishedOK, publishedErr                 prometheus.Counter
	applied, own, malformed, subject, unknown prometheus.Counter
	publishedDropped                          prometheus.Counter

	// Accounts to publish: a route appends one (under mu) and kicks the
	// publisher (publishAccounts), which sends them off the route's path.
	// At most maxOutbox wait; past that a route's account is not shared
	// (counted as published/dropped), its own ledger entry stays.
	mu     sync.Mutex
	outbox []outAccount
	kick   chan struct{}
}

// newInflight builds the ledger and registers its metrics; it returns nil,
// nil when the account is off.
func newInflight(s *Service, reg prometheus.Registerer) (*inflight.Ledger, *inflightState, error) {
	c := s.cfg.Route.Inflight
	if c.Off {
		return nil, nil, nil
	}
	l, err := inflight.New(inflight.Config{Lanes: ckf.LaneCount, MaxEntries: c.MaxEntries, MaxAge: s.cfg.LoadMaxAge})
	if err != nil {
		return nil, nil, err
	}
	st := &inflightState{accounts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricInflightAccounts,
		Help: "Route accounts published and received, by outcome."}, []string{"direction", "outcome"})}
	st.outbox, st.kick = make([]outAccount, 0, 64), make(chan struct{}, 1)
	st.publishedOK, st.publishedErr = st.accounts.WithLabelValues("published", "ok"), st.accounts.WithLabelValues("published", "error")
	recv := func(o string) prometheus.Counter { return st.accounts.WithLabelValues("received", o) }
	st.applied, st.own, st.malformed, st.subject, st.unknown = recv("applied"), recv("own"), recv("malformed"), recv("subject"), recv("unknown_dc")
	st.publishedDropped = st.accounts.WithLabelValues("published", "dropped")
	col := &inflightCollector{s: s, l: l,
		pending: prometheus.NewDesc(MetricInflightPending, "Routed prompt tokens no load window of the lane has covered yet, plus those still prefilling where the lane's windows estimate their prefill.", []string{"lane", "dc"}, nil),
		entries: prometheus.NewDesc(MetricInflightEntries, "In-flight entries held over every lane, by state.", []string{"state"}, nil),
		total:   prometheus.NewDesc(MetricInflightEvents, "In-flight entries by what became of them.", []string{"outcome"}, nil),
	}
	for _, c := range []prometheus.Collector{st.accounts, col} {
		if err := reg.Register(c); err != nil {
			return nil, nil, err
		}
	}
	return l, st, nil
}

// account records a route's tokens against lane at now and queues the
// account for the domain's other routers.
func (s *Service) account(lane int, dc string, tokens uint64, rtt time.Duration, now time.Time) {
	if !s.ledger.Add(lane, tokens, now, rtt) {
		return
	}
	st := s.inflight
	st.mu.Lock()
	full := len(st.outbox) >= maxOutbox
	if !full {
		st.outbox = append(st.outbox, outAccount{dc: dc, tokens: tokens, rtt: rtt})
	}
	st.mu.Unlock()
	if full {
		st.publishedDropped.Inc()
		return
	}
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// accountPause is the publisher's rest after each batch: routes arriving
// meanwhile queue behind one kick, so a busy router wakes the publisher at
// most once a pause, not once a route (a wake-up costs the route more than
// its account).
const accountPause = time.Millisecond

// publishAccounts sends the queued accounts on
// ckfload.<domain>.<dc>.inflight until ctx ends.
func (s *Service) publishAccounts(ctx context.Context) {
	st := s.inflight
	var (
		batch []outAccount
		buf   []byte
	)
	subjects := map[string]string{}
	pause := time.NewTimer(accountPause)
	defer pause.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-st.kick:
		}
		st.mu.Lock()
		batch, st.outbox = st.outbox, batch[:0]
		st.mu.Unlock()
		for _, o := range batch {
			subj, ok := subjects[o.dc]
			if !ok {
				var err error
				if subj, err = wire.RouteAccountSubject(s.cfg.Domain, o.dc); err != nil {
					st.publishedErr.Inc()
					continue
				}
				subjects[o.dc] = subj
			}
			a := wire.RouteAccount{Origin: uint64(s.instance), Tokens: min(o.tokens, wire.MaxAccountTokens), RTT: min(o.rtt, wire.MaxAccountRTT)}
			b, err := wire.AppendRouteAccount(buf[:0], &a)
			buf = b
			if err == nil {
				err = s.nc.Publish(subj, b)
			}
			if err != nil {
				st.publishedErr.Inc()
				continue
			}
			st.publishedOK.Inc()
		}
		pause.Reset(accountPause)
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
	}
}

// subscribeAccounts subscribes to the domain's route accounts (nil when
// the account is off).
func (s *Service) subscribeAccounts() (*nats.Subscription, error) {
	if s.ledger == nil {
		return nil, nil
	}
	filter, err := wire.RouteAccountFilter(s.cfg.Domain)
	if err != nil {
		return nil, err
	}
	return s.nc.Subscribe(filter, s.onRouteAccount)
}

// onRouteAccount applies another router's account, due its RTT after it
// is received here.
func (s *Service) onRouteAccount(m *nats.Msg) {
	st := s.inflight
	dc, err := wire.ParseRouteAccountSubject(m.Subject, s.cfg.Domain)
	if err != nil {
		st.subject.Inc()
		return
	}
	a, err := wire.DecodeRouteAccount(m.Data)
	if err != nil {
		st.malformed.Inc()
		s.log.Debug().Err(err).Str("dc", dc).Msg("malformed route account; skipped")
		return
	}
	if a.Origin == uint64(s.instance) {
		st.own.Inc()
		return
	}
	lane := -1
	for i, lbl := range s.labels.Load() {
		if lbl.dc == dc {
			lane = i
			break
		}
	}
	if lane < 0 || !s.ledger.Add(lane, a.Tokens, s.now(), a.RTT) {
		st.unknown.Inc()
		return
	}
	st.applied.Inc()
}

// coverInflight tells the ledger that a load window of lane was observed
// at the DC at observed (on this process's clock); estimated says the
// window's prefill is an estimate from request counts, so what it covers
// stays in the account while it is prefilled.
func (s *Service) coverInflight(lane int, observed time.Time, estimated bool) {
	if s.ledger == nil {
		return
	}
	if !estimated {
		s.ledger.Cover(lane, observed)
		return
	}
	dc := s.labels.Load()[lane&(ckf.LaneCount-1)].dc
	s.ledger.CoverPrefilling(lane, observed, s.cfg.Route.InflightDrainRate(dc))
}

// windowObserved is when a NATS window's serving load was read at the DC,
// on the local clock: its receive time less how much older its serving
// reports were than the window (bounded by the load age). KV occupancy is
// the relay's state when it built the window.
func windowObserved(p *wire.PoolLoad, at time.Time, maxAge time.Duration) time.Time {
	if p.Flags&wire.LoadServing == 0 || p.ServingTime.IsZero() {
		return at
	}
	lag := min(max(p.Time.Sub(p.ServingTime), 0), maxAge)
	return at.Add(-lag)
}
