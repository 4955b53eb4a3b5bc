package ckf

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"
)

// refNext, refPrepare and refAlternate are spec §2.2 and §3.2 written
// with the generic XXH3 over the little-endian bytes: the reference the
// fixed-length branches must equal.
func refNext(parent SequenceHash, local LocalBlockHash) SequenceHash {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(parent))
	binary.LittleEndian.PutUint64(b[8:], uint64(local))
	return SequenceHash(xxh3.HashSeed(b[:], XXH3Seed))
}

func refAlternate(a Addressing, bucket uint64, fp uint16) uint64 {
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], fp)
	d := xxh3.HashSeed(b[:], a.seed^AlternateDomain) & a.bucketMask
	if d == 0 {
		d = 1
	}
	return bucket ^ d
}

func refPrepare(a Addressing, full uint64) Probe {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], full)
	mixed := xxh3.HashSeed(b[:], a.seed)
	fp := uint16(mixed)
	if fp == 0 {
		fp = 1
	}
	ba := (mixed >> 16) & a.bucketMask
	return Probe{Fingerprint: fp, BucketA: uint32(ba), BucketB: uint32(refAlternate(a, ba, fp))}
}

// TestFixedHashesEqualGenericXXH3: the fixed-length branches equal the
// generic XXH3 on random and edge inputs, for several seeds and bucket
// counts.
func TestFixedHashesEqualGenericXXH3(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	edges := []uint64{0, 1, 0xffff, 1 << 32, 1<<32 - 1, 1<<63 - 1, 1 << 63, ^uint64(0)}
	for _, seed := range []uint64{DefaultSeed, 0, 1, ^uint64(0), rng.Uint64(), rng.Uint64()} {
		for _, buckets := range []uint64{2, 4096, 1 << 22, 1 << 32} {
			a, err := NewAddressing(buckets, seed)
			if err != nil {
				t.Fatal(err)
			}
			check := func(x uint64) {
				if got, want := a.Prepare(x), refPrepare(a, x); got != want {
					t.Fatalf("seed %#x buckets %d: Prepare(%#x) = %+v, want %+v", seed, buckets, x, got, want)
				}
				b, fp := x&a.bucketMask, uint16(x>>20)
				if got, want := a.Alternate(b, fp), refAlternate(a, b, fp); got != want {
					t.Fatalf("seed %#x buckets %d: Alternate(%d, %#x) = %d, want %d", seed, buckets, b, fp, got, want)
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
			if got, want := NextSequenceHash(SequenceHash(x), LocalBlockHash(y)), refNext(SequenceHash(x), LocalBlockHash(y)); got != want {
				t.Fatalf("next(%#x, %#x) = %#x, want %#x", x, y, got, want)
			}
		}
	}
	for range 200000 {
		x, y := SequenceHash(rng.Uint64()), LocalBlockHash(rng.Uint64())
		if got, want := NextSequenceHash(x, y), refNext(x, y); got != want {
			t.Fatalf("next(%#x, %#x) = %#x, want %#x", x, y, got, want)
		}
	}
}

// TestFixedPrepareCoversZeroFingerprintsAndOffsets: inputs whose mix gives
// a zero fingerprint or a zero alternate offset take the fix-ups; search
// for some and compare them too.
func TestFixedPrepareCoversZeroFingerprintsAndOffsets(t *testing.T) {
	a, err := NewAddressing(2, DefaultSeed) // mask 1: offset 0 half the time
	if err != nil {
		t.Fatal(err)
	}
	zeroFP := 0
	for x := uint64(0); zeroFP < 3 && x < 1<<22; x++ {
		got, want := a.Prepare(x), refPrepare(a, x)
		if got != want {
			t.Fatalf("Prepare(%#x) = %+v, want %+v", x, got, want)
		}
		if got.Fingerprint == 1 {
			zeroFP++
		}
	}
	if zeroFP == 0 {
		t.Fatal("no fingerprint-1 input found in 4M tries")
	}
}

func FuzzFixedHashes(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(DefaultSeed))
	f.Add(^uint64(0), uint64(1)<<40, uint64(7))
	f.Fuzz(func(t *testing.T, x, y, seed uint64) {
		a, err := NewAddressing(1<<22, seed)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := a.Prepare(x), refPrepare(a, x); got != want {
			t.Fatalf("Prepare(%#x) seed %#x = %+v, want %+v", x, seed, got, want)
		}
		if got, want := NextSequenceHash(SequenceHash(x), LocalBlockHash(y)), refNext(SequenceHash(x), LocalBlockHash(y)); got != want {
			t.Fatalf("next(%#x, %#x) = %#x, want %#x", x, y, got, want)
		}
	})
}
