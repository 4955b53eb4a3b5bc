package bench

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// ScaleConfig sizes the scale comparison: Dynamo's 16-DC shape by default.
type ScaleConfig struct {
	// Lanes is the number of DCs (default 16).
	Lanes int
	// Buckets is every lane's bucket count (a power of two; default 1<<22).
	// Each DC's producer state is sized for the largest expected block
	// count that gives this many buckets and filled to it: the format's
	// target load of 80% of the slots.
	Buckets uint64
	// WorkersPerDC spreads a DC's requests over this many workers (default 8).
	WorkersPerDC int
	// HotQueries and ColdQueries size the latency sets (defaults 64 and
	// 65,536 distinct trace requests); AccuracyQueries the accuracy sample
	// (default 100,000).
	HotQueries, ColdQueries, AccuracyQueries int
	// Samples is the number of timed queries per goroutine of a hot run
	// (default 20,000); a cold run times every cold query once.
	Samples int
	// BuildGoroutines build that many DC lanes at once (default 2; each
	// holds one producer state).
	BuildGoroutines int
	// Trace is the request trace (default: the shipped Mooncake trace).
	Trace []replay.Request
	// Seed picks the routing and the query samples.
	Seed uint64
	// Radix adds a third side: a radix tree (RadixIndex) over the same
	// requests as the exact map, timed and measured the same way, its
	// answers checked against the map's. It runs only if the producers
	// stored at most RadixMaxMemberships (block, DC) pairs (default
	// DefaultRadixMaxMemberships): the tree costs hundreds of bytes per
	// distinct block, far beyond this machine at the full shape.
	Radix               bool
	RadixMaxMemberships uint64
	// Progress, when set, is told what is about to run.
	Progress func(format string, args ...any)
}

