package bench

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

func smallScale() ScaleConfig {
	return ScaleConfig{Buckets: 1 << 10, HotQueries: 8, ColdQueries: 256, AccuracyQueries: 4000, Samples: 200, Seed: 1}
}

// TestScaleFixtureNeverUnderReports keeps the scale fixture honest on a
// small size: 16 DCs filled from the Mooncake trace to the format's target
// load, every trace query answered by the CKF and the exact index. The CKF
// may inflate a depth (a false positive) but never report less than the
// exact depth; inflation and wrong best DCs stay rare.
func TestScaleFixtureNeverUnderReports(t *testing.T) {
	rep, err := RunScale(context.Background(), smallScale())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lanes != 16 || rep.Buckets != 1<<10 {
		t.Fatalf("shape %d lanes × %d buckets", rep.Lanes, rep.Buckets)
	}
	// Each DC holds the target, 80% of 4 slots × 1024 buckets, give or
	// take its last request.
	if rep.BlocksPerDC != 1<<10*16/5 || rep.Memberships < 16*rep.BlocksPerDC || rep.Memberships > 16*(rep.BlocksPerDC+256) {
		t.Fatalf("%d memberships for 16 DCs of %d blocks", rep.Memberships, rep.BlocksPerDC)
	}
	if rep.Memberships != rep.CkfMemberships {
		t.Fatalf("exact index holds %d memberships, the producers %d: the sides saw different chains", rep.Memberships, rep.CkfMemberships)
	}
	if rep.UniqueBlocks == 0 || rep.UniqueBlocks > rep.Memberships {
		t.Fatalf("%d unique blocks for %d memberships", rep.UniqueBlocks, rep.Memberships)
	}
	if rep.CkfFailures != 0 {
		t.Fatalf("%d producer capacity failures at the target load", rep.CkfFailures)
	}
	a := rep.Accuracy
	if a.Queries != 4000 || a.Answers != 16*4000 {
		t.Fatalf("accuracy over %d queries / %d answers", a.Queries, a.Answers)
	}
	if a.Under != 0 {
		t.Fatalf("%d answers under the exact depth", a.Under)
	}
	if a.InflatedPct > 1 || a.WrongBestPct > 2 {
		t.Fatalf("inflated %.3f%%, wrong best %.3f%%", a.InflatedPct, a.WrongBestPct)
	}
	if a.InflatedFromZero > a.Inflated {
		t.Fatalf("%d of %d inflated answers from depth 0", a.InflatedFromZero, a.Inflated)
	}
	// 16-bit fingerprints in two buckets of 4 slots at 80% load: about 6.4
	// occupied slots per probe, a false-positive rate near 6.4/65535 ≈
	// 0.0098% (measured over 640,000 probes: a few dozen hits).
	if a.ProbeFPProbes != 16*10*4000 || a.ProbeFPPct < 0.003 || a.ProbeFPPct > 0.03 {
		t.Fatalf("probe false positives %.4f%% over %d probes", a.ProbeFPPct, a.ProbeFPProbes)
	}
	if a.ExpectedInflated <= 0 {
		t.Fatalf("expected inflation floor %.1f", a.ExpectedInflated)
	}
	for _, side := range []ScaleSide{rep.CKF, rep.Exact} {
		if side.HotP50Ns <= 0 || side.ColdP99Ns < side.ColdP50Ns || side.IngestBlocksPerSec <= 0 {
			t.Fatalf("side %+v", side)
		}
	}
	if len(rep.Latencies["ckf cold 2g"]) != 2*256 || len(rep.Latencies["exact hot"]) != 200 {
		t.Fatalf("latency samples: %d cold 2g, %d exact hot", len(rep.Latencies["ckf cold 2g"]), len(rep.Latencies["exact hot"]))
	}
}

