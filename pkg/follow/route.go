package follow

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/inflight"
	"github.com/ckfrelay/ckfrelay/pkg/route"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Routing (POST /v1/route, ckfq.<domain>.route): a match over every
// configured lane, each lane's load (load.go), and pkg/route's policy.

// DefaultRouteBlockSize is the default RouteConfig.BlockSize.
const DefaultRouteBlockSize = 16

// RouteConfig configures routes. The zero value routes by pkg/route's
// defaults: the cost policy, 10,000 prefill tokens/s, stale and unready
// lanes excluded, no temperature, RTT 0.
type RouteConfig struct {
	// Policy is the cost's parameters and the defaults of a request.
	// MaxLoadAge is not used: the indexer already drops load older than
	// Config.LoadMaxAge.
	Policy route.Config
	// PrefillRate is each DC's prefill speed in tokens/s by DC name (the
	// others take Policy.DefaultPrefillTokensPerSec).
	PrefillRate map[string]float64
	// BlockSize counts the tokens of a request given as hashes (a tokens
	// request carries its own); default DefaultRouteBlockSize.
	// DomainBlockSize overrides it per domain.
	BlockSize       int
	DomainBlockSize map[string]int
	// Inflight is the account of routed requests the load windows do not
	// show yet (inflight.go); on unless Off.
	Inflight InflightConfig
}

// blockSizeOf is the block size of domain's requests given as hashes.
func (c RouteConfig) blockSizeOf(domain string) int {
	if n, ok := c.DomainBlockSize[domain]; ok {
		return n
	}
	if c.BlockSize == 0 {
		return DefaultRouteBlockSize
	}
	return c.BlockSize
}

func (c RouteConfig) validate() error {
	if _, err := route.ParsePolicy(string(c.Policy.Policy)); err != nil {
		return configError("route.policy", "%v", err)
	}
	if c.BlockSize < 0 || c.BlockSize > api.MaxBlockSize {
		return configError("route.block_size", "%d: want 1..%d", c.BlockSize, api.MaxBlockSize)
	}
	for dc, n := range c.DomainBlockSize {
		if n < 1 || n > api.MaxBlockSize {
			return configError("route.domain_block_size", "%s: %d: want 1..%d", dc, n, api.MaxBlockSize)
		}
	}
	for dc, r := range c.PrefillRate {
		if !(r > 0) {
			return configError("route.prefill_rate", "%s: %v tokens/s, want a positive rate", dc, r)
		}
	}
	for dc, r := range c.Policy.QueueTokensPerSec {
		if !(r > 0) || math.IsInf(r, 0) {
			return configError("route.queue_rate", "%s: %v tokens/s, want a positive rate", dc, r)
		}
	}
	for dc, d := range c.Policy.RTT {
		if d < 0 {
			return configError("route.rtt", "%s: negative RTT %s", dc, d)
		}
	}
	if err := c.Inflight.validate(); err != nil {
		return err
	}
	if c.Policy.DefaultPrefillTokensPerSec < 0 || c.Policy.DefaultQueueTokensPerSec < 0 || c.Policy.Temperature < 0 || c.Policy.DefaultRTT < 0 {
		return configError("route", "negative rate, temperature or RTT")
	}
	return nil
}

// routing is the service's routers, one per stale mode (a request may ask
// for either), and the reusable decision buffers.
type routing struct {
	routers   [2]*route.Router // by route.StaleMode
	def       route.StaleMode
	blockSize int
	prefill   map[string]float64
	// waitingTokens is the routers' WaitingRequestTokens (inflight.Apply),
	// defaultPrefill their DefaultPrefillTokensPerSec.
	waitingTokens, defaultPrefill float64
	scratch                       sync.Pool // *routeScratch
	lanes                         laneChunks
}

// laneChunkLanes is the size of a laneChunks chunk: 64 answer lanes
// (about 15 KB), a few routes' worth at 16 lanes each.
const laneChunkLanes = 64

// laneChunks hands out the answers' lane slices from shared chunks, one
// allocation per chunk rather than one per route. Each slice is cut to its
// length and capacity, so an append to it cannot reach a neighbour's; a
// chunk lives as long as any answer cut from it.
type laneChunks struct{ pool sync.Pool } // *laneChunk

type laneChunk struct{ free []api.RouteLane }

// take returns n zeroed lanes.
func (p *laneChunks) take(n int) []api.RouteLane {
	if n > laneChunkLanes/4 {
		return make([]api.RouteLane, n)
	}
	c, _ := p.pool.Get().(*laneChunk)
	if c == nil {
		c = &laneChunk{}
	}
	if len(c.free) < n {
		c.free = make([]api.RouteLane, laneChunkLanes)
	}
	out := c.free[:n:n]
	c.free = c.free[n:]
	p.pool.Put(c)
	return out
}

