package route

// KeyHash derives a Request.Key from a prompt: it folds the prompt's block
// count and its sequence hashes (each block's hash chained from the ones
// before it), so one prompt gets one key on every transport and in the
// simulator, and equal DCs split distinct prompts apart while one prompt
// keeps its DC among them. This is the one tie-break of the product and of
// internal/routesim.
type KeyHash struct{ h uint64 }

// NewKeyHash starts the key of a prompt of blocks blocks.
func NewKeyHash(blocks int) KeyHash { return KeyHash{h: 0x9e3779b97f4a7c15 ^ uint64(blocks)} }

// Add folds the next block's sequence hash.
func (k *KeyHash) Add(seq uint64) {
	k.h ^= seq
	k.h *= 0xbf58476d1ce4e5b9
	k.h ^= k.h >> 31
}

// Sum is the key; never 0 (which Route reads as "draw one").
func (k KeyHash) Sum() uint64 {
	if k.h == 0 {
		return 1
	}
	return k.h
}

// KeyOf is the key of a prompt given by its sequence hashes, in order.
func KeyOf[S ~uint64](seqs []S) uint64 {
	k := NewKeyHash(len(seqs))
	for _, s := range seqs {
		k.Add(uint64(s))
	}
	return k.Sum()
}
