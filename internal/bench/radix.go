package bench

import (
	"encoding/binary"
	"math/bits"
	"runtime"
	"sync"
	"time"

	iradix "github.com/hashicorp/go-immutable-radix/v2"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// RadixIndex is the second exact global index the CKF is compared with: a
// radix tree (github.com/hashicorp/go-immutable-radix/v2) keyed by the
// chain of local block hashes, 8 bytes little-endian per block, so block
// i's key is the bytes of blocks 0..i and a chain's prefixes lie on one
// path from the root. A key's value is the mask of the DCs holding that
// prefix.
//
// Its search is one walk down the query's path (PathIterator): the leaves
// met on the way are the stored prefixes of the query, shortest first, and
// since every DC's set is prefix-closed a DC's depth is the number of
// leading prefixes whose mask holds it. The walk stops as soon as no DC is
// left. A trie cannot do with fewer node visits: each prefix is reached
// only through its parent, and a lookup of one prefix (Get) walks the same
// path from the root.
//
// The library stores the caller's key slice in the leaf (no copy) and
// points new nodes' prefixes into it; the build hands it one buffer per
// chain with new blocks, whose prefixes share it, and re-inserts existing
// keys with the tree's own key slice. Every node and leaf still carries a
// mutation channel (112 bytes of heap each) whether or not mutation
// tracking is on: with the node (64 B), the leaf (48 B) and the edge (16
// B) about 350 B per distinct block that no choice of key avoids.
//
// Keys are split over RadixShards trees by the top bit of the chain's
// first local hash so that a build can fill them on as many goroutines; a
// query picks its tree with one shift.
type RadixIndex struct {
	trees [RadixShards]*iradix.Tree[uint16]
}

// RadixShards is the number of independently built trees.
const RadixShards = 2

// radixBatch is the number of chains one build transaction takes before it
// is committed.
const radixBatch = 4096

func radixShardOf(first ckf.LocalBlockHash) int { return int(uint64(first) >> 63) }

// NewRadixIndex returns an empty index.
func NewRadixIndex() *RadixIndex {
	x := &RadixIndex{}
	for i := range x.trees {
		x.trees[i] = iradix.New[uint16]()
	}
	return x
}

// Len is the number of distinct prefixes (distinct blocks).
func (x *RadixIndex) Len() int {
	n := 0
	for _, t := range x.trees {
		n += t.Len()
	}
	return n
}

// RadixBuilder fills one shard's tree through transactions of radixBatch
// chains. A builder belongs to one goroutine; builders of different shards
// may run at once. The tree only changes when a transaction is committed:
// call Commit after the last Add.
type RadixBuilder struct {
	x       *RadixIndex
	shard   int
	txn     *iradix.Txn[uint16]
	pending int
	key     []byte
	have    [][]byte // the stored keys met along the chain's path
	masks   []uint16
}

// Builder returns a builder for shard's tree.
func (x *RadixIndex) Builder(shard int) *RadixBuilder {
	return &RadixBuilder{x: x, shard: shard, txn: x.trees[shard].Txn()}
}

// radixKey writes the chain key of locals into dst (grown as needed).
func radixKey(dst []byte, locals []ckf.LocalBlockHash) []byte {
	n := 8 * len(locals)
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	for i, l := range locals {
		binary.LittleEndian.PutUint64(dst[8*i:], uint64(l))
	}
	return dst
}

// Add records that dc holds the chain of locals (all its prefixes) if the
// chain belongs to the builder's shard, and returns how many of its blocks
// were new to dc (0 for a chain of another shard).
func (b *RadixBuilder) Add(dc int, locals []ckf.LocalBlockHash) (added int) {
	if len(locals) == 0 || radixShardOf(locals[0]) != b.shard {
		return 0
	}
	bit := uint16(1) << dc
	b.key = radixKey(b.key, locals)
	// The chain's stored prefixes: a union of prefix-closed sets, so
	// positions 0..len(have)-1.
	b.have, b.masks = b.have[:0], b.masks[:0]
	it := b.txn.Root().PathIterator(b.key)
	for k, m, ok := it.Next(); ok && len(k) == 8*(len(b.have)+1); k, m, ok = it.Next() {
		b.have = append(b.have, k)
		b.masks = append(b.masks, m)
	}
	for p, k := range b.have {
		if b.masks[p]&bit == 0 {
			b.txn.Insert(k, b.masks[p]|bit)
			added++
		}
	}
	if len(b.have) < len(locals) {
		// The new prefixes share one buffer the tree keeps.
		own := make([]byte, len(b.key))
		copy(own, b.key)
		for p := len(b.have); p < len(locals); p++ {
			b.txn.Insert(own[:8*(p+1):8*(p+1)], bit)
			added++
		}
	}
	if b.pending++; b.pending >= radixBatch {
		b.Commit()
	}
	return added
}

// Commit publishes the transaction's writes as the shard's tree and starts
// the next transaction; the superseded tree becomes garbage.
func (b *RadixBuilder) Commit() {
	b.x.trees[b.shard] = b.txn.Commit()
	b.txn = b.x.trees[b.shard].Txn()
	b.pending = 0
}

// Add records that dc holds the chain of locals through a one-chain
// transaction and returns how many of its blocks were new to dc.
func (x *RadixIndex) Add(dc int, locals []ckf.LocalBlockHash) int {
	if len(locals) == 0 {
		return 0
	}
	b := x.Builder(radixShardOf(locals[0]))
	added := b.Add(dc, locals)
	b.Commit()
	return added
}

// RadixScratch holds one query goroutine's key buffer.
type RadixScratch struct {
	key []byte
}

// Depths computes every DC's exact prefix depth for locals with one walk
// down the query's path. It does not allocate once s has grown to the
// query length.
func (x *RadixIndex) Depths(locals []ckf.LocalBlockHash, s *RadixScratch, depths *[ckf.LaneCount]uint32) {
	*depths = [ckf.LaneCount]uint32{}
	if len(locals) == 0 {
		return
	}
	s.key = radixKey(s.key, locals)
	it := x.trees[radixShardOf(locals[0])].Root().PathIterator(s.key)
	cur := uint16(1<<ckf.LaneCount - 1)
	p := 0 // prefixes whose mask every DC of cur is in
	for k, m, ok := it.Next(); ok && len(k) == 8*(p+1); k, m, ok = it.Next() {
		for d := cur &^ m; d != 0; d &= d - 1 {
			depths[bits.TrailingZeros16(d)] = uint32(p)
		}
		if cur &= m; cur == 0 {
			return
		}
		p++
	}
	for ; cur != 0; cur &= cur - 1 {
		depths[bits.TrailingZeros16(cur)] = uint32(p)
	}
}

// buildScaleRadix builds the radix side of the scale run over the same
// requests as the exact map (perDC[dc] of DC dc's stream), one goroutine
// per tree, and fills side's build and memory figures, measured from heap0
// and rss0.
func buildScaleRadix(ts *traceStream, perDC []int, side *RadixSide, heap0, rss0 uint64) *RadixIndex {
	rx := NewRadixIndex()
	t0 := time.Now()
	var (
		busy   [RadixShards]time.Duration
		added  [RadixShards]uint64
		blocks uint64
		wg     sync.WaitGroup
	)
	for shard := range RadixShards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s0 := time.Now()
			b := rx.Builder(shard)
			var locals []ckf.LocalBlockHash
			var n uint64
			for dc, left := range perDC {
				if left == 0 {
					continue
				}
				ts.forDC(dc, func(r uint64, i int, _ uint64) bool {
					locals = ts.locals(locals, r, i)
					added[shard] += uint64(b.Add(dc, locals))
					n += uint64(len(locals))
					left--
					return left > 0
				})
			}
			b.Commit()
			busy[shard] = time.Since(s0)
			if shard == 0 {
				blocks = n
			}
		}()
	}
	wg.Wait()
	wall := time.Since(t0)
	var total time.Duration
	for s := range RadixShards {
		total += busy[s]
		side.Memberships += added[s]
	}
	heap1, rss1 := residentMemory()
	side.BuildSeconds = total.Seconds()
	side.BuildWallSeconds = wall.Seconds()
	side.IngestBlocksPerSec = float64(blocks) / total.Seconds()
	side.HeapBytes, side.RSSBytes = sub0(heap1, heap0), sub0(rss1, rss0)
	return rx
}

