package bench

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// TestMain shortens testing.Benchmark's run time for the suite test unless
// -test.benchtime was given: the test checks that every pair runs and
// yields sane figures, not the figures themselves.
//
// Started as the external load generator (generatorChildEnv set, the
// server's URL last), the binary serves the generator instead.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv(generatorChildEnv) == "1" {
		args := flag.Args()
		if len(args) == 0 {
			os.Exit(2)
		}
		if err := RunGenerator(context.Background(), args[len(args)-1], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.benchtime" })
	if !set {
		if err := flag.Set("test.benchtime", "50ms"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// fullInputs reports whether CKF_TEST_FULL=1 asks for the harness tests'
// full inputs (.ci/run sets it); the default run, scripts/test.sh on a
// developer's machine, uses short ones that check the same properties.
func fullInputs() bool { return os.Getenv("CKF_TEST_FULL") == "1" }

func tinySuite() SuiteConfig {
	return SuiteConfig{
		Search:         SearchConfig{Buckets: 1 << 12, Blocks: 32, Queries: 64, HotQueries: 8, IngestRate: 50000, PoolMaxDirtyAge: time.Second, PercentileSamples: 1000, Seed: 3},
		Producer:       ProducerConfig{ExpectedBlocks: 1 << 12},
		Pool:           PoolBenchConfig{ExpectedBlocks: 1 << 10, Sets: 8},
		E2ERequests:    300,
		Rates:          RateConfig{Rates: []float64{2000}, Duration: 300 * time.Millisecond, ProbeGap: 5 * time.Millisecond},
		LatencySamples: 10,
		Query:          QueryConfig{Requests: 100, Warmup: 10, Round: 25},
	}
}

func TestSuiteRunsEveryPairWithSaneFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server and runs every pair")
	}
	rep, err := RunSuite(context.Background(), tinySuite())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Pairs) != 12 {
		t.Fatalf("%d pair descriptions, want 12 (search hot and cold, producer, pool, e2e events, e2e latency, e2e paced, query http json, http binary, nats json, mirror, http route)", len(rep.Pairs))
	}
	want := map[string]bool{
		"search/hot ns/op": true, "search/hot allocs/op": true, "search/hot p50 ns": true, "search/hot p99 ns": true,
		"search/cold ns/op": true, "search/cold allocs/op": true, "search/cold p50 ns": true, "search/cold p99 ns": true,
		"producer/store+remove ns/op": true, "producer/store+remove allocs/op": true,
		"pool/deltas images/s": true, "pool/deltas allocs/op": true,
		"e2e/events events/s": true, "e2e/cpu per event CPU-µs": true, "e2e/latency p50 µs": true, "e2e/latency p99 µs": true,
		"e2e/paced 2000/s p50 µs": true, "e2e/paced 2000/s p99 µs": true, "e2e/paced 2000/s applied events/s": true, "e2e/paced 2000/s drain ms": true,
		"e2e/paced 2000/s cpu cores": true,
		"query/http json p50 µs":     true, "query/http json p99 µs": true, "query/http binary p50 µs": true, "query/http binary p99 µs": true,
		"query/nats json p50 µs": true, "query/nats json p99 µs": true, "query/mirror p50 µs": true, "query/mirror p99 µs": true,
		"query/http route p50 µs": true, "query/http route p99 µs": true,
	}
	for _, m := range rep.Metrics {
		key := m.Name + " " + m.Unit
		if !want[key] {
			t.Errorf("unexpected or repeated row %q", key)
			continue
		}
		delete(want, key)
		if m.Unit == "ms" { // a drain may round to zero
			if m.Subject < 0 || m.Baseline < 0 {
				t.Errorf("%s: subject %v baseline %v", key, m.Subject, m.Baseline)
			}
			continue
		}
		if m.Unit == "allocs/op" {
			if m.Subject < 0 || m.Baseline < 0 || (m.Ratio == nil && m.Baseline != 0) {
				t.Errorf("%s: subject %v baseline %v ratio %v", key, m.Subject, m.Baseline, m.Ratio)
			}
			continue
		}
		if !(m.Subject > 0) || !(m.Baseline > 0) || math.IsInf(m.Subject, 0) || math.IsInf(m.Baseline, 0) {
			t.Errorf("%s: subject %v baseline %v, want positive finite figures", key, m.Subject, m.Baseline)
		}
		if m.Ratio == nil || !(*m.Ratio > 0) || math.IsInf(*m.Ratio, 0) {
			t.Errorf("%s: ratio %v, want positive and finite", key, m.Ratio)
		}
	}
	for key := range want {
		t.Errorf("row %q missing", key)
	}
	// Paced at 50k images/s (the race detector slows the pool ~10×), the
	// pool keeps up: no fault, every lane ready, about the asked rate.
	if ui, ok := rep.Info["search_cold_under_ingest"].(UnderIngest); !ok || ui.TargetImagesPerSec != 50000 || !(ui.ImagesPerSec > 10000) || ui.ImagesPerSec > 60000 || ui.Queries < 100 || ui.P99Ns < ui.P50Ns {
		t.Errorf("search under ingest: %+v", rep.Info["search_cold_under_ingest"])
	}
	if len(rep.E2ERates) != 1 {
		t.Fatalf("%d paced rates, want 1", len(rep.E2ERates))
	}
	for _, side := range []RateSide{rep.E2ERates[0].Pipeline, rep.E2ERates[0].Raw} {
		// The generator alone keeps some CPU busy; nothing uses more than
		// the machine has.
		if side.Events < 600 || side.Probes == 0 || side.SendSeconds <= 0 || side.AppliedPerSec <= 0 ||
			!(side.CPUCores > 0) || side.CPUCores > float64(runtime.NumCPU())+0.5 {
			t.Errorf("paced side %+v", side)
		}
	}
	// The search replaces a linear scan: on a 32-block query it must not
	// be slower than probing every position.
	// allocs/op counts the whole process's mallocs over N queries, and the
	// suite's e2e pair leaves NATS goroutines allocating beside it: a
	// fraction is theirs, while an allocating search shows at least one per
	// query.
	for _, m := range rep.Metrics {
		if (m.Name == "search/hot" || m.Name == "search/cold") && m.Unit == "allocs/op" && m.Subject >= 0.5 {
			t.Errorf("FindPrefixMatches allocates %.2f per query", m.Subject)
		}
	}
}

