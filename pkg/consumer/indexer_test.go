package consumer

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// newTestIndexer configures the given lanes (DC id = lane+100) under one
// explicit domain.
func newTestIndexer(t testing.TB, expectedBlocks uint64, window int, lanes ...int) (*Indexer, ckf.FormatIdentity) {
	t.Helper()
	format := ixFormat(t, expectedBlocks)
	domain := ixDomain(9, 9, ckf.SourceExplicit, ckf.SourceExplicit)
	var pools [ckf.LaneCount]*ckf.PoolID
	for _, l := range lanes {
		pools[l] = &ckf.PoolID{Domain: domain, Dc: ckf.DcID(l + 100)}
	}
	m, err := NewManifest(7, domain, format, pools)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndexer(m, ckf.PrefixSearchConfig{VerificationWindow: window})
	if err != nil {
		t.Fatal(err)
	}
	return ix, format
}

// activateLane claims, assigns and installs words as lane's snapshot.
func activateLane(t testing.TB, ix *Indexer, lane int, words []uint64) *LaneIngestor {
	t.Helper()
	ing, err := ix.ClaimLane(lane)
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := ix.Manifest().PoolID(lane)
	id := ckf.ProducerIdentity{Pool: pool, ProducerIncarnation: 1, LayoutGeneration: 1, Format: ix.Manifest().Format()}
	lease := ckf.LaneLease{ConsumerInstance: ix.Manifest().ConsumerInstance(), PhysicalLane: uint8(lane), AssignmentEpoch: 1}
	if err := ing.Assign(id, lease); err != nil {
		t.Fatal(err)
	}
	out := ing.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: words})
	if out.Kind != OutcomeSnapshotInstalled {
		t.Fatalf("install lane %d: %v", lane, out)
	}
	return ing
}

func TestNewIndexerValidatesWindowAndFormat(t *testing.T) {
	format := ixFormat(t, 64)
	domain := ixDomain(1, 1, ckf.SourceExplicit, ckf.SourceExplicit)
	var pools [ckf.LaneCount]*ckf.PoolID
	pools[0] = &ckf.PoolID{Domain: domain, Dc: 1}
	m, err := NewManifest(1, domain, format, pools)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []int{0, -1, 9} {
		_, err := NewIndexer(m, ckf.PrefixSearchConfig{VerificationWindow: w})
		var be *BuildError
		if !errors.As(err, &be) || be.Kind != ErrInvalidVerificationWindow || be.Value != w {
			t.Fatalf("window %d: %v, want InvalidVerificationWindow", w, err)
		}
	}
	bad := format
	bad.BucketCount = 3
	mBad, err := NewManifest(1, domain, bad, pools)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewIndexer(mBad, ckf.DefaultPrefixSearchConfig()); !errors.Is(err, ckf.ErrCapacityOverflow) || !errors.Is(err, ErrCkf) {
		t.Fatalf("bucket count 3: %v, want ErrCkf wrapping ckf.ErrCapacityOverflow", err)
	}
	if _, err := NewIndexer(nil, ckf.DefaultPrefixSearchConfig()); !errors.Is(err, ErrNoConfiguredLanes) {
		t.Fatalf("nil manifest: %v", err)
	}
}

func TestClaimLaneRejectsInvalidAndUnconfiguredLanes(t *testing.T) {
	ix, _ := newTestIndexer(t, 64, 2, 2)
	for _, c := range []struct {
		lane int
		kind BuildErrorKind
	}{{-1, ErrInvalidLane}, {16, ErrInvalidLane}, {3, ErrUnconfiguredLane}} {
		_, err := ix.ClaimLane(c.lane)
		var be *BuildError
		if !errors.As(err, &be) || be.Kind != c.kind || be.Lane != c.lane {
			t.Fatalf("ClaimLane(%d) = %v, want %v", c.lane, err, c.kind)
		}
	}
}

