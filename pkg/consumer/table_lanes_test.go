package consumer

import (
	"math/rand/v2"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// TestProbeLanesAnswersEveryNeededLane: reading only the cache lines of
// the needed lanes gives the full probe's answer on every needed lane
// (and nothing on lanes outside the lines read).
func TestProbeLanesAnswersEveryNeededLane(t *testing.T) {
	const buckets = 64
	tb, err := newTable(buckets)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(31, 32))
	for bk := range uint64(buckets) {
		for l := range ckf.LaneCount {
			var w uint64
			for s := range int(ckf.SlotsPerBucket) {
				if rng.IntN(3) > 0 {
					w = ckf.WithSlot(w, s, uint16(1+rng.IntN(6))) // few fingerprints: many hits
				}
			}
			tb.StoreImage(bk, l, w)
		}
	}
	for range 20000 {
		p := ckf.Probe{Fingerprint: uint16(1 + rng.IntN(6)), BucketA: uint32(rng.IntN(buckets)), BucketB: uint32(rng.IntN(buckets))}
		need := uint16(rng.Uint32())
		switch rng.IntN(3) {
		case 0:
			need &= 0x00ff
		case 1:
			need &= 0xff00
		}
		full := tb.Probe(p)
		got := tb.probeLanes(p, need)
		if got&need != full&need {
			t.Fatalf("need %016b: probeLanes %016b, Probe %016b", need, got, full)
		}
		if lo, hi := laneHalves(need); got&^(uint16(1<<hi-1)&^uint16(1<<lo-1)) != 0 {
			t.Fatalf("need %016b: answered lanes outside [%d,%d): %016b", need, lo, hi, got)
		}
	}
}
