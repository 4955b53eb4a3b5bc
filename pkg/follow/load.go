package follow

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// The load plane, indexer side (docs/protocol.md §6). Each lane keeps the
// last load it received, as two parts that may come from separate streams
// (a NATS window carries both; a kvrelay source has one stream for KV
// occupancy and one for serving load). A part belongs to the lane's
// installed epoch: a window of another pool, another identity, an older or
// a newer epoch than the installed one is dropped and counted, as the lane
// drops such traffic. Freshness is the local receive time; a part older
// than Config.LoadMaxAge is dropped (and counted) when it is read. Missing,
// incomplete or dropped load is reported as missing, never as zero load.

// DefaultLoadMaxAge is the default Config.LoadMaxAge: five windows of the
// relays' default 1 s load interval, as a lane is stale after five missed
// heartbeats.
const DefaultLoadMaxAge = 5 * time.Second

// Load metric names.
const (
	// MetricLoadWindows counts load windows by source (nats, kvrelay_kv,
	// kvrelay_serving) and outcome {lane, dc, source, outcome}: accepted,
	// malformed, foreign_pool, identity_mismatch, superseded, newer_epoch,
	// not_installed, out_of_order (NATS); accepted, incomplete (kvrelay,
	// after the follower's checks).
	MetricLoadWindows = "ckf_indexer_load_windows_total"
	// MetricLoadExpired counts load parts dropped for passing
	// --load-max-age {lane, dc, part=kv|serving}.
	MetricLoadExpired = "ckf_indexer_load_expired_total"
	// MetricLoadUnmatched counts NATS load windows whose subject names no
	// NATS lane of the domain {reason=subject|unknown_dc}.
	MetricLoadUnmatched = "ckf_indexer_load_unmatched_total"
)

type loadMetrics struct {
	windows   *prometheus.CounterVec
	expired   *prometheus.CounterVec
	unmatched *prometheus.CounterVec
}

func newLoadMetrics(reg prometheus.Registerer) (*loadMetrics, error) {
	m := &loadMetrics{
		windows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricLoadWindows,
			Help: "Load windows received by source and outcome (only accepted ones are used)."}, []string{"lane", "dc", "source", "outcome"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricLoadExpired,
			Help: "Load parts dropped for being older than --load-max-age (by local receive time)."}, []string{"lane", "dc", "part"}),
		unmatched: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricLoadUnmatched,
			Help: "NATS load windows on a subject naming no NATS lane of the domain."}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.windows, m.expired, m.unmatched} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// removeLane deletes the lane's load series.
func (m *loadMetrics) removeLane(lane int, dc string) {
	for _, v := range []*prometheus.CounterVec{m.windows, m.expired} {
		v.DeletePartialMatch(prometheus.Labels{"lane": strconv.Itoa(lane), "dc": dc})
	}
}

// Load sources (the source label).
const (
	loadSourceNATS           = "nats"
	loadSourceKvRelayKV      = "kvrelay_kv"
	loadSourceKvRelayServing = "kvrelay_serving"
)

// laneOwner is the installed (identity, epoch) of a lane, published for the
// load plane's fence (the runner's cur is its goroutine's alone).
type laneOwner struct {
	identity ckf.ProducerIdentity
	epoch    uint64
}

// loadPart is one part of a lane's load: what its flags say is known.
type loadPart struct {
	epoch   uint64 // the lane's installed epoch it was accepted under
	seq     uint64 // the window sequence of its stream
	at      time.Time
	flags   wire.LoadFlags
	kvUsed  uint64
	kvCap   uint64
	serving wire.ServingLoad
	// workers is how many workers the part covers (0: unknown).
	workers uint64
}

// laneLoad is a lane's last load: KV occupancy and serving load.
type laneLoad struct {
	kv, serving atomic.Pointer[loadPart]
}

