package ckf

import (
	"errors"
	"testing"
	"time"
)

func TestHashingVectors(t *testing.T) {
	if got := ComputeBlockHash([]byte("test data")); got != 13226331709069118873 {
		t.Fatalf("compute_block_hash = %d", got)
	}
	if got := LocalBlockHashes(nil, []uint32{1, 2, 3, 4}, 4); len(got) != 1 || got[0] != 0xCB38E4D7FB2DCA5C {
		t.Fatalf("local [1,2,3,4] = %#x", got)
	}
	toks := make([]uint32, 13)
	for i := range toks {
		toks[i] = uint32(i)
	}
	wantLocal := []LocalBlockHash{0x7EE2CBEDC694AB46, 0xA8416CFD935BDB13, 0x0F1AA342314B9384}
	wantSeq := []SequenceHash{0x7EE2CBEDC694AB46, 0x83FB702F20E2AD65, 0xEBE58E326790467B}
	for _, n := range []int{12, 13} {
		local := LocalBlockHashes(nil, toks[:n], 4)
		if len(local) != 3 {
			t.Fatalf("%d tokens: %d blocks", n, len(local))
		}
		seq := SequenceHashes(nil, local)
		for i := range 3 {
			if local[i] != wantLocal[i] || seq[i] != wantSeq[i] {
				t.Fatalf("block %d: local %#x seq %#x", i, local[i], seq[i])
			}
		}
	}
	seq := SequenceHashes(nil, []LocalBlockHash{0x0123456789ABCDEF, 0x1111222233334444, 0xDEADBEEFCAFEBABE})
	want := []SequenceHash{0x0123456789ABCDEF, 0x98E7E55F299CF592, 0x65D53B99C5252D19}
	for i := range want {
		if seq[i] != want[i] {
			t.Fatalf("chain[%d] = %#x want %#x", i, seq[i], want[i])
		}
	}
	// Block counts for sizes 11/32/64 with exact, +1, 2x+1 tokens.
	for _, c := range []struct{ bs, n, want int }{{11, 11, 1}, {32, 33, 1}, {64, 129, 2}} {
		if got := len(LocalBlockHashes(nil, make([]uint32, c.n), c.bs)); got != c.want {
			t.Fatalf("bs %d n %d: %d blocks", c.bs, c.n, got)
		}
	}
	if len(SequenceHashes(nil, nil)) != 0 {
		t.Fatal("empty chain not empty")
	}
}

func TestBucketCountVectors(t *testing.T) {
	for _, c := range [][2]uint64{{1, 2}, {16, 8}, {32, 16}, {64, 32}, {128, 64}, {1000, 512}, {1 << 20, 524288}} {
		got, err := BucketCount(c[0])
		if err != nil || got != c[1] {
			t.Fatalf("bucket_count(%d) = %d, %v", c[0], got, err)
		}
	}
	if _, err := BucketCount(0); !errors.Is(err, ErrExpectedCapacityZero) {
		t.Fatalf("zero: %v", err)
	}
	if _, err := BucketCount(1 << 63); !errors.Is(err, ErrCapacityOverflow) {
		t.Fatalf("overflow: %v", err)
	}
}

func TestAddressingIsNonzeroAndAlternateBucketIsAnInvolution(t *testing.T) {
	a, err := NewAddressing(1024, 0x123456789ABCDEF0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		h     uint64
		fp    uint16
		a, b_ uint32
	}{{0, 7750, 587, 372}, {1, 64153, 348, 36}, {0x0123456789ABCDEF, 45802, 865, 909}, {0xFFFFFFFFFFFFFFFF, 31767, 112, 217}} {
		p := a.Prepare(c.h)
		if p.Fingerprint != c.fp || p.BucketA != c.a || p.BucketB != c.b_ {
			t.Fatalf("prepare(%#x) = %+v", c.h, p)
		}
	}
	for _, c := range []struct {
		n, h  uint64
		fp    uint16
		a, b_ uint32
	}{
		{16, 0, 0xB49E, 14, 15}, {16, 41, 0x1A3A, 0, 4}, {16, 0x0123456789ABCDEF, 0x7D61, 7, 5},
		{64, 41, 0x1A3A, 0, 20}, {64, 0x7EE2CBEDC694AB46, 0x4FCC, 44, 2},
		{64, 0x83FB702F20E2AD65, 0xBFAD, 53, 33}, {64, 0xEBE58E326790467B, 0x3648, 49, 60},
	} {
		ad, _ := NewAddressing(c.n, DefaultSeed)
		p := ad.Prepare(c.h)
		if p.Fingerprint != c.fp || p.BucketA != c.a || p.BucketB != c.b_ {
			t.Fatalf("n=%d prepare(%#x) = %+v", c.n, c.h, p)
		}
	}
	for h := range uint64(10000) {
		p := a.Prepare(h)
		if p.Fingerprint == 0 || p.BucketA == p.BucketB || a.Alternate(uint64(p.BucketB), p.Fingerprint) != uint64(p.BucketA) {
			t.Fatalf("hash %d: %+v", h, p)
		}
	}
}