func (c ScaleConfig) withDefaults() (ScaleConfig, error) {
	if c.Lanes == 0 {
		c.Lanes = ckf.LaneCount
	}
	if c.Buckets == 0 {
		c.Buckets = 1 << 22
	}
	if c.WorkersPerDC == 0 {
		c.WorkersPerDC = 8
	}
	if c.HotQueries == 0 {
		c.HotQueries = 64
	}
	if c.ColdQueries == 0 {
		c.ColdQueries = 65536
	}
	if c.AccuracyQueries == 0 {
		c.AccuracyQueries = 100000
	}
	if c.Samples == 0 {
		c.Samples = 20000
	}
	if c.BuildGoroutines == 0 {
		c.BuildGoroutines = 2
	}
	if c.RadixMaxMemberships == 0 {
		c.RadixMaxMemberships = DefaultRadixMaxMemberships
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	if c.Lanes < 1 || c.Lanes > ckf.LaneCount {
		return c, fmt.Errorf("bench: scale lanes %d outside 1..%d", c.Lanes, ckf.LaneCount)
	}
	if c.Buckets < 2 || c.Buckets&(c.Buckets-1) != 0 {
		return c, fmt.Errorf("bench: scale buckets %d is not a power of two ≥ 2", c.Buckets)
	}
	if c.WorkersPerDC < 1 || c.BuildGoroutines < 1 || c.HotQueries < 1 || c.ColdQueries < 1 || c.AccuracyQueries < 1 || c.Samples < 1 {
		return c, fmt.Errorf("bench: scale workers, query counts and samples must be positive")
	}
	if c.Trace == nil {
		tr, err := replay.LoadEmbedded()
		if err != nil {
			return c, err
		}
		c.Trace = tr
	}
	return c, nil
}

// DefaultRadixMaxMemberships caps the radix side: its RSS grew by 433 bytes
// per membership (5.8 GB for 13.4M) on the scaled trace (see the README),
// so 30M memberships need about 13 GB, inside a 24 GiB machine beside the
// CKF and the map; the full 16-DC shape (214M) would need about 93 GB.
const DefaultRadixMaxMemberships = 30_000_000

// ScaleSide is one index's figures. The first five names are stable.
type ScaleSide struct {
	HotP50Ns           float64 `json:"hot_p50_ns"`
	HotP99Ns           float64 `json:"hot_p99_ns"`
	ColdP50Ns          float64 `json:"cold_p50_ns"`
	ColdP99Ns          float64 `json:"cold_p99_ns"`
	BytesPerMembership float64 `json:"bytes_per_membership"`
	// The same percentiles with two goroutines querying at once (all
	// their samples pooled).
	HotP50Ns2G  float64 `json:"hot_p50_ns_2g"`
	HotP99Ns2G  float64 `json:"hot_p99_ns_2g"`
	ColdP50Ns2G float64 `json:"cold_p50_ns_2g"`
	ColdP99Ns2G float64 `json:"cold_p99_ns_2g"`
	// BuildSeconds is the goroutine time to ingest every DC's stored
	// events (both sides build on two goroutines: the CKF two DCs at once,
	// the exact index one map shard each), BuildWallSeconds the elapsed
	// time; IngestBlocksPerSec the stored blocks (re-offers included) per
	// goroutine-second.
	BuildSeconds       float64 `json:"build_seconds"`
	BuildWallSeconds   float64 `json:"build_wall_seconds"`
	IngestBlocksPerSec float64 `json:"ingest_blocks_per_sec"`
	// HeapBytes and RSSBytes are the measured growth of the Go heap and of
	// the process's resident set across the build (after GC and returning
	// freed memory to the OS on both sides); bytes_per_membership is
	// RSSBytes / memberships, HeapBytesPerMembership the heap's.
	HeapBytes              uint64  `json:"heap_bytes"`
	RSSBytes               uint64  `json:"rss_bytes"`
	HeapBytesPerMembership float64 `json:"heap_bytes_per_membership"`
}

// RadixSide is the radix tree's figures: the exact side's names, and its
// answers checked against the exact map's.
type RadixSide struct {
	ScaleSide
	// Prefixes is the number of keys the trees hold (one per distinct
	// block, so equal to unique_blocks); Memberships the (block, DC) pairs
	// the build added (equal to the exact map's memberships).
	Prefixes    uint64 `json:"prefixes"`
	Memberships uint64 `json:"memberships"`
	// CheckedQueries are the accuracy queries answered by both exact
	// indexes; Mismatches counts the (query, DC) answers where the tree's
	// depth differs from the map's (must be 0).
	CheckedQueries int `json:"checked_queries"`
	CheckedAnswers int `json:"checked_answers"`
	Mismatches     int `json:"mismatches"`
	// AllocsPerQuery is the heap allocations per query over the cold set
	// (after the scratch has grown).
	AllocsPerQuery float64 `json:"allocs_per_query"`
}

// ScaleAccuracy compares the CKF's per-DC depths with the exact ones.
// Counts are (query, DC) answers except WrongBest, which counts queries.
type ScaleAccuracy struct {
	Queries     int     `json:"queries"`
	Answers     int     `json:"answers"`
	Under       int     `json:"under"`
	Inflated    int     `json:"inflated"`
	InflatedPct float64 `json:"inflated_pct"`
	// WrongBest counts queries whose best DC by the CKF (deepest, lowest
	// lane on ties) is not among the exact index's deepest.
	WrongBest    int     `json:"wrong_best"`
	WrongBestPct float64 `json:"wrong_best_pct"`
	// InflatedFromZero counts the inflated answers whose exact depth is 0
	// (a false positive at the query's first block).
	InflatedFromZero int `json:"inflated_from_zero"`
	// ProbeFPPct is the measured false-positive rate of one probe: the share
	// of (random absent hash, lane) probes that hit, over ProbeFPProbes
	// probes. A false positive at the first missing position of a prefix
	// looks exactly like a hit, so no search over this format can inflate
	// fewer answers than ExpectedInflated: ProbeFPPct times the answers
	// whose exact depth is shorter than the query.
	ProbeFPPct       float64 `json:"probe_fp_pct"`
	ProbeFPProbes    int     `json:"probe_fp_probes"`
	ExpectedInflated float64 `json:"expected_inflated"`
	// shortAnswers counts the answers whose exact depth is below the
	// query's length: the ones a false positive can inflate.
	shortAnswers int
}

// ScaleReport is the outcome of RunScale.
type ScaleReport struct {
	Lanes   int    `json:"lanes"`
	Buckets uint64 `json:"buckets"`
	// Memberships is the number of (block, DC) pairs; UniqueBlocks the
	// number of distinct blocks over all DCs.
	Memberships  uint64 `json:"memberships"`
	UniqueBlocks uint64 `json:"unique_blocks"`
	// CkfMemberships is the producers' own count of (block, DC) pairs:
	// equal to Memberships unless the two sides saw different chains.
	CkfMemberships uint64 `json:"ckf_memberships"`
	// BlocksPerDC is the fill target: 80% of a lane's slots (the last
	// request of a DC may overshoot it by a few blocks).
	BlocksPerDC uint64        `json:"blocks_per_dc_target"`
	Requests    uint64        `json:"requests"`
	TraceCopies uint64        `json:"trace_copies"`
	CkfFailures uint64        `json:"ckf_capacity_failures"`
	CKF         ScaleSide     `json:"ckf"`
	Exact       ScaleSide     `json:"exact"`
	Accuracy    ScaleAccuracy `json:"accuracy"`
	HugePages   bool          `json:"ckf_hugepages"`
	// Radix is the radix tree's side when ScaleConfig.Radix asked for it
	// and the memberships were within its cap; RadixSkipped says why it
	// was asked for but not run.
	Radix        *RadixSide `json:"radix,omitempty"`
	RadixSkipped string     `json:"radix_skipped,omitempty"`
	// Latencies keeps the sorted samples behind the percentiles, keyed
	// "ckf hot", "exact cold 2g", ... (for plots; not in JSON).
	Latencies map[string]Latencies `json:"-"`
}

// laneBuild is what building one DC's lane did.
type laneBuild struct {
	requests       int
	stored, unique uint64
	failures       uint64
	elapsed        time.Duration
}

// buildScaleLane feeds DC dc's requests, in stream order, to a fresh
// canonical-mode producer state until it tracks target blocks, then
// installs the state's lane words as the lane's snapshot and drops the
// state.
func buildScaleLane(ts *traceStream, dc int, target uint64, ing *consumer.LaneIngestor, buckets uint64) (laneBuild, error) {
	var b laneBuild
	c := ckf.NewConfig(target)
	c.Mode = ckf.HashModeCanonical
	c.PublishEveryNEvents = 64
	st, err := producer.NewState(c)
	if err != nil {
		return b, err
	}
	var ev routerevent.RouterEvent
	ev.Event.Data.Kind = routerevent.EventStored
	var locals []ckf.LocalBlockHash
	var blocks []routerevent.StoredBlock
	t0 := time.Now()
	ts.forDC(dc, func(r uint64, i int, worker uint64) bool {
		locals = ts.locals(locals, r, i)
		blocks = blocks[:0]
		// The engine's block hash: any chain-unique value; the canonical
		// sequence hash mixed once stands in.
		var h ckf.SequenceHash
		for k, l := range locals {
			if k == 0 {
				h = ckf.SequenceHash(l)
			} else {
				h = ckf.NextSequenceHash(h, l)
			}
			blocks = append(blocks, routerevent.StoredBlock{BlockHash: mix64(uint64(h) ^ 0xb10c), TokensHash: uint64(l)})
		}
		ev.WorkerID = worker
		ev.Event.Data.Stored = routerevent.StoreData{Blocks: blocks}
		if out := st.ApplyEvent(&ev); out.FirstError != nil {
			b.failures++
		}
		b.stored += uint64(len(blocks))
		b.requests++
		return uint64(st.UniqueBlocks()) < target
	})
	st.Flush()
	b.elapsed = time.Since(t0)
	b.unique = uint64(st.UniqueBlocks())
	out := ing.InstallSnapshot(&ckf.Snapshot{Identity: scaleIdentity(dc, buckets), Lease: scaleLease(dc), Sequence: 1, Buckets: st.Words()})
	if out.Kind != consumer.OutcomeSnapshotInstalled {
		return b, fmt.Errorf("bench: scale: install DC %d: %v", dc, out)
	}
	return b, nil
}

// traceStream enumerates the scaled trace: copy r of request i gets fresh
// local hashes mix(r, id), a DC and a worker, both drawn from (seed, r, i).
type traceStream struct {
	trace   []replay.Request
	lanes   int
	workers int
	seed    uint64
}

func (t *traceStream) route(r uint64, i int) (dc int, worker uint64) {
	h := mix64(t.seed ^ r<<20 ^ uint64(i))
	return int(h % uint64(t.lanes)), (h >> 32) % uint64(t.workers)
}

// locals fills dst with request i's local block hashes in copy r.
func (t *traceStream) locals(dst []ckf.LocalBlockHash, r uint64, i int) []ckf.LocalBlockHash {
	dst = dst[:0]
	salt := mix64(r + 0x5eed)
	for _, id := range t.trace[i].HashIDs {
		dst = append(dst, ckf.LocalBlockHash(mix64(id^salt)))
	}
	return dst
}

// forDC calls f for DC dc's requests in stream order until f returns false.
func (t *traceStream) forDC(dc int, f func(r uint64, i int, worker uint64) bool) {
	for r := uint64(0); ; r++ {
		for i := range t.trace {
			if d, w := t.route(r, i); d == dc && !f(r, i, w) {
				return
			}
		}
	}
}

// scaleRequest names one (copy, request) of the scaled trace.
type scaleRequest struct {
	copy uint64
	idx  int
}

// RunScale builds Lanes DC lanes from producer states fed with the scaled
// Mooncake trace (one DC at a time, so only one state lives at once), an
// exact index over the same stored chains, and compares their query
// latency, build rate, memory and answers.
func RunScale(ctx context.Context, cfg ScaleConfig) (*ScaleReport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	expected := cfg.Buckets * 16 / 5 // the largest n whose BucketCount is Buckets
	if b, err := ckf.BucketCount(expected); err != nil || b != cfg.Buckets {
		return nil, fmt.Errorf("bench: scale: %d expected blocks give %d buckets, not %d (%v)", expected, b, cfg.Buckets, err)
	}
	ts := &traceStream{trace: cfg.Trace, lanes: cfg.Lanes, workers: cfg.WorkersPerDC, seed: cfg.Seed}
	rep := &ScaleReport{Lanes: cfg.Lanes, Buckets: cfg.Buckets, BlocksPerDC: expected, Latencies: map[string]Latencies{}}

	heap0, rss0 := residentMemory()
	ix, ings, err := newScaleIndexer(cfg.Lanes, cfg.Buckets)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, ing := range ings {
			ing.Release()
		}
	}()
	perDC, err := scaleCKFSide(ctx, cfg, ts, ix, ings, expected, rep)
	if err != nil {
		return nil, err
	}
	heap1, rss1 := residentMemory()
	rep.CKF.HeapBytes, rep.CKF.RSSBytes = sub0(heap1, heap0), sub0(rss1, rss0)
	mem := ix.TableMemory()
	rep.HugePages = mem.HugePagesAdvised && mem.HugePageBytes > 0

	x, heap2, rss2 := scaleExactSide(cfg, ts, perDC, rep, heap1, rss1)
	var rx *RadixIndex
	if cfg.Radix {
		if rx, err = scaleRadixSide(ctx, cfg, ts, perDC, rep, heap2, rss2); err != nil {
			return nil, err
		}
	}
	sample := scaleSampler(cfg, ts, rep)
	cold := sample(cfg.ColdQueries)
	scaleQueryTimes(cfg, ix, x, rx, cold, rep)
	scaleAccuracySide(cfg, ix, x, rx, sample, cold, rep)
	runtime.KeepAlive(x)
	runtime.KeepAlive(rx)
	return rep, nil
}