// Load is a lane's usable load at one instant: each part only when it is
// known, belongs to the installed epoch and is fresh.
type Load struct {
	Flags        wire.LoadFlags
	KVUsedBlocks uint64
	KVCapacity   uint64
	Serving      wire.ServingLoad
	// Workers is how many workers the DC's load covers: those its serving
	// load sums, else those its KV occupancy covers (0: unknown). A route
	// drains the DC's queue at Workers × one worker's prefill rate.
	Workers uint64
	// KVAge and ServingAge are the parts' ages by local receive time.
	KVAge, ServingAge time.Duration
}

// setOwner publishes the lane's installed (identity, epoch).
func (r *laneRunner) setOwner(id ckf.ProducerIdentity, epoch uint64) {
	o := &laneOwner{identity: id, epoch: epoch}
	r.owner.Store(o)
	r.svc.owners[r.lane].Store(o)
}

// loadOutcome judges a window's (identity, epoch) against the lane's
// installed one.
func loadOutcome(o *laneOwner, pool ckf.PoolID, id *ckf.ProducerIdentity, epoch uint64) string {
	switch {
	case id.Pool != pool:
		return malformedForeignPool
	case o == nil:
		return "not_installed"
	case epoch < o.epoch:
		return "superseded"
	case epoch > o.epoch:
		return faultNewerEpoch
	case *id != o.identity:
		return malformedIdentity
	}
	return "accepted"
}

// storePart stores p into slot unless slot holds a later window of the same
// epoch; it reports whether it did.
func storePart(slot *atomic.Pointer[loadPart], p *loadPart) bool {
	for {
		cur := slot.Load()
		if cur != nil && cur.epoch == p.epoch && cur.seq >= p.seq {
			return false
		}
		if slot.CompareAndSwap(cur, p) {
			return true
		}
	}
}

// subscribeLoad subscribes to the domain's NATS load windows.
func (s *Service) subscribeLoad() (*nats.Subscription, error) {
	filter, err := wire.PoolLoadFilter(s.cfg.Domain)
	if err != nil {
		return nil, err
	}
	return s.nc.Subscribe(filter, s.onPoolLoad)
}

// natsRunner returns the NATS lane runner of dc.
func (s *Service) natsRunner(dc string) *laneRunner {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.runners {
		if r != nil && r.kv == nil && r.dc == dc {
			return r
		}
	}
	return nil
}

// onPoolLoad receives one NATS load window.
func (s *Service) onPoolLoad(m *nats.Msg) {
	dc, err := wire.ParsePoolLoadSubject(m.Subject, s.cfg.Domain)
	if err != nil {
		s.lm.unmatched.WithLabelValues("subject").Inc()
		return
	}
	r := s.natsRunner(dc)
	if r == nil {
		s.lm.unmatched.WithLabelValues("unknown_dc").Inc()
		return
	}
	count := func(outcome string) {
		s.lm.windows.WithLabelValues(strconv.Itoa(r.lane), r.dc, loadSourceNATS, outcome).Inc()
	}
	var p wire.PoolLoad
	if err := wire.DecodePoolLoadInto(m.Data, &p); err != nil {
		count("malformed")
		r.log.Debug().Err(err).Msg("malformed load window; skipped")
		return
	}
	if out := loadOutcome(r.owner.Load(), r.pool, &p.Identity, p.Lease.Epoch); out != "accepted" {
		count(out)
		return
	}
	at := s.now()
	kv := &loadPart{epoch: p.Lease.Epoch, seq: p.WindowSequence, at: at, flags: p.Flags & wire.LoadKV,
		kvUsed: p.KVUsedBlocks, kvCap: p.KVCapacityBlocks, workers: p.KVWorkers}
	serving := &loadPart{epoch: p.Lease.Epoch, seq: p.WindowSequence, at: at, flags: p.Flags & (wire.LoadServing | wire.LoadPrefillEstimated), serving: p.Serving,
		workers: p.ServingWorkers}
	if !storePart(&s.loads[r.lane].kv, kv) {
		count("out_of_order")
		return
	}
	storePart(&s.loads[r.lane].serving, serving)
	s.coverInflight(r.lane, windowObserved(&p, at, s.cfg.LoadMaxAge), p.Flags.Has(wire.LoadPrefillEstimated))
	count("accepted")
}