func TestConfigureLane(t *testing.T) {
	ix, format := newTestIndexer(t, 64, 2, 3)
	initial := ix.Manifest()
	domain := initial.Domain()
	pool3, _ := initial.PoolID(3)
	newPool := ckf.PoolID{Domain: domain, Dc: 555}

	checks := []struct {
		name string
		lane int
		pool ckf.PoolID
		kind BuildErrorKind
	}{
		{"invalid lane", 16, newPool, ErrInvalidLane},
		{"negative lane", -1, newPool, ErrInvalidLane},
		{"configured lane", 3, newPool, ErrLaneAlreadyConfigured},
		{"mixed domain", 5, ckf.PoolID{Domain: ixDomain(8, 8, ckf.SourceExplicit, ckf.SourceExplicit), Dc: 556}, ErrMixedIndexerDomain},
		{"duplicate pool", 5, pool3, ErrDuplicatePool},
	}
	for _, c := range checks {
		if err := ix.ConfigureLane(c.lane, c.pool); !errors.Is(err, c.kind) {
			t.Fatalf("%s: ConfigureLane = %v, want %v", c.name, err, c.kind)
		}
	}
	if ix.Manifest() != initial {
		t.Fatal("a rejected ConfigureLane published a new manifest")
	}
	if _, err := ix.ClaimLane(5); !errors.Is(err, ErrUnconfiguredLane) {
		t.Fatalf("ClaimLane(5) before configuration: %v", err)
	}

	if err := ix.ConfigureLane(5, newPool); err != nil {
		t.Fatal(err)
	}
	m := ix.Manifest()
	if m.ConfiguredLanes() != 1<<3|1<<5 {
		t.Fatalf("configured = %#x", m.ConfiguredLanes())
	}
	if got, ok := m.PoolID(5); !ok || got != newPool {
		t.Fatalf("PoolID(5) = %v, %v", got, ok)
	}
	if initial.ConfiguredLanes() != 1<<3 {
		t.Fatal("ConfigureLane mutated the earlier manifest")
	}
	if m.Format() != format || m.ConsumerInstance() != initial.ConsumerInstance() {
		t.Fatal("ConfigureLane changed the format or consumer")
	}
	if err := ix.ConfigureLane(6, newPool); !errors.Is(err, ErrDuplicatePool) {
		t.Fatalf("pool reused on another lane: %v", err)
	}

	// The new lane behaves like a manifest lane: claim, assign, install, query.
	var s QueryScratch
	var out QueryResult
	if err := ix.FindPrefixMatches(nil, &s, &out); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("query before any snapshot: %v", err)
	}
	f := newLaneFiller(t, format.BucketCount, format.Seed, ckf.LaneCount)
	locals := []ckf.LocalBlockHash{11, 12, 13}
	for _, h := range ckf.SequenceHashes(nil, locals) {
		f.insert(5, uint64(h))
	}
	ing := activateLane(t, ix, 5, f.lanes[5])
	defer ing.Release()
	if err := ix.FindPrefixMatches(locals, &s, &out); err != nil {
		t.Fatal(err)
	}
	want := LaneMatch{Present: true, Lane: 5, Pool: newPool, Depth: 3}
	if out.CapturedReadyLanes != 1<<5 || out.Lanes[5] != want {
		t.Fatalf("query = %+v, want lane 5 %+v", out, want)
	}
}

func TestConfigureLaneRecomputesJoinsOnDefaults(t *testing.T) {
	format := ixFormat(t, 8)
	domain := ixDomain(1, 2, ckf.SourceExplicit, ckf.SourceDefaultDerived)
	var pools [ckf.LaneCount]*ckf.PoolID
	pools[0] = &ckf.PoolID{Domain: domain, Dc: 1}
	ix := defaultIndexer(t, 1, domain, format, pools)
	if ix.Manifest().JoinsOnDefaults() {
		t.Fatal("one DC joins on defaults")
	}
	if err := ix.ConfigureLane(1, ckf.PoolID{Domain: domain, Dc: 2}); err != nil {
		t.Fatal(err)
	}
	if !ix.Manifest().JoinsOnDefaults() {
		t.Fatal("two DCs under a default-derived scope do not report JoinsOnDefaults")
	}
}