// scaleCKFSide builds one producer state per DC from the trace, installs
// its lane words as the lane's snapshot in ix and drops the state. It fills
// rep's CKF side and returns the requests each DC consumed.
func scaleCKFSide(ctx context.Context, cfg ScaleConfig, ts *traceStream, ix *consumer.Indexer, ings []*consumer.LaneIngestor, expected uint64, rep *ScaleReport) ([]int, error) {
	perDC := make([]int, cfg.Lanes) // requests each DC consumed
	var (
		mu           sync.Mutex
		storedBlocks uint64
		buildTime    time.Duration // summed over DCs: per-goroutine time
		firstErr     error
	)
	ckfStart := time.Now()
	dcs := make(chan int, cfg.Lanes)
	for dc := range cfg.Lanes {
		dcs <- dc
	}
	close(dcs)
	var wg sync.WaitGroup
	for range min(cfg.BuildGoroutines, cfg.Lanes) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for dc := range dcs {
				if ctx.Err() != nil {
					return
				}
				cfg.Progress("scale: DC %d/%d: producer state, %d buckets, filling to %d blocks", dc+1, cfg.Lanes, cfg.Buckets, expected)
				b, err := buildScaleLane(ts, dc, expected, ings[dc], cfg.Buckets)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				perDC[dc] = b.requests
				storedBlocks += b.stored
				buildTime += b.elapsed
				rep.Requests += uint64(b.requests)
				rep.CkfMemberships += b.unique
				rep.CkfFailures += b.failures
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	ckfWall := time.Since(ckfStart)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if firstErr != nil {
		return nil, firstErr
	}
	rep.CKF.BuildSeconds = buildTime.Seconds()
	rep.CKF.BuildWallSeconds = ckfWall.Seconds()
	rep.CKF.IngestBlocksPerSec = float64(storedBlocks) / buildTime.Seconds()

	return perDC, nil
}

// scaleExactSide indexes the same requests in the exact map, DC by DC, on
// ExactShards goroutines, and fills rep's exact side. heap1 and rss1 are
// the readings taken after the CKF side was built.
func scaleExactSide(cfg ScaleConfig, ts *traceStream, perDC []int, rep *ScaleReport, heap1, rss1 uint64) (x *ExactIndex, heap2, rss2 uint64) {
	cfg.Progress("scale: exact index over the same %d requests", rep.Requests)
	x = NewExactIndex()
	t0 := time.Now()
	var exactBlocks uint64
	var shardBusy [ExactShards]time.Duration
	var shardAdded [ExactShards]uint64
	var swg sync.WaitGroup
	for shard := range ExactShards {
		swg.Add(1)
		go func() {
			defer swg.Done()
			s0 := time.Now()
			var locals []ckf.LocalBlockHash
			var blocks uint64
			for dc := range cfg.Lanes {
				left := perDC[dc]
				ts.forDC(dc, func(r uint64, i int, _ uint64) bool {
					locals = ts.locals(locals, r, i)
					shardAdded[shard] += uint64(x.AddShard(shard, dc, locals))
					blocks += uint64(len(locals))
					left--
					return left > 0
				})
			}
			shardBusy[shard] = time.Since(s0)
			if shard == 0 {
				exactBlocks = blocks
			}
		}()
	}
	swg.Wait()
	var exactBusy time.Duration
	for s := range ExactShards {
		rep.Memberships += shardAdded[s]
		exactBusy += shardBusy[s]
	}
	exactTime := time.Since(t0)
	heap2, rss2 = residentMemory()
	rep.UniqueBlocks = uint64(x.Len())
	// Both sides build on two goroutines; rates are per goroutine-second.
	rep.Exact.BuildSeconds = exactBusy.Seconds()
	rep.Exact.IngestBlocksPerSec = float64(exactBlocks) / exactBusy.Seconds()
	rep.Exact.BuildWallSeconds = exactTime.Seconds()
	rep.Exact.HeapBytes, rep.Exact.RSSBytes = sub0(heap2, heap1), sub0(rss2, rss1)
	for _, side := range []*ScaleSide{&rep.CKF, &rep.Exact} {
		side.BytesPerMembership = float64(side.RSSBytes) / float64(rep.Memberships)
		side.HeapBytesPerMembership = float64(side.HeapBytes) / float64(rep.Memberships)
	}
	rep.TraceCopies = uint64(rep.Requests)/uint64(len(cfg.Trace)) + 1

	return x, heap2, rss2
}

// scaleRadixSide builds the radix tree over the same requests, one tree per
// goroutine, unless the memberships exceed cfg.RadixMaxMemberships (then it
// records why in rep and returns nil).
func scaleRadixSide(ctx context.Context, cfg ScaleConfig, ts *traceStream, perDC []int, rep *ScaleReport, heap2, rss2 uint64) (*RadixIndex, error) {
	if rep.CkfMemberships > cfg.RadixMaxMemberships {
		rep.RadixSkipped = fmt.Sprintf("%d memberships exceed the radix cap of %d (ScaleConfig.RadixMaxMemberships): the tree needs hundreds of bytes per distinct block", rep.CkfMemberships, cfg.RadixMaxMemberships)
		cfg.Progress("scale: radix tree skipped: %s", rep.RadixSkipped)
		return nil, nil
	}
	cfg.Progress("scale: radix tree over the same %d requests", rep.Requests)
	rep.Radix = &RadixSide{}
	rx := buildScaleRadix(ts, perDC, rep.Radix, heap2, rss2)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep.Radix.Prefixes = uint64(rx.Len())
	rep.Radix.BytesPerMembership = float64(rep.Radix.RSSBytes) / float64(rep.Memberships)
	rep.Radix.HeapBytesPerMembership = float64(rep.Radix.HeapBytes) / float64(rep.Memberships)
	return rx, nil
}

// scaleSampler returns a function that draws n distinct requests from the
// trace copies every DC consumed from.
func scaleSampler(cfg ScaleConfig, ts *traceStream, rep *ScaleReport) func(n int) [][]ckf.LocalBlockHash {
	rng := mix64(cfg.Seed ^ 0x9e3779b97f4a7c15)
	copies := max(rep.TraceCopies-1, 1)
	return func(n int) [][]ckf.LocalBlockHash {
		seen := make(map[scaleRequest]bool, n)
		out := make([][]ckf.LocalBlockHash, 0, n)
		for len(out) < n {
			rng = mix64(rng)
			q := scaleRequest{copy: rng % copies, idx: int((rng >> 32) % uint64(len(cfg.Trace)))}
			if seen[q] && len(seen) < int(copies)*len(cfg.Trace) {
				continue
			}
			seen[q] = true
			out = append(out, ts.locals(nil, q.copy, q.idx))
		}
		return out
	}
}

// scaleQueryTimes times hot and cold queries of every side on one and two
// goroutines and records the percentiles in rep.
func scaleQueryTimes(cfg ScaleConfig, ix *consumer.Indexer, x *ExactIndex, rx *RadixIndex, cold [][]ckf.LocalBlockHash, rep *ScaleReport) {
	hot := cold[:min(cfg.HotQueries, len(cold))]

	ckfQuery := func() func(q []ckf.LocalBlockHash) {
		var s consumer.QueryScratch
		var out consumer.QueryResult
		return func(q []ckf.LocalBlockHash) { _ = ix.FindPrefixMatches(q, &s, &out) }
	}
	exactQuery := func() func(q []ckf.LocalBlockHash) {
		var s ExactScratch
		var d [ckf.LaneCount]uint32
		return func(q []ckf.LocalBlockHash) { x.Depths(q, &s, &d) }
	}
	type querySide struct {
		name string
		rep  *ScaleSide
		mk   func() func([]ckf.LocalBlockHash)
	}
	sides := []querySide{{"ckf", &rep.CKF, ckfQuery}, {"exact", &rep.Exact, exactQuery}}
	if rx != nil {
		sides = append(sides, querySide{"radix", &rep.Radix.ScaleSide, func() func(q []ckf.LocalBlockHash) {
			var s RadixScratch
			var d [ckf.LaneCount]uint32
			return func(q []ckf.LocalBlockHash) { rx.Depths(q, &s, &d) }
		}})
	}
	for _, side := range sides {
		for _, g := range []int{1, 2} {
			cfg.Progress("scale: %s queries, %d goroutine(s)", side.name, g)
			hl := timeQueries(g, hot, cfg.Samples, side.mk)
			cl := timeQueries(g, cold, len(cold), side.mk)
			suffix := ""
			if g == 2 {
				suffix = " 2g"
			}
			rep.Latencies[side.name+" hot"+suffix] = hl
			rep.Latencies[side.name+" cold"+suffix] = cl
			p := func(l Latencies, q float64) float64 { return float64(l.Quantile(q).Nanoseconds()) }
			if g == 1 {
				side.rep.HotP50Ns, side.rep.HotP99Ns = p(hl, 0.5), p(hl, 0.99)
				side.rep.ColdP50Ns, side.rep.ColdP99Ns = p(cl, 0.5), p(cl, 0.99)
			} else {
				side.rep.HotP50Ns2G, side.rep.HotP99Ns2G = p(hl, 0.5), p(hl, 0.99)
				side.rep.ColdP50Ns2G, side.rep.ColdP99Ns2G = p(cl, 0.5), p(cl, 0.99)
			}
		}
	}

}

// scaleAccuracySide measures the CKF answers (and the radix tree's, when
// built) against the exact map, and the probe false-positive rate.
func scaleAccuracySide(cfg ScaleConfig, ix *consumer.Indexer, x *ExactIndex, rx *RadixIndex, sample func(int) [][]ckf.LocalBlockHash, cold [][]ckf.LocalBlockHash, rep *ScaleReport) {
	cfg.Progress("scale: accuracy over %d trace queries", cfg.AccuracyQueries)
	accQueries := sample(cfg.AccuracyQueries)
	rep.Accuracy = scaleAccuracy(ix, x, accQueries, cfg.Lanes)
	if rx != nil {
		cfg.Progress("scale: radix answers against the exact map over the same %d queries", len(accQueries))
		checkRadix(rep.Radix, rx, x, accQueries, cfg.Lanes)
		rep.Radix.AllocsPerQuery = radixAllocsPerQuery(rx, cold)
	}
	probes := 10 * cfg.AccuracyQueries
	fp := probeFalsePositives(ix, probes, cfg.Seed)
	rep.Accuracy.ProbeFPProbes = probes * cfg.Lanes
	rep.Accuracy.ProbeFPPct = 100 * float64(fp) / float64(rep.Accuracy.ProbeFPProbes)
	rep.Accuracy.ExpectedInflated = float64(rep.Accuracy.shortAnswers) * float64(fp) / float64(rep.Accuracy.ProbeFPProbes)
}

// timeQueries times samples queries per goroutine, each goroutine walking
// qs from its own offset so a cold set stays cold, and pools the samples.
func timeQueries(goroutines int, qs [][]ckf.LocalBlockHash, samples int, mk func() func([]ckf.LocalBlockHash)) Latencies {
	parts := make([]Latencies, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			query := mk()
			off := g * len(qs) / goroutines
			for k := range min(64, len(qs)) { // grow the scratch
				query(qs[(off+k)%len(qs)])
			}
			parts[g] = TimeEach(samples, func(k int) { query(qs[(off+k+64)%len(qs)]) })
		}()
	}
	wg.Wait()
	var all Latencies
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.Sort(all)
	return all
}