// routeScratch is one route's working set, pooled so that a route neither
// allocates nor clears it: every entry a route reads it wrote first.
type routeScratch struct {
	dec            route.Decision
	cands          [ckf.LaneCount]route.Candidate
	pending        [ckf.LaneCount]uint64
	depth          [ckf.LaneCount]uint32
	ages, loadAges [ckf.LaneCount]int64
}

func newRouting(c RouteConfig, domain string) *routing {
	r := &routing{def: c.Policy.Stale, blockSize: c.blockSizeOf(domain), prefill: c.PrefillRate}
	for _, m := range []route.StaleMode{route.StaleExclude, route.StalePenalize} {
		pc := c.Policy
		pc.Stale, pc.MaxLoadAge = m, 0
		r.routers[m] = route.New(pc)
	}
	rc := r.routers[route.StaleExclude].Config()
	r.waitingTokens, r.defaultPrefill = rc.WaitingRequestTokens, rc.DefaultPrefillTokensPerSec
	r.scratch.New = func() any { return &routeScratch{dec: route.Decision{Ranked: make([]route.Scored, 0, ckf.LaneCount)}} }
	return r
}

// requestKey is route.KeyHash over the request's sequence hashes, chained
// from the local ones when that is what the request carries, so a prompt
// sent as local or as sequence hashes gets the same key on every transport
// and in the simulator (the cost policy's prefix affinity picks among
// equal-depth DCs by it).
func requestKey(q *api.Query) uint64 {
	k := route.NewKeyHash(q.Blocks())
	var seq ckf.SequenceHash
	for i, l := range q.Locals {
		if i == 0 {
			seq = ckf.SequenceHash(l)
		} else {
			seq = ckf.NextSequenceHash(seq, l)
		}
		k.Add(uint64(seq))
	}
	for _, s := range q.Seqs {
		k.Add(uint64(s))
	}
	return k.Sum()
}

