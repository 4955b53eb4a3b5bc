package producer

import (
	"math/rand/v2"
	"testing"
)

// TestBitFilterSizesAndFalsePositives pins bitFilter's contract: reset(n)
// picks the smallest power-of-two size with at least 16 bits per entry,
// never under 256 bits nor over 64 Ki bits (every reset clears it, so it
// must not grow without bound); a hash added is always reported, and while
// the 16 bits per entry hold (n ≤ 4096) at most about one hash in ten that
// was not added is reported too. A reset keeps its words when they suffice
// and forgets every hash added before.
func TestBitFilterSizesAndFalsePositives(t *testing.T) {
	for _, tc := range []struct{ n, words int }{
		{0, 4}, {1, 4}, {16, 4}, {17, 8}, {32, 8}, {33, 16}, {100, 32}, {128, 32}, {129, 64},
		{4096, 1024}, {4097, 1024}, {1 << 20, 1024},
	} {
		var f bitFilter
		f.reset(tc.n)
		if len(f.words) != tc.words {
			t.Fatalf("reset(%d): %d words, want %d", tc.n, len(f.words), tc.words)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	var f bitFilter
	for _, n := range []int{1, 10, 33, 100, 1000, 4096, 20000} {
		f.reset(n)
		added := make(map[uint64]bool, n)
		for range n {
			h := r.Uint64()
			added[h] = true
			f.add(h)
		}
		for h := range added {
			if !f.mayHave(h) {
				t.Fatalf("n=%d: an added hash is not reported", n)
			}
		}
		// The index reaches every word of the filter, not only the first ones.
		words := make(map[int]bool)
		for range 20 * len(f.words) {
			w, _ := f.bit(r.Uint64())
			words[w] = true
		}
		if len(words) != len(f.words) {
			t.Fatalf("n=%d: hashes fell in %d of %d words", n, len(words), len(f.words))
		}
		const queries = 20000
		fp := 0
		for range queries {
			if h := r.Uint64(); !added[h] && f.mayHave(h) {
				fp++
			}
		}
		if n <= 4096 && fp > queries/10 {
			t.Fatalf("n=%d: %d of %d hashes not added are reported", n, fp, queries)
		}
		// The next reset, to any size the words hold, starts empty and
		// allocates nothing.
		if a := testing.AllocsPerRun(5, func() { f.reset(n); f.reset(n / 2) }); a != 0 {
			t.Fatalf("n=%d: a reset that fits the words allocates (%v)", n, a)
		}
		for h := range added {
			if f.mayHave(h) {
				t.Fatalf("n=%d: a hash added before the reset is still reported", n)
			}
		}
	}
}