func TestRNGAndStickyWorkerVectors(t *testing.T) {
	s := LaneRNGSeed(DefaultSeed, 0)
	if s != 0xC050D0A84124DB84 {
		t.Fatalf("lane_rng_seed = %#x", s)
	}
	for _, w := range []uint64{0x8D0956E040739722, 0x116C72C2242D8178, 0x5ECB896FE0120182} {
		if got := NextRandom(&s); got != w {
			t.Fatalf("next_random = %#x want %#x", got, w)
		}
	}
	for _, c := range []struct {
		consumer uint64
		lane     uint8
		w, want  int
	}{{11, 3, 1, 0}, {11, 3, 4, 3}, {17, 3, 4, 2}, {0, 0, 4, 0}, {11, 0, 4, 1}} {
		if got := StickyWorker(c.consumer, c.lane, c.w); got != c.want {
			t.Fatalf("sticky_worker%v = %d", c, got)
		}
	}
}

func TestPackedBucketSwarMatchesScalarMembership(t *testing.T) {
	var w uint64
	for s, fp := range []uint16{1, 0x1234, 0x8000, 0xFFFF} {
		w = WithSlot(w, s, fp)
	}
	if w != 0xFFFF800012340001 {
		t.Fatalf("word %#x", w)
	}
	for _, fp := range []uint16{1, 2, 0x1234, 0x1235, 0x8000, 0xFFFE, 0xFFFF} {
		if Contains(w, fp) != (FirstSlot(w, fp) >= 0) {
			t.Fatalf("contains(%#x) disagrees", fp)
		}
	}
	for _, fp := range []uint16{1, 0x1234, 0x8000, 0xFFFF} {
		if !Contains(w, fp) {
			t.Fatalf("contains(%#x) false", fp)
		}
	}
	for _, fp := range []uint16{2, 0x1235, 0xFFFE} {
		if Contains(w, fp) {
			t.Fatalf("contains(%#x) true", fp)
		}
	}
	if FirstEmpty(w) != -1 || FirstSlot(w, 1) != 0 || FirstSlot(w, 0x8000) != 2 {
		t.Fatal("first")
	}
	if FirstEmpty(WithSlot(w, 1, 0)) != 1 {
		t.Fatal("first_empty after clear")
	}
}

