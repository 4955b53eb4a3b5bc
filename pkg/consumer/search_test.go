package consumer

import (
	"math/rand/v2"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// linearPrefixDepths is the reference the search is tested against: a lane's
// depth is the length of its unbroken run of hits from position 0.
func linearPrefixDepths(n int, initialMask uint16, probe func(pos int) uint16, depths *[ckf.LaneCount]uint32) {
	*depths = [ckf.LaneCount]uint32{}
	active := initialMask
	for i := 0; i < n && active != 0; i++ {
		active &= probe(i)
		for m := active; m != 0; m &= m - 1 {
			depths[lanesOf(m)] = saturate32(i + 1)
		}
	}
}

// maskTable answers probes from per-position lane masks and counts probes.
type maskTable struct {
	masks  []uint16
	counts []int
}

func newMaskTable(n int, hit func(lane, pos int) bool, lanes int) *maskTable {
	mt := &maskTable{masks: make([]uint16, n), counts: make([]int, n)}
	for pos := range n {
		for l := range lanes {
			if hit(l, pos) {
				mt.masks[pos] |= 1 << l
			}
		}
	}
	return mt
}

func (mt *maskTable) probe(pos int) uint16 {
	mt.counts[pos]++
	return mt.masks[pos]
}

func (mt *maskTable) search(initial uint16, window int, stats *searchStats) [ckf.LaneCount]uint32 {
	var d [ckf.LaneCount]uint32
	runPrefixSearch(len(mt.masks), initial, window, funcProber(mt.probe), &d, true, stats)
	return d
}

func (mt *maskTable) linear(initial uint16) [ckf.LaneCount]uint32 {
	var d [ckf.LaneCount]uint32
	linearPrefixDepths(len(mt.masks), initial, func(pos int) uint16 { return mt.masks[pos] }, &d)
	return d
}

func oneLane(hits ...bool) *maskTable {
	return newMaskTable(len(hits), func(_, pos int) bool { return hits[pos] }, 1)
}

func TestFullBinarySearchAndTerminalWindowFollowTheDefinedContract(t *testing.T) {
	mt := oneLane(true, true, true, false, true, true, true, true)
	if got := mt.search(1, 1, nil)[0]; got != 8 {
		t.Fatalf("window 1: depth %d, want 8 (hole missed)", got)
	}
	if got := mt.search(1, 8, nil)[0]; got != 3 {
		t.Fatalf("window 8: depth %d, want 3", got)
	}
	if got := mt.linear(1)[0]; got != 3 {
		t.Fatalf("linear: depth %d, want 3", got)
	}
}

func TestGroupedSearchProbesEachBinaryMidpointOnce(t *testing.T) {
	const n = 64
	mt := newMaskTable(n, func(_, pos int) bool { return pos < 3 }, ckf.LaneCount)
	got := mt.search(ckf.LaneMask, ckf.DefaultVerificationWindow, nil)
	for l, d := range got {
		if d != 3 {
			t.Fatalf("lane %d depth %d, want 3", l, d)
		}
	}
	for pos, c := range mt.counts {
		if c > 2 {
			t.Fatalf("position %d probed %d times (16 lanes must share each probe)", pos, c)
		}
	}
}

func TestWindowEightRepairsHolesAtOffsetsTwoThroughEight(t *testing.T) {
	const n = 33
	for offset := 2; offset <= 8; offset++ {
		hole := n - offset
		mt := newMaskTable(n, func(_, pos int) bool { return pos != hole }, 1)
		if got := mt.search(1, 1, nil)[0]; got != n {
			t.Fatalf("hole %d, window 1: depth %d, want %d", hole, got, n)
		}
		var stats searchStats
		if got := mt.search(1, 8, &stats)[0]; got != uint32(hole) {
			t.Fatalf("hole %d, window 8: depth %d, want %d", hole, got, hole)
		}
		if got := mt.linear(1)[0]; got != uint32(hole) {
			t.Fatalf("hole %d: linear %d", hole, got)
		}
	}
}

func TestHolesBeyondTheTerminalWindowRemainAdvisory(t *testing.T) {
	const n, hole = 33, 24
	mt := newMaskTable(n, func(_, pos int) bool { return pos != hole }, 1)
	if got := mt.search(1, 8, nil)[0]; got != n {
		t.Fatalf("window 8: depth %d, want %d (hole at offset 9 is advisory)", got, n)
	}
	if got := mt.linear(1)[0]; got != hole {
		t.Fatalf("linear: depth %d, want %d", got, hole)
	}
}

func TestTerminalBranchFallbackGroupsLanesAndRepairsAClippedFalsePivot(t *testing.T) {
	const n = 65
	hit := func(_, pos int) bool { return pos < 40 || pos == 48 }
	mt := newMaskTable(n, hit, 2)
	var stats searchStats
	got := mt.search(0b11, 2, &stats)
	lin := mt.linear(0b11)
	if got[0] != 40 || got[1] != 40 || lin[0] != 40 || lin[1] != 40 {
		t.Fatalf("depths %v, linear %v; want 40 for both lanes", got[:2], lin[:2])
	}
	if mt.counts[17] != 0 {
		t.Fatalf("position 17 probed %d times", mt.counts[17])
	}
	for pos := 33; pos <= 40; pos++ {
		if mt.counts[pos] != 1 {
			t.Fatalf("position %d probed %d times, want exactly once", pos, mt.counts[pos])
		}
	}
	want := searchStats{leftEdgeLanes: 2, activatedLanes: 2, fallbackProbes: 8, fallbackLaneHits: 16, provenanceSkips: 0}
	if stats != want {
		t.Fatalf("fallback stats %+v, want %+v", stats, want)
	}
	// Without the fallback (§18.9) the window alone stops at its left edge.
	if got := withoutFallback(mt, 0b11, 2); got[0] != 47 || got[1] != 47 {
		t.Fatalf("without fallback: %v, want [47 47]", got[:2])
	}
}

// withoutFallback is the §18.9 "without the fallback" variant.
func withoutFallback(mt *maskTable, initial uint16, window int) [ckf.LaneCount]uint32 {
	var d [ckf.LaneCount]uint32
	runPrefixSearch(len(mt.masks), initial, window, funcProber(mt.probe), &d, false, nil)
	return d
}

func TestTerminalBranchFallbackSkipsSecondOrderProvenanceWithoutAnInvertedRange(t *testing.T) {
	const n = 65
	mt := newMaskTable(n, func(_, pos int) bool { return pos < 41 || (pos >= 48 && pos <= 51) }, 1)
	var stats searchStats
	if got := mt.search(1, 8, &stats)[0]; got != 44 {
		t.Fatalf("depth %d, want 44", got)
	}
	if got := mt.linear(1)[0]; got != 41 {
		t.Fatalf("linear %d, want 41", got)
	}
	want := searchStats{leftEdgeLanes: 1, activatedLanes: 0, provenanceSkips: 1}
	if stats != want {
		t.Fatalf("fallback stats %+v, want %+v", stats, want)
	}
}

func TestTerminalBranchFallbackDocumentsAFalsePredecessorResidual(t *testing.T) {
	const n = 65
	mt := newMaskTable(n, func(_, pos int) bool { return pos < 20 || pos == 32 || pos == 48 }, 1)
	var stats searchStats
	if got := mt.search(1, 8, &stats)[0]; got != 33 {
		t.Fatalf("depth %d, want 33", got)
	}
	if got := mt.linear(1)[0]; got != 20 {
		t.Fatalf("linear %d, want 20", got)
	}
	if stats.activatedLanes != 1 || stats.fallbackProbes != 1 {
		t.Fatalf("fallback stats %+v, want 1 activated lane and 1 probe", stats)
	}
}

func TestSearchEdgeCases(t *testing.T) {
	var d [ckf.LaneCount]uint32
	d[5] = 9
	findPrefixDepths(0, ckf.LaneMask, 2, func(int) uint16 { t.Fatal("probed an empty query"); return 0 }, &d)
	if d != ([ckf.LaneCount]uint32{}) {
		t.Fatalf("n=0: %v", d)
	}
	// Position 0 missing everywhere: all zero, one probe.
	calls := 0
	findPrefixDepths(10, ckf.LaneMask, 2, func(int) uint16 { calls++; return 0 }, &d)
	if d != ([ckf.LaneCount]uint32{}) || calls != 1 {
		t.Fatalf("miss at 0: %v after %d probes", d, calls)
	}
	// Lanes outside the initial mask stay zero even when they hit.
	findPrefixDepths(10, 0b10, 2, func(int) uint16 { return ckf.LaneMask }, &d)
	want := [ckf.LaneCount]uint32{1: 10}
	if d != want {
		t.Fatalf("masked lanes: %v, want %v", d, want)
	}
	// n = 1.
	findPrefixDepths(1, 1, 8, func(int) uint16 { return 1 }, &d)
	if d[0] != 1 {
		t.Fatalf("n=1: depth %d", d[0])
	}
}

// TestSearchMatchesLinearOnMonotonePrefixes: on prefix-monotone lanes the
// search equals the linear reference for every window.
func TestSearchMatchesLinearOnMonotonePrefixes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 3000 {
		n := 1 + rng.IntN(300)
		var depth [ckf.LaneCount]int
		for l := range depth {
			switch rng.IntN(4) {
			case 0:
				depth[l] = 0
			case 1:
				depth[l] = n
			default:
				depth[l] = rng.IntN(n + 1)
			}
		}
		initial := uint16(rng.Uint32())
		window := 1 + rng.IntN(ckf.MaxVerificationWindow)
		mt := newMaskTable(n, func(l, pos int) bool { return pos < depth[l] }, ckf.LaneCount)
		got := mt.search(initial, window, nil)
		if want := mt.linear(initial); got != want {
			t.Fatalf("iter %d n=%d window=%d initial=%#x depths %v: got %v, want %v", iter, n, window, initial, depth, got, want)
		}
	}
}