func TestRetireLaneReadinessClearsOnlyThatLane(t *testing.T) {
	ix, format := newTestIndexer(t, 64, 2, 1, 2)
	a := activateLane(t, ix, 1, make([]uint64, format.BucketCount))
	b := activateLane(t, ix, 2, make([]uint64, format.BucketCount))
	defer a.Release()
	defer b.Release()
	ix.RetireLaneReadiness(1)
	ix.RetireLaneReadiness(99) // ignored
	if got := ix.ReadyLanes(); got != 1<<2 {
		t.Fatalf("ready = %#x, want %#x", got, 1<<2)
	}
}

// chainWorld is a set of query chains inserted into lanes at known depths.
type chainWorld struct {
	locals [][]ckf.LocalBlockHash
	depths [][ckf.LaneCount]int // per chain, per lane: inserted prefix length
}

func buildChainWorld(rng *rand.Rand, f *laneFiller, lanes, chains, length int, fill func(lane, chain int) int) *chainWorld {
	w := &chainWorld{}
	for c := range chains {
		locals := make([]ckf.LocalBlockHash, length)
		for i := range locals {
			locals[i] = ckf.LocalBlockHash(rng.Uint64())
		}
		seq := ckf.SequenceHashes(nil, locals)
		var depths [ckf.LaneCount]int
		for l := range lanes {
			d := fill(l, c)
			for i := range d {
				if !f.insert(l, uint64(seq[i])) {
					d = i
					break
				}
			}
			depths[l] = d
		}
		w.locals = append(w.locals, locals)
		w.depths = append(w.depths, depths)
	}
	return w
}

// TestFindPrefixMatchesOnARealTable: queries against filled lanes never
// report less than the inserted prefix and equal the linear reference
// computed over the same table unless a false positive inflates it.
func TestFindPrefixMatchesOnARealTable(t *testing.T) {
	const lanes = 16
	all := make([]int, lanes)
	for i := range all {
		all[i] = i
	}
	ix, format := newTestIndexer(t, 4096, 2, all...)
	f := newLaneFiller(t, format.BucketCount, format.Seed, lanes)
	rng := rand.New(rand.NewPCG(7, 8))
	world := buildChainWorld(rng, f, lanes, 40, 64, func(int, int) int { return rng.IntN(65) })
	for l := range lanes {
		ing := activateLane(t, ix, l, f.lanes[l])
		defer ing.Release()
	}
	var s QueryScratch
	var out QueryResult
	for c, locals := range world.locals {
		if err := ix.FindPrefixMatches(locals, &s, &out); err != nil {
			t.Fatal(err)
		}
		if out.CapturedReadyLanes != ckf.LaneMask {
			t.Fatalf("captured %#x", out.CapturedReadyLanes)
		}
		seq := ckf.SequenceHashes(nil, locals)
		// The chained variant answers the same and hands back the whole
		// chain, whatever depth the search stopped hashing at.
		var outChain QueryResult
		chain, err := ix.FindPrefixMatchesChain(locals, &s, &outChain)
		if err != nil || outChain != out || !slices.Equal(chain, seq) {
			t.Fatalf("chain %d: FindPrefixMatchesChain %v, result equal %v, chain equal %v", c, err, outChain == out, slices.Equal(chain, seq))
		}
		var lin [ckf.LaneCount]uint32
		linearPrefixDepths(len(seq), ckf.LaneMask, func(pos int) uint16 {
			return ix.table.Probe(ix.addressing.Prepare(uint64(seq[pos])))
		}, &lin)
		// The query path (lazy hashing, per-position read memo, half-row
		// reads, prefetches) must answer what the plain search answers
		// over whole-row probes of the same table.
		var plain [ckf.LaneCount]uint32
		findPrefixDepths(len(seq), ckf.LaneMask, ix.window, func(pos int) uint16 {
			return ix.table.Probe(ix.addressing.Prepare(uint64(seq[pos])))
		}, &plain)
		for l := range lanes {
			if out.Lanes[l].Depth != plain[l] {
				t.Fatalf("chain %d lane %d: depth %d, plain search %d", c, l, out.Lanes[l].Depth, plain[l])
			}
		}
		for l := range lanes {
			got := out.Lanes[l].Depth
			if int(got) < world.depths[c][l] {
				t.Fatalf("chain %d lane %d: depth %d below the inserted prefix %d", c, l, got, world.depths[c][l])
			}
			if got < lin[l] {
				t.Fatalf("chain %d lane %d: depth %d below linear %d", c, l, got, lin[l])
			}
		}
		var viaSeq QueryResult
		if err := ix.FindPrefixMatchesSequence(seq, &s, &viaSeq); err != nil {
			t.Fatal(err)
		}
		if viaSeq != out {
			t.Fatalf("chain %d: FindPrefixMatchesSequence %+v differs from FindPrefixMatches %+v", c, viaSeq, out)
		}
	}
}