// probeFalsePositives asks every lane about n random one-block chains,
// which no DC stores (a 64-bit hash collision aside), and returns how many
// (chain, lane) answers were nonetheless present: one probe's false
// positives.
func probeFalsePositives(ix *consumer.Indexer, n int, seed uint64) int {
	var s consumer.QueryScratch
	var out consumer.QueryResult
	seq := make([]ckf.SequenceHash, 1)
	rng := mix64(seed ^ 0xf0f0_f0f0_f0f0_f0f0)
	hits := 0
	for range n {
		rng = mix64(rng)
		seq[0] = ckf.SequenceHash(rng)
		if ix.FindPrefixMatchesSequence(seq, &s, &out) != nil {
			continue
		}
		for _, l := range out.Lanes {
			hits += int(l.Depth)
		}
	}
	return hits
}

// scaleAccuracy runs qs through both indexes.
func scaleAccuracy(ix *consumer.Indexer, x *ExactIndex, qs [][]ckf.LocalBlockHash, lanes int) ScaleAccuracy {
	var acc ScaleAccuracy
	var s consumer.QueryScratch
	var out consumer.QueryResult
	var es ExactScratch
	var exact [ckf.LaneCount]uint32
	for _, q := range qs {
		if err := ix.FindPrefixMatches(q, &s, &out); err != nil {
			continue
		}
		x.Depths(q, &es, &exact)
		acc.Queries++
		best, bestDepth, exactMax := 0, uint32(0), uint32(0)
		for l := range lanes {
			got := out.Lanes[l].Depth
			acc.Answers++
			switch {
			case got < exact[l]:
				acc.Under++
			case got > exact[l]:
				acc.Inflated++
				if exact[l] == 0 {
					acc.InflatedFromZero++
				}
			}
			if int(exact[l]) < len(q) {
				acc.shortAnswers++
			}
			if got > bestDepth {
				best, bestDepth = l, got
			}
			exactMax = max(exactMax, exact[l])
		}
		if exact[best] < exactMax {
			acc.WrongBest++
		}
	}
	if acc.Answers > 0 {
		acc.InflatedPct = 100 * float64(acc.Inflated) / float64(acc.Answers)
	}
	if acc.Queries > 0 {
		acc.WrongBestPct = 100 * float64(acc.WrongBest) / float64(acc.Queries)
	}
	return acc
}