// TestSearchNeverReportsFalseNegatives: with planted false positives (hits
// beyond a lane's true prefix, never holes inside it) the search may inflate
// a depth but never reports less than the true prefix.
func TestSearchNeverReportsFalseNegatives(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 3000 {
		n := 1 + rng.IntN(300)
		var depth [ckf.LaneCount]int
		for l := range depth {
			depth[l] = rng.IntN(n + 1)
		}
		rate := rng.Float64() * 0.5
		window := 1 + rng.IntN(ckf.MaxVerificationWindow)
		mt := newMaskTable(n, func(l, pos int) bool { return pos < depth[l] || rng.Float64() < rate }, ckf.LaneCount)
		got := mt.search(ckf.LaneMask, window, nil)
		lin := mt.linear(ckf.LaneMask)
		for l := range ckf.LaneCount {
			if got[l] < lin[l] {
				t.Fatalf("iter %d lane %d: depth %d below the linear depth %d (true prefix %d)", iter, l, got[l], lin[l], depth[l])
			}
			if int(got[l]) > n {
				t.Fatalf("iter %d lane %d: depth %d beyond n=%d", iter, l, got[l], n)
			}
		}
	}
}

func TestSearchDoesNotAllocate(t *testing.T) {
	mt := newMaskTable(512, func(l, pos int) bool { return pos < 30*l+5 || pos == 400 }, ckf.LaneCount)
	masks := mt.masks
	probe := funcProber(func(pos int) uint16 { return masks[pos] })
	var d [ckf.LaneCount]uint32
	var stats searchStats
	allocs := testing.AllocsPerRun(100, func() {
		runPrefixSearch(len(masks), ckf.LaneMask, 8, probe, &d, true, &stats)
	})
	if allocs != 0 {
		t.Fatalf("search allocates %.1f times per run", allocs)
	}
}