func TestFindPrefixMatchesDoesNotAllocate(t *testing.T) {
	ix, format := newTestIndexer(t, 4096, 2, 0, 1, 2, 3)
	f := newLaneFiller(t, format.BucketCount, format.Seed, 4)
	rng := rand.New(rand.NewPCG(9, 10))
	world := buildChainWorld(rng, f, 4, 1, 128, func(l, _ int) int { return 30 * l })
	for l := range 4 {
		ing := activateLane(t, ix, l, f.lanes[l])
		defer ing.Release()
	}
	var s QueryScratch
	var out QueryResult
	if err := ix.FindPrefixMatches(world.locals[0], &s, &out); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := ix.FindPrefixMatches(world.locals[0], &s, &out); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("FindPrefixMatches allocates %.1f times per query", allocs)
	}
}

// TestQueriesRaceWithIngestion exercises the weak-read contract under the
// race detector: queries run while a lane applies deltas and is retired and
// re-snapshotted. Every reported depth stays within the query length.
func TestQueriesRaceWithIngestion(t *testing.T) {
	ix, format := newTestIndexer(t, 256, 2, 0)
	ing := activateLane(t, ix, 0, make([]uint64, format.BucketCount))
	defer ing.Release()
	pool, _ := ix.Manifest().PoolID(0)
	id := ckf.ProducerIdentity{Pool: pool, ProducerIncarnation: 1, LayoutGeneration: 1, Format: format}
	lease, _ := ing.Lease()
	locals := make([]ckf.LocalBlockHash, 32)
	for i := range locals {
		locals[i] = ckf.LocalBlockHash(i + 1)
	}
	seq := ckf.SequenceHashes(nil, locals)
	a := ix.addressing

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			var s QueryScratch
			var out QueryResult
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := ix.FindPrefixMatches(locals, &s, &out)
				if err != nil && !errors.Is(err, ErrUnavailable) {
					t.Error(err)
					return
				}
				if err == nil && out.Lanes[0].Depth > uint32(len(locals)) {
					t.Errorf("depth %d beyond the query", out.Lanes[0].Depth)
					return
				}
			}
		})
	}
	installed := uint64(1)
	for i, h := range seq {
		p := a.Prepare(uint64(h))
		d := &ckf.Delta{Identity: id, Lease: lease, BaseSequence: installed, Sequence: installed + 1,
			Images: []ckf.BucketImage{{Bucket: uint64(p.BucketA), Value: uint64(p.Fingerprint)}}}
		if out := ing.ApplyDelta(d); out.Kind != OutcomeDeltaApplied {
			t.Fatalf("delta %d: %v", i, out)
		}
		installed++
		if i%8 == 7 {
			ix.RetireLaneReadiness(0)
			ing.Retire()
			lease.AssignmentEpoch++
			if err := ing.Assign(id, lease); err != nil {
				t.Fatal(err)
			}
			words := make([]uint64, format.BucketCount)
			for b := range words {
				words[b] = ix.table.LoadImage(uint64(b), 0)
			}
			installed = 1
			if out := ing.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: installed, Buckets: words}); out.Kind != OutcomeSnapshotInstalled {
				t.Fatal(out)
			}
		}
	}
	close(stop)
	wg.Wait()
}