func TestIdentityVectors(t *testing.T) {
	cs := DefaultCacheSemantics([]string{"meta/llama"}, 512, 1)
	if cs.String() != "7d31eb9019357572470605f4a8be687e" {
		t.Fatalf("cache semantics %s", cs)
	}
	rs := DefaultRoutingScope("prod", "router", "generate")
	if rs.String() != "18270d3ba03effaec8d167ba02c7752d" {
		t.Fatalf("routing scope %s", rs)
	}
	if d := DcIDFromName("dc-a"); d != 356084303347317832 || d.String() != "04f110c98b1bfc48" {
		t.Fatalf("dc id %d %s", d, d)
	}
	// Length framing separates ["ab","c"] from ["a","bc"].
	if DefaultRoutingScope("ab", "c") == DefaultRoutingScope("a", "bc") {
		t.Fatal("framing collision")
	}
	e1, err := ExplicitRoutingScope(map[string]string{"a": "1", "b": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if e1 == DefaultRoutingScope("a", "1", "b", "2") {
		t.Fatal("default and explicit material equal")
	}
	for _, bad := range []map[string]string{{}, {"": "x"}, {"k": ""}, {string(make([]byte, 129)): "v"}} {
		if _, err := ExplicitRoutingScope(bad); !errors.Is(err, ErrInvalidExplicitIdentity) {
			t.Fatalf("accepted %v", bad)
		}
	}
}

func TestDispositionsTargetOnlyTheDomainRequiringRecovery(t *testing.T) {
	if d := PointConsumerGapOrMalformedBeforeWrite.Disposition(); d != (FailureDisposition{DomainConsumerLane, CommitKnownUnchanged, DomainConsumerLane, ActionDeactivateAndSnapshot}) {
		t.Fatal(d)
	}
	if d := PointConsumerWorkerFailureMidApply.Disposition(); d.Commit != CommitUncertain || d.RecoveryDomain != DomainConsumerLane {
		t.Fatal(d)
	}
	if d := PointPrewriteInvariantMismatch.Disposition(); d.RecoveryDomain != DomainProducerCore || d.Action != ActionFenceAndRebuildProducer {
		t.Fatal(d)
	}
	if d := PointInactiveSnapshotInstallFailure.Disposition(); d.Action != ActionRetrySnapshot {
		t.Fatal(d)
	}
}

func TestResourceAndCapacityFailuresAreDistinct(t *testing.T) {
	c, r := PointBoundedRelocationFailure.Disposition(), PointPrecommitAllocationFailure.Disposition()
	if c == r || c.Action != ActionContinueCapacityOmission || r.Action != ActionReportResourceFailure || c.RecoveryDomain != 0 || r.RecoveryDomain != 0 {
		t.Fatal(c, r)
	}
	if ErrCapacityExhausted.FailurePoint() != PointBoundedRelocationFailure || ErrEventAllocationFailed.FailurePoint() != PointPrecommitAllocationFailure {
		t.Fatal("mapping")
	}
	if PointBoundedRelocationFailure.DispositionFor(HashModeCanonical).Commit != CommitExactCommittedPhysicalOmitted {
		t.Fatal("canonical commit state")
	}
}

func TestValidatesConfigAndDefaults(t *testing.T) {
	c := NewConfig(128)
	if c.PublishEveryNEvents != 1 || c.Search.VerificationWindow != 2 || c.MaxKicks != 500 || c.Seed != DefaultSeed {
		t.Fatal(c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mut  func(*Config)
		want error
	}{
		{func(c *Config) { c.ExpectedBlocksPerDC = 0 }, ErrExpectedCapacityZero},
		{func(c *Config) { c.MaxKicks = 0 }, ErrInvalidMaxKicks},
		{func(c *Config) { c.MaxKicks = 4097 }, ErrInvalidMaxKicks},
		{func(c *Config) { c.Search.VerificationWindow = 9 }, ErrInvalidVerificationWindow},
		{func(c *Config) { c.PublishEveryNEvents = 0 }, ErrInvalidPublishEveryNEvents},
	} {
		c := NewConfig(128)
		tc.mut(&c)
		if err := c.Validate(); !errors.Is(err, tc.want) {
			t.Fatalf("got %v want %v", err, tc.want)
		}
	}
}

func TestSaltsAndEagleWindows(t *testing.T) {
	if got := SaltedSeed("adapter-a", ""); got != 0x7AB77913E9C918D6 {
		t.Fatalf("lora seed %#x", got)
	}
	if SaltedSeed("", "") != XXH3Seed {
		t.Fatal("empty salts changed the seed")
	}
	if SaltedSeed("", "ns") == XXH3Seed || SaltedSeed("a", "ns") == SaltedSeed("a", "") {
		t.Fatal("cache namespace does not salt")
	}
	got := LocalBlockHashesWith(nil, []uint32{0, 1, 2, 3}, 4, BlockOptions{Seed: SaltedSeed("adapter-a", "")})
	if len(got) != 1 || got[0] != 0x5C7F6547F18918BF {
		t.Fatalf("salted local hash %#x", got)
	}
	base := LocalBlockHashesWith(nil, []uint32{0, 1, 2, 3}, 4, BlockOptions{})
	if base[0] != 0x7EE2CBEDC694AB46 || base[0] != LocalBlockHashes(nil, []uint32{0, 1, 2, 3}, 4)[0] {
		t.Fatalf("unsalted %#x", base)
	}
	// Eagle: tokens 0..5, block size 2 → windows [0,1,2] and [2,3,4].
	toks := []uint32{0, 1, 2, 3, 4, 5}
	eagle := LocalBlockHashesWith(nil, toks, 2, BlockOptions{Eagle: true})
	w1 := LocalBlockHashesWith(nil, []uint32{0, 1, 2}, 3, BlockOptions{})
	w2 := LocalBlockHashesWith(nil, []uint32{2, 3, 4}, 3, BlockOptions{})
	if len(eagle) != 2 || eagle[0] != w1[0] || eagle[1] != w2[0] {
		t.Fatalf("eagle windows %#x, want %#x %#x", eagle, w1, w2)
	}
	if n := len(LocalBlockHashesWith(nil, make([]uint32, 7), 2, BlockOptions{Eagle: true})); n != 3 {
		t.Fatalf("eagle count %d, want (7-1)/2 = 3", n)
	}
}

func TestValidatesConfigAndWorkerMapping(t *testing.T) {
	for _, c := range [][2]uint64{{1, 2}, {16, 8}} {
		c0 := NewConfig(c[0])
		if f, err := c0.Format(); err != nil || f.BucketCount != c[1] {
			t.Fatalf("format(%d) = %+v, %v", c[0], f, err)
		}
	}
	if err := NewConfig(0).Validate(); !errors.Is(err, ErrExpectedCapacityZero) {
		t.Fatalf("zero capacity: %v", err)
	}
	// Lane-to-worker mapping is stable and within range.
	for lane := range uint8(LaneCount) {
		w := StickyWorker(17, lane, 4)
		if w < 0 || w >= 4 || w != StickyWorker(17, lane, 4) {
			t.Fatalf("lane %d → worker %d", lane, w)
		}
	}
}

func TestValidatesPublishCadenceAndDefaultsToImmediatePublication(t *testing.T) {
	c := NewConfig(64)
	if c.PublishEveryNEvents != 1 {
		t.Fatalf("default cadence %d, want 1 (publish after every event)", c.PublishEveryNEvents)
	}
	c.PublishEveryNEvents = 0
	if err := c.Validate(); !errors.Is(err, ErrInvalidPublishEveryNEvents) {
		t.Fatalf("cadence 0: %v", err)
	}
}

// Block sizes up to 256 tokens (257 for the Eagle window) hash from a stack
// buffer: with room in dst, no allocation per call; larger ones allocate
// their buffer once per call. The hashes match the
// same windows cut by hand, whatever buffer held them.
func TestLocalBlockHashesCommonSizesDoNotAllocate(t *testing.T) {
	tokens := make([]uint32, 3*257)
	for i := range tokens {
		tokens[i] = uint32(i * 7919)
	}
	dst := make([]LocalBlockHash, 0, 8)
	for _, bs := range []int{16, 64, 255, 256} {
		if a := testing.AllocsPerRun(20, func() { dst = LocalBlockHashes(dst[:0], tokens, bs) }); a != 0 {
			t.Errorf("LocalBlockHashes block size %d: %v allocations per call", bs, a)
		}
		if a := testing.AllocsPerRun(20, func() { dst = LocalBlockHashesWith(dst[:0], tokens, bs, BlockOptions{Eagle: true}) }); a != 0 {
			t.Errorf("LocalBlockHashesWith Eagle block size %d: %v allocations per call", bs, a)
		}
	}
	// Larger blocks take one heap buffer per call, reused for every block.
	for _, bs := range []int{300, 1000} {
		if a := testing.AllocsPerRun(20, func() { dst = LocalBlockHashes(dst[:0], tokens, bs) }); a != 1 {
			t.Errorf("LocalBlockHashes block size %d: %v allocations per call, want 1", bs, a)
		}
		if a := testing.AllocsPerRun(20, func() { dst = LocalBlockHashesWith(dst[:0], tokens, bs, BlockOptions{Eagle: true}) }); a != 1 {
			t.Errorf("LocalBlockHashesWith Eagle block size %d: %v allocations per call, want 1", bs, a)
		}
	}
	// Larger blocks still hash every full window.
	for _, bs := range []int{256, 257, 300} {
		for _, eagle := range []bool{false, true} {
			window := bs
			if eagle {
				window++
			}
			got := LocalBlockHashesWith(nil, tokens, bs, BlockOptions{Eagle: eagle})
			var want []LocalBlockHash
			for start := 0; start+window <= len(tokens); start += bs {
				want = LocalBlockHashesWith(want, tokens[start:start+window], window, BlockOptions{})
			}
			if len(got) != len(want) {
				t.Fatalf("block size %d eagle %v: %d hashes, want %d", bs, eagle, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("block size %d eagle %v: hash %d = %#x, want %#x", bs, eagle, i, got[i], want[i])
				}
			}
		}
	}
}

// A block size below 1 yields no blocks and returns dst as it was. The call
// runs on its own goroutine so that a loop that never advances fails the
// test instead of hanging it.
func TestLocalBlockHashesWithoutABlockSize(t *testing.T) {
	tokens := []uint32{1, 2, 3, 4}
	for _, bs := range []int{0, -1} {
		for _, eagle := range []bool{false, true} {
			dst := []LocalBlockHash{7}
			done := make(chan [2][]LocalBlockHash, 1)
			go func() {
				done <- [2][]LocalBlockHash{
					LocalBlockHashes(dst, tokens, bs),
					LocalBlockHashesWith(dst, tokens, bs, BlockOptions{Eagle: eagle}),
				}
			}()
			select {
			case got := <-done:
				for _, g := range got {
					if len(g) != 1 || g[0] != 7 {
						t.Fatalf("block size %d eagle %v: %v, want dst unchanged", bs, eagle, g)
					}
				}
			case <-time.After(500 * time.Millisecond):
				t.Fatalf("block size %d eagle %v: no answer after 500ms", bs, eagle)
			}
		}
	}
}