// Sixteen lanes whose verification windows are all disjoint fill every
// verification group (16 lanes times a window of 8) and still verify each
// lane's depth.
func TestSearchVerifiesSixteenDisjointFullWindows(t *testing.T) {
	const window = ckf.MaxVerificationWindow
	n := ckf.LaneCount*window + 5
	depth := func(lane int) int { return window * (lane + 1) }
	mt := newMaskTable(n, func(lane, pos int) bool { return pos < depth(lane) }, ckf.LaneCount)
	got := mt.search(ckf.LaneMask, window, nil)
	for l := range ckf.LaneCount {
		if got[l] != uint32(depth(l)) {
			t.Fatalf("lane %d: depth %d, want %d (all %v)", l, got[l], depth(l), got)
		}
	}
}

// Under the weak-read contract a row can change between two probes. When
// the binary search's last predecessor is the window's left edge itself and
// misses on re-verification, the fallback counts a provenance skip (the
// predecessor is inside the window) and scans nothing.
func TestTerminalBranchFallbackCountsAPredecessorAtTheLeftEdgeAsProvenance(t *testing.T) {
	const n, window = 16, 2
	probes := map[int]int{}
	probe := func(pos int) uint16 {
		probes[pos]++
		if pos == 6 && probes[pos] > 1 { // position 6 is retired after its binary probe
			return 0
		}
		if pos < 8 {
			return 1
		}
		return 0
	}
	var d [ckf.LaneCount]uint32
	var stats searchStats
	runPrefixSearch(n, 1, window, funcProber(probe), &d, true, &stats)
	if d[0] != 6 {
		t.Fatalf("depth %d, want 6", d[0])
	}
	want := searchStats{leftEdgeLanes: 1, provenanceSkips: 1}
	if stats != want {
		t.Fatalf("fallback stats %+v, want %+v", stats, want)
	}
}