// TestExactDepthsEqualALinearWalk: the galloping search over prefix-closed
// masks equals walking every position, on random prefix-closed DC sets.
func TestExactDepthsEqualALinearWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 2000 {
		n := 1 + rng.IntN(200)
		q := make([]ckf.LocalBlockHash, n)
		for i := range q {
			q[i] = ckf.LocalBlockHash(rng.Uint64())
		}
		x := NewExactIndex()
		var want [ckf.LaneCount]uint32
		for dc := range ckf.LaneCount {
			d := rng.IntN(n + 1)
			if rng.IntN(3) == 0 {
				d = n
			}
			want[dc] = uint32(d)
			if d > 0 {
				if added := x.Add(dc, q[:d]); added != d {
					t.Fatalf("added %d of %d", added, d)
				}
			}
		}
		// Unrelated chains sharing only the first block.
		other := append([]ckf.LocalBlockHash{q[0]}, ckf.LocalBlockHash(rng.Uint64()))
		x.Add(rng.IntN(ckf.LaneCount), other)
		var s ExactScratch
		var got [ckf.LaneCount]uint32
		x.Depths(q, &s, &got)
		walk := linearExact(x, q)
		if got != walk {
			t.Fatalf("iter %d n=%d: depths %v, linear walk %v", iter, n, got, walk)
		}
		for dc := range ckf.LaneCount {
			if got[dc] < want[dc] {
				t.Fatalf("iter %d dc %d: depth %d below the stored %d", iter, dc, got[dc], want[dc])
			}
		}
	}
}

func linearExact(x *ExactIndex, q []ckf.LocalBlockHash) [ckf.LaneCount]uint32 {
	var d [ckf.LaneCount]uint32
	active := uint16(1<<ckf.LaneCount - 1)
	seq := ckf.SequenceHashes(nil, q)
	for i, h := range seq {
		active &= x.lookup(uint64(h))
		for m := active; m != 0; m &= m - 1 {
			d[trailing(m)] = uint32(i + 1)
		}
	}
	return d
}

func trailing(m uint16) int {
	for i := range 16 {
		if m&(1<<i) != 0 {
			return i
		}
	}
	return 16
}

// TestScaleRadixSideAgreesWithTheExactMap: with the radix side on, the
// tree is built over the same requests as the exact map, holds the same
// memberships and gives the same depth for every (accuracy query, DC), is
// timed like the others and allocates nothing per query; above its cap it
// is skipped with a note instead.
func TestScaleRadixSideAgreesWithTheExactMap(t *testing.T) {
	cfg := smallScale()
	cfg.Radix = true
	rep, err := RunScale(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rx := rep.Radix
	if rx == nil {
		t.Fatalf("no radix side (skipped: %q)", rep.RadixSkipped)
	}
	if rx.Mismatches != 0 {
		t.Fatalf("%d of %d radix answers differ from the exact map's", rx.Mismatches, rx.CheckedAnswers)
	}
	if rx.CheckedQueries != 4000 || rx.CheckedAnswers != 16*4000 {
		t.Fatalf("radix checked over %d queries / %d answers", rx.CheckedQueries, rx.CheckedAnswers)
	}
	if rx.Memberships != rep.Memberships || rx.Prefixes != rep.UniqueBlocks {
		t.Fatalf("radix holds %d memberships over %d prefixes, the exact map %d over %d blocks", rx.Memberships, rx.Prefixes, rep.Memberships, rep.UniqueBlocks)
	}
	if rx.HotP50Ns <= 0 || rx.ColdP99Ns < rx.ColdP50Ns || rx.ColdP50Ns2G <= 0 || rx.IngestBlocksPerSec <= 0 || rx.HeapBytes == 0 || rx.HeapBytesPerMembership <= 0 {
		t.Fatalf("radix side %+v", rx.ScaleSide)
	}
	if rx.AllocsPerQuery != 0 {
		t.Fatalf("%g allocations per radix query", rx.AllocsPerQuery)
	}
	if len(rep.Latencies["radix cold 2g"]) != 2*256 || len(rep.Latencies["radix hot"]) != 200 {
		t.Fatalf("radix latency samples: %d cold 2g, %d hot", len(rep.Latencies["radix cold 2g"]), len(rep.Latencies["radix hot"]))
	}
	names := map[string]bool{}
	for _, m := range rep.RadixMetrics() {
		names[m.Name] = true
	}
	if len(names) != 11 || !names["scale/radix cold p50"] || !names["scale/radix memory heap"] {
		t.Fatalf("radix rows %v", names)
	}

	cfg.RadixMaxMemberships = rep.Memberships - 1
	capped, err := RunScale(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if capped.Radix != nil || capped.RadixSkipped == "" || len(capped.RadixMetrics()) != 0 || len(capped.Latencies["radix hot"]) != 0 {
		t.Fatalf("radix side above its cap: %+v, note %q", capped.Radix, capped.RadixSkipped)
	}
}
