package consumer

import (
	"math/bits"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// The query path hashes every chained position (spec §2.2) and prepares
// every probed one (§3.2): three XXH3-64 calls on 16-, 8- and 2-byte
// inputs. A generic XXH3 call dispatches on the length at run time and
// takes a slice; these are the same three short-input XXH3 branches
// written for their fixed lengths, inlined, with the seed-dependent
// constants folded once per indexer. They must equal ckf.NextSequenceHash
// and ckf.Addressing.Prepare bit for bit (hash_fast_test.go checks both).

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

// seqKeyLo and seqKeyHi are the 9..16-byte branch's keys for the chain seed.
const (
	seqKeyLo = xxSecret24 ^ xxSecret32 + ckf.XXH3Seed
	seqKeyHi = xxSecret40 ^ xxSecret48 - ckf.XXH3Seed
)

// nextSequenceHash is ckf.NextSequenceHash: XXH3-64 of parent ‖ local
// (little-endian) with ckf.XXH3Seed, the 9..16-byte branch at length 16.
func nextSequenceHash(parent ckf.SequenceHash, local ckf.LocalBlockHash) ckf.SequenceHash {
	lo := uint64(parent) ^ seqKeyLo
	hi := uint64(local) ^ seqKeyHi
	mh, ml := bits.Mul64(lo, hi)
	acc := 16 + bits.ReverseBytes64(lo) + hi + (mh ^ ml)
	acc ^= acc >> 37
	acc *= 0x165667919e3779f9
	return ckf.SequenceHash(acc ^ acc>>32)
}

// fastAddressing is ckf.Addressing with its seeds folded into the keys of
// the 8-byte (mix) and 2-byte (alternate) XXH3 branches.
type fastAddressing struct {
	mixKey uint64 // 4..8-byte branch key for the addressing seed
	altKey uint64 // 1..3-byte branch key for the alternate seed
	mask   uint64
}

func newFastAddressing(a ckf.Addressing) fastAddressing {
	seed := a.Seed()
	mixSeed := seed ^ uint64(bits.ReverseBytes32(uint32(seed)))<<32
	altSeed := seed ^ ckf.AlternateDomain
	return fastAddressing{
		mixKey: (xxSecret08 ^ xxSecret16) - mixSeed,
		altKey: uint64(xxSecret00^xxSecret04) + altSeed,
		mask:   a.BucketCount() - 1,
	}
}

// prepare is ckf.Addressing.Prepare.
func (f fastAddressing) prepare(full uint64) ckf.Probe {
	// 4..8-byte branch at length 8: the two 32-bit halves swapped.
	h := (full>>32 | full<<32) ^ f.mixKey
	h ^= bits.RotateLeft64(h, 49) ^ bits.RotateLeft64(h, 24)
	h *= 0x9fb21c651e98df25
	h ^= h>>35 + 8
	h *= 0x9fb21c651e98df25
	h ^= h >> 28
	fp := uint16(h)
	if fp == 0 {
		fp = 1
	}
	ba := (h >> 16) & f.mask
	// 1..3-byte branch at length 2 over the fingerprint.
	c := uint64(fp)
	acc := (c*(1<<24+1))>>8 + 2<<8
	acc ^= f.altKey
	acc ^= acc >> 33
	acc *= xxPrime64b
	acc ^= acc >> 29
	acc *= xxPrime64c
	acc ^= acc >> 32
	d := acc & f.mask
	if d == 0 {
		d = 1
	}
	return ckf.Probe{Fingerprint: fp, BucketA: uint32(ba), BucketB: uint32(ba ^ d)}
}

// NextSequenceHash is ckf.NextSequenceHash, bit for bit, written for its
// fixed 16-byte input so it inlines: for callers that chain hashes on a
// query path (the bench's exact index uses it, so both indexes pay the same
// hashing cost).
func NextSequenceHash(parent ckf.SequenceHash, local ckf.LocalBlockHash) ckf.SequenceHash {
	return nextSequenceHash(parent, local)
}