// touchProber records prefetches only.
type touchProber struct{ touched []int }

func (*touchProber) probe(int, uint16) uint16     { return 0 }
func (p *touchProber) prefetch(pos int, _ uint16) { p.touched = append(p.touched, pos) }

// binaryMidpoints collects every midpoint a binary search of (lo, hi) can
// probe in its first rounds rounds, over all answers.
func binaryMidpoints(lo, hi, rounds int, into map[int]bool) {
	if rounds == 0 || hi-lo <= 1 {
		return
	}
	mid := lo + (hi-lo)/2
	into[mid] = true
	binaryMidpoints(lo, mid, rounds-1, into)
	binaryMidpoints(mid, hi, rounds-1, into)
}

// touchSubtree requests exactly the midpoints the binary search may probe in
// its next levels rounds, each once: nothing the search will not read.
func TestTouchSubtreeRequestsExactlyTheNextRoundsMidpoints(t *testing.T) {
	for lo := range 6 {
		for hi := lo; hi <= lo+40; hi++ {
			for levels := range 4 {
				var p touchProber
				touchSubtree(&p, lo, hi, levels, 1)
				want := map[int]bool{}
				binaryMidpoints(lo, hi, levels, want)
				got := map[int]bool{}
				for _, pos := range p.touched {
					if got[pos] {
						t.Fatalf("(%d, %d) levels %d: %d touched twice: %v", lo, hi, levels, pos, p.touched)
					}
					got[pos] = true
				}
				if len(got) != len(want) || len(p.touched) > 1<<levels-1 {
					t.Fatalf("(%d, %d) levels %d: touched %v, want the midpoints %v", lo, hi, levels, p.touched, want)
				}
				for pos := range want {
					if !got[pos] {
						t.Fatalf("(%d, %d) levels %d: touched %v, want the midpoints %v", lo, hi, levels, p.touched, want)
					}
				}
			}
		}
	}
}