func newScaleIndexer(lanes int, buckets uint64) (*consumer.Indexer, []*consumer.LaneIngestor, error) {
	domain, err := ckf.DomainFromName("ckf-bench-scale")
	if err != nil {
		return nil, nil, err
	}
	var pools [ckf.LaneCount]*ckf.PoolID
	for l := range lanes {
		pools[l] = &ckf.PoolID{Domain: domain, Dc: ckf.DcID(l + 1)}
	}
	m, err := consumer.NewManifest(scaleInstance, domain, ckf.NewFormatIdentity(ckf.DefaultSeed, buckets), pools)
	if err != nil {
		return nil, nil, err
	}
	ix, err := consumer.NewIndexer(m, ckf.DefaultPrefixSearchConfig())
	if err != nil {
		return nil, nil, err
	}
	ings := make([]*consumer.LaneIngestor, lanes)
	for l := range lanes {
		if ings[l], err = ix.ClaimLane(l); err != nil {
			return nil, nil, err
		}
		if err := ings[l].Assign(scaleIdentity(l, buckets), scaleLease(l)); err != nil {
			return nil, nil, err
		}
	}
	return ix, ings, nil
}

const scaleInstance = 1

func scaleIdentity(lane int, buckets uint64) ckf.ProducerIdentity {
	domain, _ := ckf.DomainFromName("ckf-bench-scale") // validated in newScaleIndexer
	return ckf.ProducerIdentity{Pool: ckf.PoolID{Domain: domain, Dc: ckf.DcID(lane + 1)}, ProducerIncarnation: 1, LayoutGeneration: 1, Format: ckf.NewFormatIdentity(ckf.DefaultSeed, buckets)}
}

