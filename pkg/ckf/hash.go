package ckf

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// LocalBlockHash is the XXH3 hash of one block's tokens (spec §2.1).
type LocalBlockHash uint64

// SequenceHash is a rolling prefix hash (spec §2.2); the CKF stores these.
type SequenceHash uint64

// ComputeBlockHash hashes raw bytes with the token seed 1337.
func ComputeBlockHash(data []byte) uint64 { return xxh3.HashSeed(data, XXH3Seed) }

// LocalBlockHashes cuts tokens into complete blocks of blockSize and appends
// one LocalBlockHash per complete block to dst. A trailing partial block is
// ignored. blockSize 0 yields nothing.
func LocalBlockHashes(dst []LocalBlockHash, tokens []uint32, blockSize int) []LocalBlockHash {
	if blockSize <= 0 {
		return dst
	}
	var stack [256 * 4]byte
	buf := stack[:0]
	if 4*blockSize > len(stack) {
		buf = make([]byte, 0, 4*blockSize)
	}
	for start := 0; start+blockSize <= len(tokens); start += blockSize {
		buf = buf[:0]
		for _, t := range tokens[start : start+blockSize] {
			buf = binary.LittleEndian.AppendUint32(buf, t)
		}
		dst = append(dst, LocalBlockHash(xxh3.HashSeed(buf, XXH3Seed)))
	}
	return dst
}

// NextSequenceHash chains one more local hash onto a parent sequence hash.
func NextSequenceHash(parent SequenceHash, local LocalBlockHash) SequenceHash {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(parent))
	binary.LittleEndian.PutUint64(b[8:], uint64(local))
	return SequenceHash(xxh3.HashSeed(b[:], XXH3Seed))
}

// SequenceHashes computes the chain s0 = h0, si = next(s(i-1), hi), appending
// to dst (which the caller may reuse to stay allocation-free).
func SequenceHashes(dst []SequenceHash, locals []LocalBlockHash) []SequenceHash {
	for i, h := range locals {
		if i == 0 {
			dst = append(dst, SequenceHash(h))
			continue
		}
		dst = append(dst, NextSequenceHash(dst[len(dst)-1], h))
	}
	return dst
}