func TestRunSuiteRejectsUnknownSuites(t *testing.T) {
	if _, err := RunSuite(context.Background(), SuiteConfig{Only: []string{"search", "nope"}}); err == nil {
		t.Fatal("unknown suite accepted")
	}
}

func TestSearchNeverUndercutsTheLinearProbe(t *testing.T) {
	fx, err := NewSearchFixture(SearchConfig{Buckets: 1 << 12, Blocks: 64, Queries: 16, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer fx.Close()
	equal, total, err := fx.CompareDepths()
	if err != nil {
		t.Fatal(err)
	}
	if total != 16*16 || equal*100 < total*95 {
		t.Fatalf("%d of %d lane depths equal to the linear probe's", equal, total)
	}
}

func TestLinearProbeDepthIsTheFirstMiss(t *testing.T) {
	a, err := ckfAddressing(1 << 8)
	if err != nil {
		t.Fatal(err)
	}
	lp := NewLinearProbe(a)
	locals := []uint64{11, 22, 33, 44, 55}
	present := map[int][]int{0: {0, 1, 2, 3, 4}, 3: {0, 1, 3}, 7: {1, 2}}
	for lane, pos := range present {
		lp.setLane(lane, laneWords(a, locals, pos))
	}
	got := linearDepths(lp, locals)
	want := map[int]uint32{0: 5, 3: 2, 7: 0}
	for l := range 16 {
		if got[l] != want[l] {
			t.Errorf("lane %d depth %d, want %d", l, got[l], want[l])
		}
	}
}

func TestProducerDriversHoldTheTargetLoad(t *testing.T) {
	cfg := ProducerConfig{ExpectedBlocks: 1 << 12}
	sd, err := NewStateDriver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	md := NewRefcountDriver(cfg)
	for range 500 {
		sd.storeNext()
		if err := sd.removeOldest(); err != nil {
			t.Fatal(err)
		}
		md.storeNext()
		md.removeOldest()
	}
	if l := sd.Load(); l < 0.7 || l > 0.85 {
		t.Fatalf("state load %.3f, want about 0.8", l)
	}
	if uint64(md.Len()) != md.liveBlocks() || md.liveBlocks() != sd.liveBlocks() {
		t.Fatalf("refcount map holds %d, live %d, state live %d", md.Len(), md.liveBlocks(), sd.liveBlocks())
	}
}

func TestRatio(t *testing.T) {
	for _, c := range []struct {
		s, b, want float64
		ok         bool
	}{{2, 4, 0.5, true}, {0, 0, 1, true}, {0, 3, 0, true}, {3, 0, 0, false}} {
		got, ok := Ratio(c.s, c.b)
		if got != c.want || ok != c.ok {
			t.Errorf("Ratio(%v, %v) = %v, %v; want %v, %v", c.s, c.b, got, ok, c.want, c.ok)
		}
	}
}

func BenchmarkSearch(b *testing.B) {
	hot, cold := SearchPairs(SearchConfig{})
	b.Run("queries=hot/subject=FindPrefixMatches", hot.Subject)
	b.Run("queries=hot/baseline=LinearProbe", hot.Baseline)
	b.Run("queries=cold/subject=FindPrefixMatches", cold.Subject)
	b.Run("queries=cold/baseline=LinearProbe", cold.Baseline)
}

func BenchmarkProducer(b *testing.B) {
	p := ProducerPair(ProducerConfig{})
	b.Run("subject=ApplyEventCanonical", p.Subject)
	b.Run("baseline=RefcountMap", p.Baseline)
}

func BenchmarkPool(b *testing.B) {
	p := PoolPair(PoolBenchConfig{})
	b.Run("subject=Pool16Lanes", p.Subject)
	b.Run("baseline=DirectApply", p.Baseline)
}

func BenchmarkEndToEnd(b *testing.B) {
	b.Run("subject=EndToEndEvents", EndToEndEvents)
	b.Run("baseline=RawJetStreamEvents", RawJetStreamEvents)
	b.Run("subject=EventToQueryableLatency", EventToQueryableLatency)
	b.Run("baseline=RawJetStreamLatency", RawJetStreamLatency)
}

func ckfAddressing(buckets uint64) (ckf.Addressing, error) {
	return ckf.NewAddressing(buckets, ckf.DefaultSeed)
}

// laneWords is a lane holding the chain positions pos of locals.
func laneWords(a ckf.Addressing, locals []uint64, pos []int) []uint64 {
	ls := make([]ckf.LocalBlockHash, len(locals))
	for i, l := range locals {
		ls[i] = ckf.LocalBlockHash(l)
	}
	seqs := ckf.SequenceHashes(nil, ls)
	words := make([]uint64, a.BucketCount())
	for _, i := range pos {
		p := a.Prepare(uint64(seqs[i]))
		s := ckf.FirstEmpty(words[p.BucketA])
		words[p.BucketA] = ckf.WithSlot(words[p.BucketA], s, p.Fingerprint)
	}
	return words
}

func linearDepths(lp *LinearProbe, locals []uint64) [ckf.LaneCount]uint32 {
	ls := make([]ckf.LocalBlockHash, len(locals))
	for i, l := range locals {
		ls[i] = ckf.LocalBlockHash(l)
	}
	var d [ckf.LaneCount]uint32
	lp.Depths(ls, &d)
	return d
}

// TestQueryUnderIngestRejectsABadRateAndAClosedPool: a pass whose pool
// refuses submissions (here: closed, its lanes retired) ends with an error
// instead of a latency figure taken beside retired lanes.
func TestQueryUnderIngestRejectsABadRateAndAClosedPool(t *testing.T) {
	fx, err := NewSearchFixture(SearchConfig{Buckets: 1 << 12, Blocks: 32, Queries: 16, HotQueries: 4, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.QueryUnderIngest(16, 100, 0); err == nil {
		t.Fatal("rate 0 accepted")
	}
	if err := fx.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.QueryUnderIngest(16, 100, 1e5); err == nil {
		t.Fatal("a pass over a closed pool reported figures")
	}
}

// TestQueryUnderIngestReArmsRetiredLanes: a pool that falls behind (here a
// 1µs dirty-to-applied bound no worker can meet) retires lanes; the pass
// re-arms them, counts the retirements, keeps only queries over all 16
// lanes, and leaves every lane ready for the next pass instead of aborting.
func TestQueryUnderIngestReArmsRetiredLanes(t *testing.T) {
	fx, err := NewSearchFixture(SearchConfig{Buckets: 1 << 12, Blocks: 32, Queries: 16, HotQueries: 4, Seed: 7, PoolMaxDirtyAge: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fx.Close()
	eq0, total0, err := fx.CompareDepths()
	if err != nil {
		t.Fatal(err)
	}
	retired := 0
	for pass := 0; pass < 3 || retired == 0 && pass < 50; pass++ {
		ui, err := fx.QueryUnderIngest(16, 20000, 1e6)
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		retired += ui.Retirements
		if ui.KeptPace() != (ui.Retirements == 0 && ui.Faults == 0) {
			t.Errorf("pass %d: KeptPace %v for %+v", pass, ui.KeptPace(), ui)
		}
		if ui.Queries+ui.DegradedQueries < 100 || ui.AllReadyFraction < 0 || ui.AllReadyFraction > 1 || ui.P99Ns < ui.P50Ns {
			t.Errorf("pass %d: %+v", pass, ui)
		}
		if ready := fx.ix.ReadyLanes(); ready != ckf.LaneMask {
			t.Errorf("pass %d: ready lanes %016b after the pass, want all 16", pass, ready)
		}
	}
	if retired == 0 {
		t.Fatal("no lane retired under a 1µs dirty-to-applied bound")
	}
	// Re-armed lanes hold the same words: the search answers as before.
	if eq, total, err := fx.CompareDepths(); err != nil || eq != eq0 || total != total0 {
		t.Errorf("after re-arming: %d of %d depths equal to the linear probe's (%d of %d before), %v", eq, total, eq0, total0, err)
	}
}