func scaleLease(lane int) ckf.LaneLease {
	return ckf.LaneLease{ConsumerInstance: scaleInstance, PhysicalLane: uint8(lane), AssignmentEpoch: 1}
}

// residentMemory collects garbage, returns freed pages to the OS and reads
// the live heap and the process's resident set.
func residentMemory() (heap, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, processRSS()
}

func sub0(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// Metrics lays the report out as subject (CKF) / baseline (exact) rows.
func (r *ScaleReport) Metrics() []Metric {
	c, x := r.CKF, r.Exact
	return []Metric{
		NewMetric("scale/hot p50", "ns", c.HotP50Ns, x.HotP50Ns, false),
		NewMetric("scale/hot p99", "ns", c.HotP99Ns, x.HotP99Ns, false),
		NewMetric("scale/cold p50", "ns", c.ColdP50Ns, x.ColdP50Ns, false),
		NewMetric("scale/cold p99", "ns", c.ColdP99Ns, x.ColdP99Ns, false),
		NewMetric("scale/hot p50 2 goroutines", "ns", c.HotP50Ns2G, x.HotP50Ns2G, false),
		NewMetric("scale/hot p99 2 goroutines", "ns", c.HotP99Ns2G, x.HotP99Ns2G, false),
		NewMetric("scale/cold p50 2 goroutines", "ns", c.ColdP50Ns2G, x.ColdP50Ns2G, false),
		NewMetric("scale/cold p99 2 goroutines", "ns", c.ColdP99Ns2G, x.ColdP99Ns2G, false),
		NewMetric("scale/ingest", "blocks/s", c.IngestBlocksPerSec, x.IngestBlocksPerSec, true),
		NewMetric("scale/memory RSS", "B/membership", c.BytesPerMembership, x.BytesPerMembership, false),
		NewMetric("scale/memory heap", "B/membership", c.HeapBytesPerMembership, x.HeapBytesPerMembership, false),
	}
}

// RadixMetrics lays the radix side out as subject (CKF) / baseline (radix
// tree) rows, named "scale/radix ..." (none unless the radix side ran).
func (r *ScaleReport) RadixMetrics() []Metric {
	if r.Radix == nil {
		return nil
	}
	c, x := r.CKF, r.Radix.ScaleSide
	return []Metric{
		NewMetric("scale/radix hot p50", "ns", c.HotP50Ns, x.HotP50Ns, false),
		NewMetric("scale/radix hot p99", "ns", c.HotP99Ns, x.HotP99Ns, false),
		NewMetric("scale/radix cold p50", "ns", c.ColdP50Ns, x.ColdP50Ns, false),
		NewMetric("scale/radix cold p99", "ns", c.ColdP99Ns, x.ColdP99Ns, false),
		NewMetric("scale/radix hot p50 2 goroutines", "ns", c.HotP50Ns2G, x.HotP50Ns2G, false),
		NewMetric("scale/radix hot p99 2 goroutines", "ns", c.HotP99Ns2G, x.HotP99Ns2G, false),
		NewMetric("scale/radix cold p50 2 goroutines", "ns", c.ColdP50Ns2G, x.ColdP50Ns2G, false),
		NewMetric("scale/radix cold p99 2 goroutines", "ns", c.ColdP99Ns2G, x.ColdP99Ns2G, false),
		NewMetric("scale/radix ingest", "blocks/s", c.IngestBlocksPerSec, x.IngestBlocksPerSec, true),
		NewMetric("scale/radix memory RSS", "B/membership", c.BytesPerMembership, x.BytesPerMembership, false),
		NewMetric("scale/radix memory heap", "B/membership", c.HeapBytesPerMembership, x.HeapBytesPerMembership, false),
	}
}