// LaneLoad returns lane's usable load at now: parts of another epoch than
// the installed one are ignored, parts older than LoadMaxAge are dropped
// and counted.
func (s *Service) LaneLoad(lane int, now time.Time) Load {
	if lane < 0 || lane >= ckf.LaneCount {
		return Load{}
	}
	return s.laneLoad(lane, now)
}

// laneLoad is LaneLoad without locks (the query path).
func (s *Service) laneLoad(lane int, now time.Time) Load {
	var l Load
	o := s.owners[lane].Load()
	if o == nil {
		return l
	}
	if p := s.usablePart(lane, &s.loads[lane].kv, o.epoch, now, "kv"); p != nil && p.flags.Has(wire.LoadKV) {
		l.Flags |= wire.LoadKV
		l.KVUsedBlocks, l.KVCapacity, l.KVAge = p.kvUsed, p.kvCap, now.Sub(p.at)
		l.Workers = p.workers
	}
	if p := s.usablePart(lane, &s.loads[lane].serving, o.epoch, now, "serving"); p != nil && p.flags&wire.LoadServing != 0 {
		l.Flags |= p.flags & (wire.LoadServing | wire.LoadPrefillEstimated)
		l.Serving, l.ServingAge = p.serving, now.Sub(p.at)
		if p.workers > 0 {
			l.Workers = p.workers
		}
	}
	return l
}

// usablePart returns slot's part if it belongs to epoch and is fresh; an
// expired part is removed and counted once.
func (s *Service) usablePart(lane int, slot *atomic.Pointer[loadPart], epoch uint64, now time.Time, part string) *loadPart {
	p := slot.Load()
	if p == nil || p.epoch != epoch {
		return nil
	}
	if now.Sub(p.at) > s.cfg.LoadMaxAge {
		if slot.CompareAndSwap(p, nil) {
			s.lm.expired.WithLabelValues(strconv.Itoa(lane), s.labels.Load()[lane].dc, part).Inc()
		}
		return nil
	}
	return p
}

// KvPoolLoad is the kvrelay lane's client.LoadSink: the follower has
// applied §6.3's consumer rules, and an incomplete window is stored as
// unknown occupancy (the neutral fallback), never as zero.
func (k *kvLane) KvPoolLoad(key kvrelay.ProducerKey, seq uint64, l client.KvLoad) {
	r := k.r
	p := &loadPart{epoch: key.ProducerIncarnation, seq: seq, at: r.svc.now()}
	outcome := "incomplete"
	if l.Complete {
		p.flags, p.kvUsed, p.kvCap, p.workers, outcome = wire.LoadKV, l.UsedBlocks, l.TotalBlocks, l.Ranks, "accepted"
	}
	// The follower orders one stream's windows; a reopened stream starts
	// from the relay's current window, so the last one received wins.
	r.svc.loads[r.lane].kv.Store(p)
	if l.Complete {
		r.svc.coverInflight(r.lane, p.at, false)
	}
	r.svc.lm.windows.WithLabelValues(strconv.Itoa(r.lane), r.dc, loadSourceKvRelayKV, outcome).Inc()
}

// ServingLoad is KvPoolLoad for §6.4's pool view.
func (k *kvLane) ServingLoad(key kvrelay.ProducerKey, seq uint64, l client.ServingLoad) {
	r := k.r
	p := &loadPart{epoch: key.ProducerIncarnation, seq: seq, at: r.svc.now()}
	outcome := "incomplete"
	if l.Complete {
		p.flags, outcome = wire.LoadPrefill|wire.LoadDecode, "accepted"
		p.serving = wire.ServingLoad{ActivePrefillTokens: l.ActivePrefillTokens, ActiveDecodeBlocks: l.ActiveDecodeBlocks}
		p.workers = l.Workers
	}
	r.svc.loads[r.lane].serving.Store(p)
	if l.Complete {
		r.svc.coverInflight(r.lane, p.at, false)
	}
	r.svc.lm.windows.WithLabelValues(strconv.Itoa(r.lane), r.dc, loadSourceKvRelayServing, outcome).Inc()
}

var _ client.LoadSink = (*kvLane)(nil)
