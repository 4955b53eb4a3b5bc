package e2e

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/api"
)

// The traffics name what they promise: one-domain traffic only domain 0,
// mixed traffic every domain of the n.
func TestDomainsBenchTraffic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[dmTraffic]map[int]bool{dmOne: {}, dmMixed: {}}
	for range 2000 {
		for tr, s := range seen {
			d, c := tr.pick(rng, 32, dmChainsDefault)
			if c < 0 || c >= dmChainsDefault {
				t.Fatalf("%s: chain %d", tr, c)
			}
			s[d] = true
		}
	}
	if len(seen[dmOne]) != 1 || !seen[dmOne][0] {
		t.Errorf("one-domain traffic named %v", seen[dmOne])
	}
	if len(seen[dmMixed]) != 32 {
		t.Errorf("mixed traffic named %d domains of 32", len(seen[dmMixed]))
	}
}

// A child's answer is parsed whole, its counters kept only when it has
// them, and the shares are the ratios the docs define.
func TestDomainsBenchSummary(t *testing.T) {
	k1, k32 := &dmChild{n: 1, chains: 256, linesPerBucket: 1}, &dmChild{n: 32, chains: 256, linesPerBucket: 1}
	base, one, mixed := &dmRun{kid: k1, traffic: dmOne}, &dmRun{kid: k32, traffic: dmOne}, &dmRun{kid: k32, traffic: dmMixed}
	for _, c := range []struct {
		r    *dmRun
		line string
	}{
		{base, "lat -1 -1 1000 1000 1000"},
		{one, "lat -1 -1 1100 1100 1100"},
		{mixed, "lat 30 6 3300 3300 3300"},
	} {
		if err := c.r.add(c.line, 3); err != nil {
			t.Fatal(err)
		}
	}
	if base.counted || !mixed.counted || mixed.llcMiss != 30 || mixed.dtlbMiss != 6 {
		t.Errorf("counters: base %+v, mixed %+v", base, mixed)
	}
	for _, bad := range []string{"lat -1 -1 1000 1000", "lat 1 1000 1000 1000", "lat -1 -1 1000 x 1000", "lat -1 -1 1000 -5 1000", "lut -1 -1 1 2 3"} {
		if err := (&dmRun{kid: k1}).add(bad, 3); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	got := map[string]float64{}
	for _, m := range dmSummary([]*dmRun{base, one, mixed}) {
		got[m.unit] = m.v
	}
	near := func(unit string, want float64) {
		t.Helper()
		if v, ok := got[unit]; !ok || v < want-1e-9 || v > want+1e-9 {
			t.Errorf("%s = %v (reported %v), want %v", unit, v, ok, want)
		}
	}
	near("p50_us_1dom", 1)
	near("p50_us_32dom_one", 1.1)
	near("registry_ratio_32dom", 1.1)
	near("memory_ratio_32dom", 3)
	near("p50_ratio_32dom", 3.3)
	near("llc_miss/query_32dom_mixed", 10)
	near("dtlb_miss/query_32dom_mixed", 2)
	// 256 chains × 17 positions × 2 buckets × one line × 64 bytes.
	near("hot_MiB_1dom", 256*17*2*64/float64(1<<20))
	near("hot_MiB_32dom_one", 256*17*2*64/float64(1<<20))
	near("hot_MiB_32dom_mixed", 32*256*17*2*64/float64(1<<20))
	if _, ok := got["llc_miss/query_1dom"]; ok {
		t.Error("counts reported for a run without counters")
	}
}

// Four DCs' lanes 0-3 share a row's first line; lanes on both halves of
// the 128-byte row span two.
func TestDomainsBenchRowLines(t *testing.T) {
	lanes := func(ls ...int) []api.LaneDepth {
		var out []api.LaneDepth
		for _, l := range ls {
			out = append(out, api.LaneDepth{Lane: l})
		}
		return out
	}
	for _, c := range []struct {
		lanes []api.LaneDepth
		want  int
	}{{lanes(0, 1, 2, 3), 1}, {lanes(8, 15), 1}, {lanes(0, 9), 2}, {nil, 0}} {
		if got := rowLines(c.lanes); got != c.want {
			t.Errorf("rowLines(%v) = %d, want %d", c.lanes, got, c.want)
		}
	}
}

// On a machine that gives them, the counters count; elsewhere opening them
// says why.
func TestMissCounters(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := openMissCounters()
	if err != nil {
		t.Skipf("no counters here: %v", err)
	}
	defer c.close()
	buf := make([]byte, 64<<20)
	if err := c.enable(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(buf); i += 64 {
		buf[i]++
	}
	if err := c.disable(); err != nil {
		t.Fatal(err)
	}
	llc, dtlb, err := c.read()
	if err != nil {
		t.Fatal(err)
	}
	if llc == 0 || dtlb == 0 {
		t.Errorf("a 64 MiB walk counted %d LLC and %d dTLB misses", llc, dtlb)
	}
}

// CKF_DM_CHAINS is bounded by the blocks the tables are sized for.
func TestDomainsBenchChainCount(t *testing.T) {
	for v, want := range map[string]int{"": dmChainsDefault, "1": 1, "1024": 1024, "2048": 2048} {
		t.Setenv("CKF_DM_CHAINS", v)
		if got, err := dmChainCount(); err != nil || got != want {
			t.Errorf("CKF_DM_CHAINS=%q: %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"0", "-3", "2049", "many"} {
		t.Setenv("CKF_DM_CHAINS", v)
		if got, err := dmChainCount(); err == nil {
			t.Errorf("CKF_DM_CHAINS=%q accepted as %d", v, got)
		}
	}
}
