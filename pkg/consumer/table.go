package consumer

import (
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// SWAR constants of the packed-bucket zero-lane test (spec §4.1).
const (
	slotsLo uint64 = 0x0001_0001_0001_0001
	slotsHi uint64 = 0x8000_8000_8000_8000
)

// table is the transposed consumer table (spec §4.3): bucketCount rows of 16
// lane words, bucket-major, so one bucket's lanes share two cache lines.
//
// Concurrency: every word is an independent atomic; rows are never updated
// as a group (the weak-read contract of the indexer).
type table struct {
	words       []atomic.Uint64
	bucketCount uint64
	// hugeAdvised: the words are a mapping the kernel accepted
	// MADV_HUGEPAGE for (see allocWords).
	hugeAdvised bool
}

// maxTableBuckets bounds a table at 2^40 rows (128 TiB): far past any
// machine, and below the largest slice Go can make of 8-byte words (2^48
// bytes on amd64), whose make would otherwise panic in the heap fallback.
const maxTableBuckets = 1 << 40

// newTable allocates bucketCount*16 words. Zero and sizes beyond
// maxTableBuckets (whose byte count no address space holds) are
// ckf.ErrCapacityOverflow.
func newTable(bucketCount uint64) (*table, error) {
	if bucketCount == 0 || bucketCount > maxTableBuckets {
		return nil, ckfBuildError(&ckf.BuildError{Kind: ckf.ErrCapacityOverflow})
	}
	t := &table{bucketCount: bucketCount}
	t.words, t.hugeAdvised = allocWords(t, bucketCount*ckf.LaneCount)
	return t, nil
}

// HugePagesEnv names the environment variable that, set to "off", keeps
// every new table on the Go heap instead of a huge-page mapping (Linux).
const HugePagesEnv = "CKFRELAY_TABLE_HUGEPAGES"

// TableMemory describes where an indexer's table lives.
type TableMemory struct {
	// Bytes is the table's size: buckets × 16 lanes × 8 bytes.
	Bytes uint64
	// HugePagesAdvised: the table is its own mapping advised MADV_HUGEPAGE.
	HugePagesAdvised bool
	// HugePageBytes is how much of it the kernel backs with 2 MiB pages
	// right now (Linux /proc/self/smaps; 0 elsewhere). Pages are only
	// backed once written.
	HugePageBytes uint64
}

func (t *table) memory() TableMemory {
	size := uintptr(len(t.words)) * 8
	return TableMemory{
		Bytes:            uint64(size),
		HugePagesAdvised: t.hugeAdvised,
		HugePageBytes:    min(hugePageBytes(uintptr(unsafe.Pointer(&t.words[0])), size), uint64(size)),
	}
}

func (t *table) row(bucket uint64) *[ckf.LaneCount]atomic.Uint64 {
	i := bucket * ckf.LaneCount
	return (*[ckf.LaneCount]atomic.Uint64)(t.words[i : i+ckf.LaneCount])
}

// StoreImage stores one lane word of one bucket.
func (t *table) StoreImage(bucket uint64, lane int, value uint64) {
	t.words[bucket*ckf.LaneCount+uint64(lane)].Store(value)
}

// LoadImage loads one lane word of one bucket.
func (t *table) LoadImage(bucket uint64, lane int) uint64 {
	return t.words[bucket*ckf.LaneCount+uint64(lane)].Load()
}

// ClearLane stores 0 into every bucket of lane.
func (t *table) ClearLane(lane int) {
	for i := uint64(lane); i < uint64(len(t.words)); i += ckf.LaneCount {
		t.words[i].Store(0)
	}
}

// Probe returns the mask of the lanes whose word in either candidate bucket
// holds p.Fingerprint. It tests all 16 lanes branch-free: per lane the SWAR
// zero-slot test of both words is OR-ed and turned into one bit.
func (t *table) Probe(p ckf.Probe) uint16 {
	a := t.row(uint64(p.BucketA))
	b := t.row(uint64(p.BucketB))
	fp := uint64(p.Fingerprint) * slotsLo
	var mask uint64
	for l := range ckf.LaneCount {
		da := a[l].Load() ^ fp
		db := b[l].Load() ^ fp
		hit := (da-slotsLo)&^da&slotsHi | (db-slotsLo)&^db&slotsHi
		// hit != 0 ⇔ (hit | -hit) has its top bit set.
		mask |= ((hit | -hit) >> 63) << l
	}
	return uint16(mask)
}

// laneHalves returns the lane range [lo, hi) whose words hold need's
// lanes: a row's lanes 0-7 share its first 64-byte cache line and lanes
// 8-15 its second, so a need inside one half reads one line per row.
func laneHalves(need uint16) (lo, hi int) {
	switch {
	case need&0xff00 == 0:
		return 0, 8
	case need&0x00ff == 0:
		return 8, 16
	default:
		return 0, 16
	}
}

// lanesRead is the set of lanes probeLanes(p, need) answers for: need
// itself when it is sparse, else the half or the whole row holding it.
// Bits outside it are zero in the answer and say nothing.
func lanesRead(need uint16) uint16 {
	if bits.OnesCount16(need) <= sparseProbeLanes {
		return need
	}
	lo, hi := laneHalves(need)
	if hi-lo == 8 {
		return 0xff << lo
	}
	return 0xffff
}

// probeLanes is Probe reading only the cache lines that hold need's lanes,
// and for a sparse need only its lanes' words; bits outside
// lanesRead(need) are zero.
func (t *table) probeLanes(p ckf.Probe, need uint16) uint16 {
	if bits.OnesCount16(need) <= sparseProbeLanes {
		return t.probeSparse(p, need)
	}
	lo, hi := laneHalves(need)
	if lo == 0 && hi == ckf.LaneCount {
		return t.Probe(p)
	}
	a := t.row(uint64(p.BucketA))
	b := t.row(uint64(p.BucketB))
	fp := uint64(p.Fingerprint) * slotsLo
	var mask uint64
	for l := lo; l < hi; l++ {
		da := a[l&15].Load() ^ fp
		db := b[l&15].Load() ^ fp
		hit := (da-slotsLo)&^da&slotsHi | (db-slotsLo)&^db&slotsHi
		mask |= ((hit | -hit) >> 63) << l
	}
	return uint16(mask)
}

// sparseProbeLanes is the lane count up to which a probe tests only the
// needed lanes' words: a binary-search group is often a few lanes, and
// testing eight or sixteen words for them costs more than the loop (16
// lanes, 128 blocks: hot p50 2.46 → 2.2 µs, cold 4.22 → 4.0 µs; 3, 6 and
// 8 measured, 6 and 8 alike).
const sparseProbeLanes = 6

// probeSparse is probeLanes testing need's lanes one by one; other bits
// are zero.
func (t *table) probeSparse(p ckf.Probe, need uint16) uint16 {
	a := t.row(uint64(p.BucketA))
	b := t.row(uint64(p.BucketB))
	var mask uint16
	for m := need; m != 0; m &= m - 1 {
		l := bits.TrailingZeros16(m) & 15
		if ckf.Contains(a[l].Load(), p.Fingerprint) || ckf.Contains(b[l].Load(), p.Fingerprint) {
			mask |= 1 << l
		}
	}
	return mask
}

// touchLanes is touch for the cache lines holding need's lanes.
func (t *table) touchLanes(p ckf.Probe, need uint16) uint64 {
	lo, hi := laneHalves(need)
	a := t.row(uint64(p.BucketA))
	b := t.row(uint64(p.BucketB))
	if hi-lo == 8 {
		return a[lo&15].Load() ^ b[lo&15].Load()
	}
	return a[0].Load() ^ a[8].Load() ^ b[0].Load() ^ b[8].Load()
}

// prefetchLanes requests the cache lines holding need's lanes of both
// candidate rows without waiting for them (see prefetchRows).
func (t *table) prefetchLanes(p ckf.Probe, need uint16) {
	lo, hi := laneHalves(need)
	a := unsafe.Pointer(&t.words[uint64(p.BucketA)*ckf.LaneCount+uint64(lo)])
	b := unsafe.Pointer(&t.words[uint64(p.BucketB)*ckf.LaneCount+uint64(lo)])
	if hi-lo == 8 {
		prefetchLines(a, b)
		return
	}
	prefetchRows(a, b)
}
