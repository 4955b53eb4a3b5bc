package bench

import (
	"math/bits"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// ExactIndex is the exact global index the CKF is compared with: a Go map
// from a block's canonical (sequence) hash to the mask of the DCs holding
// it. Memory is whatever the runtime's map needs; nothing is approximated.
//
// Its search is the best the data allows, not a strawman: every DC's block
// set is prefix-closed (a stored chain always holds its parents), so along
// a query the masks only shrink, mask(p+1) ⊆ mask(p). The depths then
// follow from the few positions where the mask changes, each found by a
// galloping then binary search: (distinct depths + 1) × O(log n) map
// lookups, and only the positions visited are hashed.
//
// The map is split in ExactShards maps by the hash's top bit so that a
// build can fill them on as many goroutines; a lookup picks its shard with
// one shift.
type ExactIndex struct {
	m [ExactShards]map[uint64]uint16
}

// ExactShards is the number of independently built maps.
const ExactShards = 2

func shardOf(h uint64) int { return int(h >> 63) }

// NewExactIndex returns an empty index.
func NewExactIndex() *ExactIndex {
	x := &ExactIndex{}
	for i := range x.m {
		x.m[i] = make(map[uint64]uint16)
	}
	return x
}

// Add records that dc holds the chain of locals (all its prefixes); it
// returns how many of its blocks were new to dc.
func (x *ExactIndex) Add(dc int, locals []ckf.LocalBlockHash) (added int) {
	for s := range ExactShards {
		added += x.AddShard(s, dc, locals)
	}
	return added
}

// AddShard is Add restricted to the blocks of one shard; calls for
// different shards may run concurrently.
func (x *ExactIndex) AddShard(shard, dc int, locals []ckf.LocalBlockHash) (added int) {
	bit := uint16(1) << dc
	mp := x.m[shard]
	var h ckf.SequenceHash
	for i, l := range locals {
		if i == 0 {
			h = ckf.SequenceHash(l)
		} else {
			h = ckf.NextSequenceHash(h, l)
		}
		if shardOf(uint64(h)) != shard {
			continue
		}
		m := mp[uint64(h)]
		if m&bit == 0 {
			mp[uint64(h)] = m | bit
			added++
		}
	}
	return added
}

// lookup returns the DC mask of a canonical hash.
func (x *ExactIndex) lookup(h uint64) uint16 { return x.m[shardOf(h)][h] }

// Len is the number of distinct blocks.
func (x *ExactIndex) Len() int {
	n := 0
	for _, m := range x.m {
		n += len(m)
	}
	return n
}

// ExactScratch holds one query goroutine's hash buffer.
type ExactScratch struct {
	seq    []ckf.SequenceHash
	locals []ckf.LocalBlockHash
	hashed int
}

func (s *ExactScratch) hashAt(pos int) uint64 {
	for ; s.hashed <= pos; s.hashed++ {
		if s.hashed == 0 {
			s.seq[0] = ckf.SequenceHash(s.locals[0])
		} else {
			s.seq[s.hashed] = ckf.NextSequenceHash(s.seq[s.hashed-1], s.locals[s.hashed])
		}
	}
	return uint64(s.seq[pos])
}

// Depths computes every DC's exact prefix depth for locals. It does not
// allocate once s has grown to the query length.
func (x *ExactIndex) Depths(locals []ckf.LocalBlockHash, s *ExactScratch, depths *[ckf.LaneCount]uint32) {
	*depths = [ckf.LaneCount]uint32{}
	n := len(locals)
	if n == 0 {
		return
	}
	if cap(s.seq) < n {
		s.seq = make([]ckf.SequenceHash, n)
	}
	s.seq, s.locals, s.hashed = s.seq[:n], locals, 0
	defer func() { s.locals = nil }()
	mask := func(p int) uint16 {
		if p >= n {
			return 0
		}
		return x.lookup(s.hashAt(p))
	}
	cur := mask(0)
	lo := 0 // mask(lo) == cur
	for cur != 0 {
		// Gallop to a position whose mask differs, then bisect (lo, hi).
		hi, step := lo+1, 1
		for hi < n && mask(hi) == cur {
			lo, step = hi, step*2
			hi = lo + step
		}
		hi = min(hi, n)
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if mask(mid) == cur {
				lo = mid
			} else {
				hi = mid
			}
		}
		next := mask(hi)
		for m := cur &^ next; m != 0; m &= m - 1 {
			depths[bits.TrailingZeros16(m)] = uint32(hi)
		}
		cur, lo = next, hi
	}
}
