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

// Memory-level parallelism of the search (latency hints only: the probe
// sequence, and so every result, is the plain search's).
const (
	// expLookahead is how many exponential positions are touched ahead of
	// the one being probed.
	expLookahead = 3
	// specLevels is the depth of the binary-search subtree touched at once:
	// 3 levels, 7 midpoints.
	specLevels = 3
)

// touchSubtree touches the midpoints the binary search of (lo, hi) may probe
// in its next levels rounds, whatever the answers: 2^levels - 1 positions at
// most, breadth first so the nearest rounds' rows are requested first.
func touchSubtree(p prober, lo, hi, levels int, need uint16) {
	var queue [1 << specLevels][2]int
	queue[0] = [2]int{lo, hi}
	cur := queue[:1]
	for range levels {
		var next [1 << specLevels][2]int
		k := 0
		for _, iv := range cur {
			if iv[1]-iv[0] <= 1 {
				continue
			}
			mid := iv[0] + (iv[1]-iv[0])/2
			p.prefetch(mid, need)
			next[k], next[k+1] = [2]int{iv[0], mid}, [2]int{mid, iv[1]}
			k += 2
		}
		if k == 0 {
			return
		}
		queue = next
		cur = queue[:k]
	}
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

// runPrefixSearch runs the exponential, grouped binary, verification and
// terminal-branch-fallback phases of spec §11. It assumes prefix
// monotonicity; false positives may inflate a depth (advisory), while a
// present prefix is never reported shorter. All state lives in fixed-size
// arrays: no allocation. fallback false reproduces the older search without
// the terminal-branch fallback (tests); stats may be nil.
func runPrefixSearch(n int, initialMask uint16, window int, p prober, depths *[ckf.LaneCount]uint32, fallback bool, stats *searchStats) {
	*depths = [ckf.LaneCount]uint32{}
	if n <= 0 {
		return
	}
	// The verification groups are sized for a window of at most 8.
	window = min(max(window, 1), ckf.MaxVerificationWindow)
	active := initialMask & ckf.LaneMask
	active &= p.probe(0, active)
	if active == 0 {
		return
	}

	// Per lane: position 0..lower is believed present, upper is the first
	// position believed missing, pred is lower's predecessor.
	var lower, pred, upper [ckf.LaneCount]int
	for m := active; m != 0; m &= m - 1 {
		upper[lanesOf(m)] = n
	}

	// Exponential phase: 1, 2, 4, ... until every sampling lane has missed.
	// Its positions do not depend on the answers, so the phase touches
	// expLookahead positions ahead of the probe: their misses overlap, and
	// a query that stops early wastes at most a few touches.
	sampling := active
	ahead := 1
	for range expLookahead {
		if ahead >= n {
			break
		}
		p.prefetch(ahead, sampling)
		ahead *= 2
	}
	for pos := 1; pos < n && sampling != 0; pos *= 2 {
		if ahead < n {
			p.prefetch(ahead, sampling)
			ahead *= 2
		}
		hits := p.probe(pos, sampling)
		for m := sampling; m != 0; m &= m - 1 {
			l := lanesOf(m)
			if hits&(1<<l) != 0 {
				pred[l], lower[l] = lower[l], pos
			} else {
				upper[l] = pos
			}
		}
		sampling &= hits
	}

	// Binary phase: lanes sharing a midpoint share one probe. The probe
	// sequence is the plain binary search's, so results are unchanged; only
	// the touches that hide memory latency differ. When lanes disagree, a
	// round touches its distinct midpoints together (their misses overlap;
	// at four cache lines per position, five positions already fill the
	// core's ~20 outstanding misses). When every searching lane shares one
	// interval, the round instead touches the next specLevels rounds'
	// midpoints at once (up to 7 positions), so one miss latency pays for
	// three rounds, as a k-ary search's would.
	var groupPos [ckf.LaneCount]int
	var groupLanes [ckf.LaneCount]uint16
	covered := 0 // rounds still covered by a touched subtree (single interval only)
	for {
		k := 0
		shared := true // every searching lane has the same interval
		first := -1
		var searching uint16
		for m := active; m != 0; m &= m - 1 {
			l := lanesOf(m)
			if upper[l]-lower[l] <= 1 {
				continue
			}
			searching |= 1 << l
			if first < 0 {
				first = l
			} else if lower[l] != lower[first] || upper[l] != upper[first] {
				shared = false
			}
			mid := lower[l] + (upper[l]-lower[l])/2
			g := 0
			for g < k && groupPos[g] != mid {
				g++
			}
			if g == k {
				groupPos[k], groupLanes[k] = mid, 0
				k++
			}
			groupLanes[g] |= 1 << l
		}
		if k == 0 {
			break
		}
		switch {
		case !shared:
			covered = 0
			for g := range k {
				p.prefetch(groupPos[g], groupLanes[g])
			}
		case covered == 0:
			touchSubtree(p, lower[first], upper[first], specLevels, searching)
			covered = specLevels
		}
		if covered > 0 {
			covered--
		}
		for g := range k {
			mid := groupPos[g]
			hits := p.probe(mid, groupLanes[g])
			for m := groupLanes[g]; m != 0; m &= m - 1 {
				l := lanesOf(m)
				if hits&(1<<l) != 0 {
					pred[l], lower[l] = lower[l], mid
				} else {
					upper[l] = mid
				}
			}
		}
	}

	// Verification window: re-check the last window positions before each
	// tentative depth, in ascending position order, lanes grouped.
	var start [ckf.LaneCount]int
	first := n
	for m := active; m != 0; m &= m - 1 {
		l := lanesOf(m)
		depths[l] = saturate32(upper[l])
		start[l] = max(0, upper[l]-window)
		first = min(first, start[l])
	}
	var vPos [maxVerificationGroups]int
	var vLanes [maxVerificationGroups]uint16
	k := 0
	for pos := first; ; {
		var lanes uint16
		next := math.MaxInt
		for m := active; m != 0; m &= m - 1 {
			l := lanesOf(m)
			if start[l] <= pos && pos < upper[l] {
				lanes |= 1 << l
			}
			if c := max(start[l], pos+1); c < upper[l] && c < next {
				next = c
			}
		}
		if lanes != 0 && k < maxVerificationGroups {
			vPos[k], vLanes[k] = pos, lanes
			k++
			p.prefetch(pos, lanes)
		}
		if next == math.MaxInt {
			break
		}
		pos = next
	}
	verifying := active
	var leftEdge uint16
	for g := 0; g < k && verifying != 0; g++ {
		participants := vLanes[g] & verifying
		if participants == 0 {
			continue
		}
		pos := vPos[g]
		misses := participants &^ p.probe(pos, participants)
		for m := misses; m != 0; m &= m - 1 {
			l := lanesOf(m)
			depths[l] = saturate32(pos)
			if pos == start[l] {
				leftEdge |= 1 << l
			}
		}
		verifying &^= misses
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
		if pred[l] >= start[l] {
			// The predecessor is itself inside the window: a second-order
			// provenance the scan would have to run backwards for.
			if stats != nil {
				stats.provenanceSkips++
			}
			continue
		}
		if pred[l]+1 >= start[l] {
			continue
		}
		next[l] = pred[l] + 1
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