// Route ranks every configured lane for q under o: the lanes ready when
// the query starts with their prefix depth, the others unready (depth 0),
// each with its freshness and load. It returns api.ErrUnavailable when no
// lane is eligible (none ready, or all excluded), and a *api.RequestError
// for an option the service cannot use.
func (s *Service) Route(q api.Query, o api.RouteOptions) (api.RouteResponse, error) {
	if err := s.checkDomain(q); err != nil {
		return api.RouteResponse{}, err
	}
	rt := s.routing
	pol := route.Policy("")
	if o.Policy != "" {
		p, err := route.ParsePolicy(o.Policy)
		if err != nil {
			return api.RouteResponse{}, &api.RequestError{Field: "policy", Reason: err.Error()}
		}
		pol = p
	}
	mode := rt.def
	if o.Stale != "" {
		m, err := route.ParseStaleMode(o.Stale)
		if err != nil {
			return api.RouteResponse{}, &api.RequestError{Field: "stale", Reason: err.Error()}
		}
		mode = m
	}
	labels := s.labels.Load()
	for dc := range o.RTTMs {
		if !namesDC(labels, dc) {
			return api.RouteResponse{}, &api.RequestError{Field: "rtt_ms", Reason: fmt.Sprintf("%q names no DC of the domain", dc)}
		}
	}
	bs := q.BlockSize
	if bs == 0 {
		bs = rt.blockSize
	}
	if o.InputTokens > 0 && o.InputTokens < q.Blocks()*bs {
		return api.RouteResponse{}, &api.RequestError{Field: "input_tokens",
			Reason: fmt.Sprintf("%d is fewer than the %d blocks × %d tokens sent", o.InputTokens, q.Blocks(), bs)}
	}
	var res consumer.QueryResult
	var key uint64
	if err := s.find(q, &res, "route", &key); err != nil {
		return api.RouteResponse{}, err
	}
	now := s.now()
	sc := rt.scratch.Get().(*routeScratch)
	defer rt.scratch.Put(sc)
	if s.ledger != nil {
		s.ledger.PendingInto(now, sc.pending[:])
	}
	// One pass over the configured lanes reads each lane's freshness and
	// load once; the candidates overwrite the pooled buffer whole, so it
	// needs no clearing.
	cands := sc.cands[:0]
	for lane := range ckf.LaneCount {
		lbl := labels[lane]
		if lbl.dc == "" {
			continue
		}
		age, stale := s.laneAge(lane, now)
		ready := res.CapturedReadyLanes&(1<<lane) != 0
		var depth uint32
		if m := &res.Lanes[lane]; m.Present {
			depth = m.Depth
		}
		sc.depth[lane] = depth
		l := s.laneLoad(lane, now)
		cands = append(cands, route.Candidate{Lane: lane, DC: lbl.dc, Pool: lbl.pool, Depth: int(depth), Ready: ready, Stale: stale,
			Load: loadReport(&l), PrefillTokensPerSec: rt.prefill[lbl.dc]})
		c := &cands[len(cands)-1]
		if s.ledger != nil {
			inflight.Apply(c, sc.pending[lane], rt.waitingTokens, bs)
		}
		sc.ages[lane], sc.loadAges[lane] = age, max(l.KVAge, l.ServingAge).Milliseconds()
		if ms, ok := o.RTTMs[lbl.dc]; ok {
			c.RTT, c.RTTKnown = time.Duration(ms*float64(time.Millisecond)), true
		}
	}
	req := route.Request{Blocks: q.Blocks(), BlockSize: bs, InputTokens: o.InputTokens, OutputTokens: o.OutputTokens,
		Policy: pol, Key: key}
	dec := &sc.dec
	rt.routers[mode].Route(req, cands, dec)
	if dec.Best < 0 {
		return api.RouteResponse{}, api.ErrUnavailable
	}
	input := o.InputTokens
	if input <= 0 {
		input = req.Blocks * bs
	}
	if s.ledger != nil && !o.Probe {
		if lane, tokens, rtt, ok := inflight.Charge(dec, input); ok {
			s.account(lane, labels[lane].dc, tokens, rtt, now)
		}
	}
	resp := api.RouteResponse{Policy: string(dec.Policy), ReadyLanes: res.CapturedReadyLanes, Blocks: req.Blocks, BlockSize: bs,
		InputTokens: input, Best: dec.Best, Ranked: rt.lanes.take(len(dec.Ranked))}
	for i := range dec.Ranked {
		sd := &dec.Ranked[i]
		rl := &resp.Ranked[i]
		// Field by field into the fresh (zeroed) slice: no temporary lane.
		rl.Lane, rl.DC, rl.Pool, rl.Ready = sd.Lane, sd.DC, sd.Pool, sd.Ready
		if sd.Ready {
			rl.Depth = sc.depth[sd.Lane]
		}
		rl.AgeMs, rl.Stale, rl.CachedTokens, rl.CostMs = sc.ages[sd.Lane], sd.Stale, sd.CachedTokens, ms(sd.Cost)
		rl.Terms = api.RouteTerms{RTTMs: ms(sd.Terms.RTT), QueueMs: ms(sd.Terms.Queue), PrefillMs: ms(sd.Terms.Prefill), PenaltyMs: ms(sd.Terms.Penalty)}
		rl.LoadMissing, rl.RTTUnknown, rl.Excluded, rl.Reason = sd.LoadMissing, sd.RTTUnknown, sd.Excluded, sd.Reason
		l, rload := &sd.Load, &rl.Load
		rload.HasKV, rload.KVUsedBlocks, rload.KVCapacityBlocks = l.HasKV, l.KVUsedBlocks, l.KVCapacityBlocks
		rload.HasRequests, rload.Running, rload.Waiting = l.HasRequests, l.Running, l.Waiting
		rload.HasPrefill, rload.ActivePrefillTokens, rload.PrefillEstimated = l.HasPrefill, l.ActivePrefillTokens, l.HasPrefill && l.PrefillEstimated
		rload.HasDecode, rload.ActiveDecodeBlocks = l.HasDecode, l.ActiveDecodeBlocks
		if rload.Known() {
			rload.AgeMs = sc.loadAges[sd.Lane]
		}
	}
	return resp, nil
}

// namesDC reports whether a configured lane belongs to DC dc.
func namesDC(labels *[ckf.LaneCount]laneLabel, dc string) bool {
	for i := range labels {
		if labels[i].dc == dc {
			return true
		}
	}
	return false
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loadReport is a lane's load as pkg/route reads it: a value only with its
// flag (unknown is never zero).
func loadReport(l *Load) route.LoadReport {
	r := route.LoadReport{Age: max(l.KVAge, l.ServingAge)}
	if l.Flags.Has(wire.LoadKV) {
		r.HasKV, r.KVUsedBlocks, r.KVCapacityBlocks = true, l.KVUsedBlocks, l.KVCapacity
	}
	if l.Flags.Has(wire.LoadRequests) {
		r.HasRequests, r.Running, r.Waiting = true, l.Serving.Running, l.Serving.Waiting
	}
	if l.Flags.Has(wire.LoadPrefill) {
		r.HasPrefill, r.ActivePrefillTokens = true, l.Serving.ActivePrefillTokens
		r.PrefillEstimated = l.Flags.Has(wire.LoadPrefillEstimated)
	}
	if l.Flags.Has(wire.LoadDecode) {
		r.HasDecode, r.ActiveDecodeBlocks = true, l.Serving.ActiveDecodeBlocks
	}
	// The workers the load covers: route.Router drains the DC's queue at
	// Workers × one worker's prefill rate unless a queue rate is configured.
	r.Workers = l.Workers
	return r
}
