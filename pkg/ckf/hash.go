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

// SaltedSeed is the token-hash seed of a request with a LoRA adapter name
// and/or a cache namespace (newer upstream; spec §2.1): 1337 plus
// XXH3(lora_name, 0) plus XXH3(cache_namespace, 1), wrapping, each term
// only when its string is non-empty. With neither it is XXH3Seed.
func SaltedSeed(loraName, cacheNamespace string) uint64 {
	seed := XXH3Seed
	if loraName != "" {
		seed += xxh3.HashSeed([]byte(loraName), 0)
	}
	if cacheNamespace != "" {
		seed += xxh3.HashSeed([]byte(cacheNamespace), 1)
	}
	return seed
}

// BlockOptions select the hashing variants of spec §2.1.
type BlockOptions struct {
	// Seed is the token-hash seed; 0 means XXH3Seed (see SaltedSeed).
	Seed uint64
	// Eagle hashes windows of BlockSize+1 tokens with stride BlockSize, so
	// n tokens give (n-1)/BlockSize blocks.
	Eagle bool
}

// LocalBlockHashesWith is LocalBlockHashes with a custom seed and the Eagle
// window variant.
func LocalBlockHashesWith(dst []LocalBlockHash, tokens []uint32, blockSize int, o BlockOptions) []LocalBlockHash {
	if blockSize <= 0 {
		return dst
	}
	seed := o.Seed
	if seed == 0 {
		seed = XXH3Seed
	}
	window := blockSize
	if o.Eagle {
		window++
	}
	// A stack buffer keeps the common block sizes allocation-free (the
	// engine bridge hashes every stored block through here).
	var stack [257 * 4]byte
	buf := stack[:0]
	if 4*window > len(stack) {
		buf = make([]byte, 0, 4*window)
	}
	for start := 0; start+window <= len(tokens); start += blockSize {
		buf = buf[:0]
		for _, t := range tokens[start : start+window] {
			buf = binary.LittleEndian.AppendUint32(buf, t)
		}
		dst = append(dst, LocalBlockHash(xxh3.HashSeed(buf, seed)))
	}
	return dst
}

// TokenHasher hashes a token stream block by block, exactly as
// LocalBlockHashesWith hashes the whole slice, while holding one window
// (4·(BlockSize+1) bytes at most): a decoder can hash the tokens of a
// request as it reads them instead of materialising them first.
type TokenHasher struct {
	bs, window int
	seed       uint64
	buf        []byte
}

// NewTokenHasher returns a hasher of blocks of blockSize tokens (>0).
func NewTokenHasher(blockSize int, o BlockOptions) TokenHasher {
	seed := o.Seed
	if seed == 0 {
		seed = XXH3Seed
	}
	window := blockSize
	if o.Eagle {
		window++
	}
	return TokenHasher{bs: blockSize, window: window, seed: seed, buf: make([]byte, 0, 4*window)}
}

// Add feeds the next token; it returns a block's hash (true) when the token
// completes a window.
func (h *TokenHasher) Add(t uint32) (LocalBlockHash, bool) {
	h.buf = binary.LittleEndian.AppendUint32(h.buf, t)
	if len(h.buf) < 4*h.window {
		return 0, false
	}
	sum := LocalBlockHash(xxh3.HashSeed(h.buf, h.seed))
	// The next window starts BlockSize tokens later: Eagle windows share
	// their last token with the next.
	n := copy(h.buf, h.buf[4*h.bs:])
	h.buf = h.buf[:n]
	return sum, true
}
