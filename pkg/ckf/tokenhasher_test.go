package ckf

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestTokenHasherHashesLikeTheSliceHasher feeds token streams one token at
// a time and compares with LocalBlockHashesWith on the whole slice, for
// small and large windows (the slice hasher switches buffers above 256),
// with and without Eagle and a salted seed.
func TestTokenHasherHashesLikeTheSliceHasher(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bs := range []int{1, 2, 16, 64, 256, 257, 1000} {
		for _, o := range []BlockOptions{{}, {Eagle: true}, {Seed: SaltedSeed("lora", "ns")}, {Seed: SaltedSeed("", "ns"), Eagle: true}} {
			for _, n := range []int{0, bs - 1, bs, bs + 1, 3*bs + 2} {
				tokens := make([]uint32, max(n, 0))
				for i := range tokens {
					tokens[i] = rng.Uint32()
				}
				want := LocalBlockHashesWith(nil, tokens, bs, o)
				h := NewTokenHasher(bs, o)
				var got []LocalBlockHash
				for _, tok := range tokens {
					if sum, ok := h.Add(tok); ok {
						got = append(got, sum)
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("bs %d %+v n %d: got %d hashes %x, want %d %x", bs, o, n, len(got), got, len(want), want)
				}
			}
		}
	}
}

// TestTokenHasherHoldsOneWindow: hashing a long stream allocates nothing
// after the hasher is built.
func TestTokenHasherHoldsOneWindow(t *testing.T) {
	h := NewTokenHasher(64, BlockOptions{Eagle: true})
	allocs := testing.AllocsPerRun(10, func() {
		for i := range 64 * 100 {
			h.Add(uint32(i))
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per 100 blocks", allocs)
	}
}
