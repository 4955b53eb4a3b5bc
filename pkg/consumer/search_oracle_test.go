package consumer

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// referencePrefixSearch is the per-lane search as it was before the memory
// schedule (prefetches) and the lane groups were added, frozen as the
// oracle: the production search must read every lane at the same positions
// in the same order and so return bit-identical depths, whatever the table
// holds. Each probe names the lanes whose bits it uses (need).
func referencePrefixSearch(n int, initialMask uint16, window int, p prober, depths *[ckf.LaneCount]uint32, fallback bool, stats *searchStats) {
	*depths = [ckf.LaneCount]uint32{}
	if n <= 0 {
		return
	}
	// The verification groups are sized for a window of at most 8.
	window = min(max(window, 1), ckf.MaxVerificationWindow)
	active := initialMask & ckf.LaneMask & p.probe(0, initialMask&ckf.LaneMask)
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
	sampling := active
	if n > 1 {
		p.prefetch(1, ckf.LaneMask)
	}
	for pos := 1; pos < n && sampling != 0; pos *= 2 {
		if 2*pos < n {
			p.prefetch(2*pos, ckf.LaneMask)
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

	// Binary phase: lanes sharing a midpoint share one probe.
	var groupPos [ckf.LaneCount]int
	var groupLanes [ckf.LaneCount]uint16
	for {
		k := 0
		for m := active; m != 0; m &= m - 1 {
			l := lanesOf(m)
			if upper[l]-lower[l] <= 1 {
				continue
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
		for g := range k {
			p.prefetch(groupPos[g], ckf.LaneMask)
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
			p.prefetch(pos, ckf.LaneMask)
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

// recordingProber answers from per-position masks and logs every probe,
// every touch, and when each position was first touched.
type recordingProber struct {
	masks     []uint16
	probes    []int
	laneReads [ckf.LaneCount][]int // per lane: the positions read for it, in order
	touches   []int
	touchedAt map[int]int // position → calls made before its first touch
	lateProbe []int       // positions probed before any touch of them
	// A memory model counting dependent round trips: a row requested at
	// round trip c arrives at c+1, and a probe of a row not yet arrived
	// waits for it (compute is free). waits is the round trips the search
	// waited for in all.
	arrives map[int]int
	waits   int
}

func (r *recordingProber) request(pos int) {
	if r.arrives == nil {
		r.arrives = map[int]int{}
	}
	if _, ok := r.arrives[pos]; !ok {
		r.arrives[pos] = r.waits + 1
	}
}

// probe answers need's lanes only, like a table reading need's cache lines
// alone: a search that reads a lane it did not ask for sees a miss there.
func (r *recordingProber) probe(pos int, need uint16) uint16 {
	if _, ok := r.touchedAt[pos]; !ok {
		r.lateProbe = append(r.lateProbe, pos)
	}
	r.request(pos)
	r.waits = max(r.waits, r.arrives[pos])
	r.probes = append(r.probes, pos)
	for m := need; m != 0; m &= m - 1 {
		l := lanesOf(m)
		r.laneReads[l] = append(r.laneReads[l], pos)
	}
	return r.masks[pos] & need
}

func (r *recordingProber) prefetch(pos int, _ uint16) {
	if r.touchedAt == nil {
		r.touchedAt = map[int]int{}
	}
	if _, ok := r.touchedAt[pos]; !ok {
		r.touchedAt[pos] = len(r.probes) + len(r.touches)
	}
	r.touches = append(r.touches, pos)
	r.request(pos)
}

// randomLaneMasks draws a query of random length whose lanes hold random
// prefixes, plus false positives (hits past the prefix) and, sometimes,
// holes inside it (a lane mid-delta under the weak-read contract).
func randomLaneMasks(rng *rand.Rand) []uint16 {
	n := 1 + rng.IntN(600)
	var depth [ckf.LaneCount]int
	for l := range depth {
		switch rng.IntN(5) {
		case 0:
			depth[l] = 0
		case 1, 2:
			depth[l] = n
		default:
			depth[l] = rng.IntN(n + 1)
		}
	}
	fp := rng.Float64() * rng.Float64() * 0.3
	holes := 0.0
	if rng.IntN(4) == 0 {
		holes = rng.Float64() * 0.05
	}
	masks := make([]uint16, n)
	for pos := range masks {
		for l := range ckf.LaneCount {
			in := pos < depth[l]
			if (in && rng.Float64() >= holes) || (!in && rng.Float64() < fp) {
				masks[pos] |= 1 << l
			}
		}
	}
	return masks
}

// TestSearchMakesTheReferenceProbesInOrder is the randomized oracle of the
// grouped search and its memory schedule: over tables with false positives
// and holes, every window and initial mask, the search returns the
// reference's depths and fallback statistics and reads every lane at
// exactly the reference's positions in the reference's order (so even under
// concurrent writes each lane sees the reads the reference would make);
// touches stay inside the query.
func TestSearchMakesTheReferenceProbesInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for iter := range 20000 {
		masks := randomLaneMasks(rng)
		n := len(masks)
		initial := uint16(rng.Uint32())
		if rng.IntN(2) == 0 {
			initial = ckf.LaneMask
		}
		window := 1 + rng.IntN(ckf.MaxVerificationWindow)
		fallback := rng.IntN(8) != 0

		got := &recordingProber{masks: masks}
		var gd [ckf.LaneCount]uint32
		var gs searchStats
		runPrefixSearch(n, initial, window, got, &gd, fallback, &gs)

		want := &recordingProber{masks: masks}
		var wd [ckf.LaneCount]uint32
		var ws searchStats
		referencePrefixSearch(n, initial, window, want, &wd, fallback, &ws)

		if gd != wd {
			t.Fatalf("iter %d (n=%d window=%d initial=%#x fallback=%v): depths %v, reference %v", iter, n, window, initial, fallback, gd, wd)
		}
		if gs != ws {
			t.Fatalf("iter %d (n=%d window=%d): fallback stats %+v, reference %+v", iter, n, window, gs, ws)
		}
		for l := range ckf.LaneCount {
			if !slices.Equal(got.laneReads[l], want.laneReads[l]) {
				t.Fatalf("iter %d (n=%d window=%d): lane %d read at %v, reference %v", iter, n, window, l, got.laneReads[l], want.laneReads[l])
			}
		}
		for _, pos := range got.touches {
			if pos < 0 || pos >= n {
				t.Fatalf("iter %d: touched position %d outside 0..%d", iter, pos, n-1)
			}
		}
	}
}

// TestSearchTouchesEveryRowBeforeProbingIt: on lanes present to the end of
// a 128-block query, every probe (position 0, exponential, binary,
// verification) reads a row touched earlier, and the six binary rounds
// cost three subtree touches of 3 positions, not six dependent misses.
func TestSearchTouchesEveryRowBeforeProbingIt(t *testing.T) {
	masks := make([]uint16, 128)
	for i := range masks {
		masks[i] = ckf.LaneMask
	}
	r := &recordingProber{masks: masks}
	var d [ckf.LaneCount]uint32
	runPrefixSearch(len(masks), ckf.LaneMask, ckf.DefaultVerificationWindow, r, &d, true, nil)
	if d[0] != 128 || d[15] != 128 {
		t.Fatalf("depths %v, want 128", d)
	}
	if len(r.lateProbe) != 0 {
		t.Fatalf("positions %v probed before being touched (probes %v, touches %v)", r.lateProbe, r.probes, r.touches)
	}
	// 0, then 1, 2, 4, ..., 64: 8 touches before the first probe; (64,
	// 128): three subtrees shared by all 16 lanes; the window: 126 and 127
	// again.
	if len(r.touches) != 8+3*3+2 {
		t.Fatalf("%d touches, want 19: %v", len(r.touches), r.touches)
	}
	// Calls before 64's touch: the touches of 0, 1, ..., 32 and no probe.
	if at := r.touchedAt[64]; at != 7 {
		t.Fatalf("position 64 touched after %d calls, want after the 7 touches of 0..32, before any probe", at)
	}
}

// TestSearchRoundTrips pins the search's dependent round trips in the
// memory model of recordingProber (compute free, a row requested at round
// trip c arriving at c+1): on a 128-block query, position 0 with the
// exponential rows costs one, each subtree of two binary levels one, and
// the verification one more when its rows were not read before. Lanes all
// at one depth: at most five, exactly four when every lane matches the
// whole query (its window was read by the binary phase). 16 lanes at
// random depths as in BenchmarkFindPrefixMatches (uniform in 0..512,
// clipped): at most five, and the mean (4.72 for this seed) must not grow.
func TestSearchRoundTrips(t *testing.T) {
	roundTrips := func(masks []uint16) (int, *recordingProber) {
		r := &recordingProber{masks: masks}
		var d [ckf.LaneCount]uint32
		runPrefixSearch(len(masks), ckf.LaneMask, ckf.DefaultVerificationWindow, r, &d, true, nil)
		return r.waits, r
	}
	for depth := 0; depth <= 128; depth++ {
		masks := make([]uint16, 128)
		for i := range depth {
			masks[i] = ckf.LaneMask
		}
		waits, r := roundTrips(masks)
		if waits > 5 || depth == 128 && waits != 4 {
			t.Errorf("depth %d: %d dependent round trips, want at most 5, and 4 at depth 128 (probes %v, touches %v)", depth, waits, r.probes, r.touches)
		}
	}
	rng := rand.New(rand.NewPCG(5, 5))
	const queries = 2000
	total := 0
	for iter := range queries {
		masks := make([]uint16, 128)
		for l := range ckf.LaneCount {
			for i := range min(rng.IntN(513), 128) {
				masks[i] |= 1 << l
			}
		}
		waits, r := roundTrips(masks)
		if waits > 5 {
			t.Fatalf("query %d: %d dependent round trips, want at most 5 (probes %v, touches %v)", iter, waits, r.probes, r.touches)
		}
		total += waits
	}
	mean := float64(total) / queries
	t.Logf("%.3f dependent round trips per query on average", mean)
	if mean > 4.75 {
		t.Errorf("%.3f dependent round trips per query on average, want at most 4.75", mean)
	}
}
