package ckf

import (
	"math"
	"math/bits"
)

// BucketCount returns the power-of-two bucket count for n expected blocks
// (spec §3.1): max(2, floor((5n+15)/16)) rounded up to a power of two.
func BucketCount(n uint64) (uint64, error) {
	if n == 0 {
		return 0, &BuildError{Kind: ErrExpectedCapacityZero}
	}
	hi, lo := bits.Mul64(n, 5)
	if hi != 0 {
		return 0, &BuildError{Kind: ErrCapacityOverflow}
	}
	sum, carry := bits.Add64(lo, 15, 0)
	if carry != 0 {
		return 0, &BuildError{Kind: ErrCapacityOverflow}
	}
	required := max(sum/16, 2)
	if required > 1<<63 {
		return 0, &BuildError{Kind: ErrCapacityOverflow}
	}
	p := uint64(1) << (64 - bits.LeadingZeros64(required-1))
	return p, nil
}

// Probe is the triple a filter lookup needs.
type Probe struct {
	Fingerprint uint16
	BucketA     uint32
	BucketB     uint32
}

// Addressing derives probes for one (bucket count, seed) format.
type Addressing struct {
	bucketMask uint64
	seed       uint64
	// mixKey and altKey are the seed folded into the XXH3 keys of mix and
	// offset (hash_fixed.go).
	mixKey, altKey uint64
}

// NewAddressing validates that bucketCount is a power of two ≥ 2 that fits
// in 32 bits of bucket index.
func NewAddressing(bucketCount, seed uint64) (Addressing, error) {
	if bucketCount < 2 || bucketCount&(bucketCount-1) != 0 || bucketCount > math.MaxUint32+1 {
		return Addressing{}, &BuildError{Kind: ErrCapacityOverflow}
	}
	mixKey, altKey := addressingKeys(seed)
	return Addressing{bucketMask: bucketCount - 1, seed: seed, mixKey: mixKey, altKey: altKey}, nil
}

// BucketCount returns the number of buckets.
func (a Addressing) BucketCount() uint64 { return a.bucketMask + 1 }

// Seed returns the addressing seed.
func (a Addressing) Seed() uint64 { return a.seed }

// Prepare computes the probe of a full hash (spec §3.2).
func (a Addressing) Prepare(fullHash uint64) Probe {
	mixed := a.mix(fullHash)
	fp := uint16(mixed)
	if fp == 0 {
		fp = 1
	}
	ba := (mixed >> 16) & a.bucketMask
	return Probe{Fingerprint: fp, BucketA: uint32(ba), BucketB: uint32(ba ^ a.offset(fp))}
}

// Alternate returns the other candidate bucket; it is an involution.
func (a Addressing) Alternate(bucket uint64, fp uint16) uint64 {
	return bucket ^ a.offset(fp)
}
