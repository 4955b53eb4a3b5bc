package consumer

import (
	"math"
	"math/bits"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// maxVerificationGroups bounds the verification positions: 16 lanes times a
// window of at most 8.
const maxVerificationGroups = ckf.LaneCount * ckf.MaxVerificationWindow

// prober is what the search needs from the table: the lane hit mask of a
// position and a latency hint with no semantic effect. need names the lanes
// whose bits the caller reads: a prober may leave the other bits zero (the
// table then reads only the cache lines holding need's lanes).
type prober interface {
	probe(pos int, need uint16) uint16
	prefetch(pos int, need uint16)
}

// funcProber adapts a plain probe function (tests, oracles) to prober.
type funcProber func(pos int) uint16

func (f funcProber) probe(pos int, _ uint16) uint16 { return f(pos) }
func (funcProber) prefetch(int, uint16)             {}

// searchStats counts the terminal-branch fallback's work, for tests.
type searchStats struct {
	leftEdgeLanes    int // lanes whose first window miss was at the window's left edge
	activatedLanes   int // lanes that scanned a non-empty fallback range
	provenanceSkips  int // lanes skipped because their predecessor lies inside the window
	fallbackProbes   int // probe calls made by the fallback
	fallbackLaneHits int // lane probes made by the fallback (lanes per call, summed)
}

// findPrefixDepths is spec §11's find_prefix_depths for 16 lanes: the depth
// of every lane of initialMask whose position 0 hits, zero for the others.
func findPrefixDepths(n int, initialMask uint16, window int, probe func(pos int) uint16, depths *[ckf.LaneCount]uint32) {
	searchPrefixDepths(n, initialMask, window, funcProber(probe), depths)
}

// searchPrefixDepths is the production search over a table prober.
func searchPrefixDepths(n int, initialMask uint16, window int, p prober, depths *[ckf.LaneCount]uint32) {
	runPrefixSearch(n, initialMask, window, p, depths, true, nil)
}

// specLevels is the depth of the binary-search subtree a group requests at
// once (a latency hint only: every lane's reads, and so every result, are
// the plain search's). Two levels (3 midpoints) measured best on the
// 16-lane, 4,194,304-bucket, 128-block cold benchmark: p50 4.0 µs against
// 4.3 µs for three levels (7 midpoints, four of them prepared in vain) and
// 4.6 µs for four.
const specLevels = 2

// touchSubtree requests the midpoints the binary search of (lo, hi) may
// probe in its next levels rounds, whatever the answers: 2^levels - 1
// positions at most.
func touchSubtree(p prober, lo, hi, levels int, need uint16) {
	if levels == 0 || hi-lo <= 1 {
		return
	}
	mid := lo + (hi-lo)/2
	p.prefetch(mid, need)
	touchSubtree(p, lo, mid, levels-1, need)
	touchSubtree(p, mid, hi, levels-1, need)
}

// lanesOf returns the lowest lane of a non-empty mask; the &15 lets the
// compiler drop bounds checks on [16] arrays.
func lanesOf(m uint16) int { return bits.TrailingZeros16(m) & 15 }

func saturate32(v int) uint32 {
	if v > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}

// laneGroup is a set of lanes in the same search state. Lanes that share an
// interval share its history too (the exponential phase gives every lane
// that misses at the same position the same lower, pred and upper, and each
// binary round halves every interval once), so the search keeps one state
// per group instead of one per lane and splits a group when a probe tells
// its lanes apart.
type laneGroup struct {
	lanes              uint16
	lower, pred, upper int
	// covered is the number of binary rounds whose midpoints a subtree
	// prefetch has already requested for this interval.
	covered int
}

// runPrefixSearch runs the exponential, grouped binary, verification and
// terminal-branch-fallback phases of spec §11. It assumes prefix
// monotonicity; false positives may inflate a depth (advisory), while a
// present prefix is never reported shorter. All state lives in fixed-size
// arrays: no allocation. fallback false reproduces the older search without
// the terminal-branch fallback (tests); stats may be nil.
//
// Every lane reads exactly the positions, in exactly the order, of the
// per-lane formulation of spec §11 (search_oracle_test.go keeps the
// pre-grouping search as the oracle); lanes are only batched into shared
// probes differently, and prefetches, which change no result, are added.
func runPrefixSearch(n int, initialMask uint16, window int, p prober, depths *[ckf.LaneCount]uint32, fallback bool, stats *searchStats) {
	*depths = [ckf.LaneCount]uint32{}
	if n <= 0 {
		return
	}
	// The verification groups are sized for a window of at most 8.
	window = min(max(window, 1), ckf.MaxVerificationWindow)
	active := initialMask & ckf.LaneMask
	// Position 0 and every exponential position are requested before the
	// first probe: their positions do not depend on any answer, so position
	// 0's miss overlaps the hashing and the other requests instead of
	// costing a round trip of its own. A query that misses at 0 for every
	// lane wastes those requests.
	p.prefetch(0, active)
	for ahead := 1; ahead < n; ahead *= 2 {
		p.prefetch(ahead, active)
	}
	active &= p.probe(0, active)
	if active == 0 {
		return
	}

	// Groups partition active; there are never more than 16.
	var groups [ckf.LaneCount]laneGroup
	ng := 0

	// Exponential phase: 1, 2, 4, ... until every sampling lane has missed
	// (its rows were requested above). The lanes still sampling share lower
	// and pred; those missing at pos form a group.
	sampling := active
	lower, pred := 0, 0
	for pos := 1; pos < n && sampling != 0; pos *= 2 {
		hits := p.probe(pos, sampling)
		if misses := sampling &^ hits; misses != 0 {
			groups[ng&15] = laneGroup{lanes: misses, lower: lower, pred: pred, upper: pos}
			ng++
		}
		sampling &= hits
		pred, lower = lower, pos
	}
	if sampling != 0 {
		groups[ng&15] = laneGroup{lanes: sampling, lower: lower, pred: pred, upper: n}
		ng++
	}

	// Binary phase: every group probes its midpoint once per round and
	// splits into the lanes that hit and those that missed. A group whose
	// interval no earlier prefetch covers first requests the next
	// specLevels rounds' midpoints at once (up to 7 positions, for its lanes
	// only), so one miss latency pays for three rounds, as a k-ary search's
	// would, while the probe order stays binary.
	for {
		round := ng
		searching := false
		for gi := range round {
			g := &groups[gi&15]
			if g.upper-g.lower <= 1 {
				continue
			}
			searching = true
			if g.covered == 0 {
				touchSubtree(p, g.lower, g.upper, specLevels, g.lanes)
				g.covered = specLevels
			}
		}
		if !searching {
			break
		}
		for gi := range round {
			g := &groups[gi&15]
			if g.upper-g.lower <= 1 {
				continue
			}
			g.covered--
			mid := g.lower + (g.upper-g.lower)/2
			hits := p.probe(mid, g.lanes) & g.lanes
			switch misses := g.lanes &^ hits; {
			case misses == g.lanes:
				g.upper = mid
			case misses == 0:
				g.pred, g.lower = g.lower, mid
			default:
				groups[ng&15] = laneGroup{lanes: misses, lower: g.lower, pred: g.pred, upper: mid, covered: g.covered}
				ng++
				g.lanes = hits
				g.pred, g.lower = g.lower, mid
			}
		}
	}

	// Verification window: re-check the last window positions before each
	// group's tentative depth, in ascending order; a lane's depth becomes
	// its first miss there. The rows are requested for every group first.
	for gi := range ng {
		g := &groups[gi&15]
		for pos := max(0, g.upper-window); pos < g.upper; pos++ {
			p.prefetch(pos, g.lanes)
		}
	}
	var start, predOf [ckf.LaneCount]int
	var leftEdge uint16
	for gi := range ng {
		g := &groups[gi&15]
		first := max(0, g.upper-window)
		d := saturate32(g.upper)
		for m := g.lanes; m != 0; m &= m - 1 {
			l := lanesOf(m)
			depths[l] = d
			start[l], predOf[l] = first, g.pred
		}
		verifying := g.lanes
		for pos := first; pos < g.upper && verifying != 0; pos++ {
			misses := verifying &^ p.probe(pos, verifying)
			if misses == 0 {
				continue
			}
			d := saturate32(pos)
			for m := misses; m != 0; m &= m - 1 {
				depths[lanesOf(m)] = d
			}
			if pos == first {
				leftEdge |= misses
			}
			verifying &^= misses
		}
	}
	if !fallback || leftEdge == 0 {
		return
	}

	// Terminal-branch fallback: a miss at the window's left edge leaves the
	// gap between the last binary predecessor and the window unexamined;
	// scan it forward, one probe per distinct position across lanes.
	var next [ckf.LaneCount]int
	var scanning uint16
	for m := leftEdge; m != 0; m &= m - 1 {
		l := lanesOf(m)
		if stats != nil {
			stats.leftEdgeLanes++
		}
		if predOf[l] >= start[l] {
			// The predecessor is itself inside the window: a second-order
			// provenance the scan would have to run backwards for.
			if stats != nil {
				stats.provenanceSkips++
			}
			continue
		}
		if predOf[l]+1 >= start[l] {
			continue
		}
		next[l] = predOf[l] + 1
		scanning |= 1 << l
		if stats != nil {
			stats.activatedLanes++
		}
	}
	for scanning != 0 {
		pos := math.MaxInt
		var lanes uint16
		for m := scanning; m != 0; m &= m - 1 {
			l := lanesOf(m)
			switch {
			case next[l] < pos:
				pos, lanes = next[l], 1<<l
			case next[l] == pos:
				lanes |= 1 << l
			}
		}
		hits := p.probe(pos, lanes)
		if stats != nil {
			stats.fallbackProbes++
			stats.fallbackLaneHits += bits.OnesCount16(lanes)
		}
		for m := lanes; m != 0; m &= m - 1 {
			l := lanesOf(m)
			if hits&(1<<l) == 0 {
				depths[l] = saturate32(pos)
				scanning &^= 1 << l
				continue
			}
			next[l]++
			if next[l] >= start[l] {
				scanning &^= 1 << l
			}
		}
	}
}
