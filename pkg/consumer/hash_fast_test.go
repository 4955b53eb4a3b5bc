package consumer

import (
	"math/rand/v2"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// TestFastHashesEqualTheReference: the query path's fixed-length XXH3
// branches equal ckf's hashing on random and edge inputs, for several
// seeds and bucket counts.
func TestFastHashesEqualTheReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	edges := []uint64{0, 1, 0xffff, 1 << 32, 1<<32 - 1, 1<<63 - 1, 1 << 63, ^uint64(0)}
	for _, seed := range []uint64{ckf.DefaultSeed, 0, 1, ^uint64(0), rng.Uint64(), rng.Uint64()} {
		for _, buckets := range []uint64{2, 4096, 1 << 22, 1 << 32} {
			a, err := ckf.NewAddressing(buckets, seed)
			if err != nil {
				t.Fatal(err)
			}
			f := newFastAddressing(a)
			check := func(x uint64) {
				if got, want := f.prepare(x), a.Prepare(x); got != want {
					t.Fatalf("seed %#x buckets %d: prepare(%#x) = %+v, want %+v", seed, buckets, x, got, want)
				}
			}
			for _, x := range edges {
				check(x)
			}
			for range 20000 {
				check(rng.Uint64())
			}
		}
	}
	for _, x := range edges {
		for _, y := range edges {
			if got, want := nextSequenceHash(ckf.SequenceHash(x), ckf.LocalBlockHash(y)), ckf.NextSequenceHash(ckf.SequenceHash(x), ckf.LocalBlockHash(y)); got != want {
				t.Fatalf("next(%#x, %#x) = %#x, want %#x", x, y, got, want)
			}
		}
	}
	for range 200000 {
		x, y := ckf.SequenceHash(rng.Uint64()), ckf.LocalBlockHash(rng.Uint64())
		if got, want := nextSequenceHash(x, y), ckf.NextSequenceHash(x, y); got != want {
			t.Fatalf("next(%#x, %#x) = %#x, want %#x", x, y, got, want)
		}
	}
}

// TestFastPrepareCoversZeroFingerprintsAndOffsets: inputs whose mix gives a
// zero fingerprint or a zero alternate offset take the fix-ups; search for
// some and compare them too.
func TestFastPrepareCoversZeroFingerprintsAndOffsets(t *testing.T) {
	a, err := ckf.NewAddressing(2, ckf.DefaultSeed) // mask 1: offset 0 half the time
	if err != nil {
		t.Fatal(err)
	}
	f := newFastAddressing(a)
	zeroFP := 0
	for x := uint64(0); zeroFP < 3 && x < 1<<22; x++ {
		got, want := f.prepare(x), a.Prepare(x)
		if got != want {
			t.Fatalf("prepare(%#x) = %+v, want %+v", x, got, want)
		}
		if got.Fingerprint == 1 {
			zeroFP++
		}
	}
	if zeroFP == 0 {
		t.Fatal("no fingerprint-1 input found in 4M tries")
	}
}

func FuzzFastHashes(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(ckf.DefaultSeed))
	f.Add(^uint64(0), uint64(1)<<40, uint64(7))
	f.Fuzz(func(t *testing.T, x, y, seed uint64) {
		a, err := ckf.NewAddressing(1<<22, seed)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := newFastAddressing(a).prepare(x), a.Prepare(x); got != want {
			t.Fatalf("prepare(%#x) seed %#x = %+v, want %+v", x, seed, got, want)
		}
		if got, want := nextSequenceHash(ckf.SequenceHash(x), ckf.LocalBlockHash(y)), ckf.NextSequenceHash(ckf.SequenceHash(x), ckf.LocalBlockHash(y)); got != want {
			t.Fatalf("next(%#x, %#x) = %#x, want %#x", x, y, got, want)
		}
	})
}
