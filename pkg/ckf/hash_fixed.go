package ckf

import "math/bits"

// Every block the producer applies and every position a query probes pays
// NextSequenceHash (spec §2.2) and Addressing.Prepare (§3.2): XXH3-64 of
// 16, 8 and 2 bytes. A generic XXH3 call dispatches on the length at run
// time and takes a slice; these are the same short-input XXH3 branches
// written for their fixed lengths, with the seed-dependent keys folded once
// per Addressing. They equal xxh3.HashSeed on the same bytes bit for bit
// (hash_fixed_test.go checks them against it).

// XXH3's default secret, the 64-bit words at the byte offsets the short
// branches read (8..48) and the two 32-bit words at 0 and 4.
const (
	xxSecret08 uint64 = 0x1cad21f72c81017c
	xxSecret16 uint64 = 0xdb979083e96dd4de
	xxSecret24 uint64 = 0x1f67b3b7a4a44072
	xxSecret32 uint64 = 0x78e5c0cc4ee679cb
	xxSecret40 uint64 = 0x2172ffcc7dd05a82
	xxSecret48 uint64 = 0x8e2443f7744608b8
	xxSecret00 uint32 = 0xbe4ba423
	xxSecret04 uint32 = 0x396cfeb8
	xxPrime64b uint64 = 14029467366897019727
	xxPrime64c uint64 = 1609587929392839161
)

// seqKeyLo and seqKeyHi are the 9..16-byte branch's keys for XXH3Seed.
const (
	seqKeyLo = xxSecret24 ^ xxSecret32 + XXH3Seed
	seqKeyHi = xxSecret40 ^ xxSecret48 - XXH3Seed
)

// NextSequenceHash chains one more local hash onto a parent sequence hash:
// XXH3-64 of parent ‖ local (little-endian) with XXH3Seed, the 9..16-byte
// branch at length 16. It inlines.
func NextSequenceHash(parent SequenceHash, local LocalBlockHash) SequenceHash {
	lo := uint64(parent) ^ seqKeyLo
	hi := uint64(local) ^ seqKeyHi
	mh, ml := bits.Mul64(lo, hi)
	acc := 16 + bits.ReverseBytes64(lo) + hi + (mh ^ ml)
	acc ^= acc >> 37
	acc *= 0x165667919e3779f9
	return SequenceHash(acc ^ acc>>32)
}

// addressingKeys folds an addressing seed into the keys of the 4..8-byte
// branch (Prepare's mix of the full hash) and of the 1..3-byte branch
// (Alternate's hash of the fingerprint).
func addressingKeys(seed uint64) (mixKey, altKey uint64) {
	mixSeed := seed ^ uint64(bits.ReverseBytes32(uint32(seed)))<<32
	return (xxSecret08 ^ xxSecret16) - mixSeed, uint64(xxSecret00^xxSecret04) + (seed ^ AlternateDomain)
}

// mix is XXH3-64 of the 8 little-endian bytes of full: the 4..8-byte branch
// at length 8 (the two 32-bit halves swapped).
func (a Addressing) mix(full uint64) uint64 {
	h := (full>>32 | full<<32) ^ a.mixKey
	h ^= bits.RotateLeft64(h, 49) ^ bits.RotateLeft64(h, 24)
	h *= 0x9fb21c651e98df25
	h ^= h>>35 + 8
	h *= 0x9fb21c651e98df25
	return h ^ h>>28
}

// offset is the alternate-bucket offset of fp: XXH3-64 of its 2
// little-endian bytes (the 1..3-byte branch at length 2), masked, never 0.
func (a Addressing) offset(fp uint16) uint64 {
	c := uint64(fp)
	acc := (c*(1<<24+1))>>8 + 2<<8
	acc ^= a.altKey
	acc ^= acc >> 33
	acc *= xxPrime64b
	acc ^= acc >> 29
	acc *= xxPrime64c
	acc ^= acc >> 32
	d := acc & a.bucketMask
	if d == 0 {
		d = 1
	}
	return d
}