// checkRadix compares the radix tree's depths with the exact map's for qs.
func checkRadix(side *RadixSide, rx *RadixIndex, x *ExactIndex, qs [][]ckf.LocalBlockHash, lanes int) {
	var rs RadixScratch
	var es ExactScratch
	var got, want [ckf.LaneCount]uint32
	for _, q := range qs {
		rx.Depths(q, &rs, &got)
		x.Depths(q, &es, &want)
		side.CheckedQueries++
		for l := range lanes {
			side.CheckedAnswers++
			if got[l] != want[l] {
				side.Mismatches++
			}
		}
	}
}

// radixAllocsPerQuery counts the heap allocations per query of a pass over
// qs: the process's count, so the least of three passes, lest a runtime
// allocation elsewhere be charged to the queries.
func radixAllocsPerQuery(rx *RadixIndex, qs [][]ckf.LocalBlockHash) float64 {
	var s RadixScratch
	var d [ckf.LaneCount]uint32
	for _, q := range qs[:min(64, len(qs))] {
		rx.Depths(q, &s, &d)
	}
	least := uint64(1<<64 - 1)
	for range 3 {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for _, q := range qs {
			rx.Depths(q, &s, &d)
		}
		runtime.ReadMemStats(&m1)
		least = min(least, m1.Mallocs-m0.Mallocs)
	}
	return float64(least) / float64(len(qs))
}
