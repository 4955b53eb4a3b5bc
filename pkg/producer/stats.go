package producer

import (
	"fmt"
	"unsafe"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Stats are the producer diagnostics of spec §6.8.
type Stats struct {
	Mode ckf.HashMode
	// Members is the number of (worker, dp_rank) with at least one block.
	Members int
	// Contributions is the sum of the members' block counts (edges).
	Contributions int
	// UniqueBlocks is the number of tracked full hashes.
	UniqueBlocks int
	// OmittedBlocks counts tracked but non-resident hashes (canonical mode).
	OmittedBlocks int
	// OccupiedBuckets and OccupiedSlots are read from the lane; slots equal
	// UniqueBlocks - OmittedBlocks when the state is consistent.
	OccupiedBuckets int
	OccupiedSlots   int
	BucketCount     uint64

	UnknownRemovals        uint64
	CapacityFailures       uint64
	PhysicalTouches        uint64
	DistinctTouchedBuckets uint64
	EmittedImages          uint64
	NetRevertedBuckets     uint64
	Publications           uint64

	PendingEvents uint64
	DirtyBuckets  int

	// LaneBytes is the lane allocation; ExactBytesEstimate a rough lower
	// bound of the ownership maps' payload.
	LaneBytes          uint64
	ExactBytesEstimate uint64
}

// Stats computes the diagnostics; it scans the lane (O(bucket_count)).
func (s *State) Stats() Stats {
	st := Stats{
		Mode:                   s.cfg.Mode,
		Members:                len(s.members),
		UniqueBlocks:           s.owners.len(),
		BucketCount:            uint64(len(s.mut.words)),
		UnknownRemovals:        s.tel.unknownRemovals,
		CapacityFailures:       s.tel.capacityFailures,
		PhysicalTouches:        s.tel.physicalTouches,
		DistinctTouchedBuckets: s.tel.distinctTouched,
		EmittedImages:          s.tel.emittedImages,
		NetRevertedBuckets:     s.tel.netReverted,
		Publications:           s.tel.publications,
		PendingEvents:          s.pending,
		DirtyBuckets:           s.dirty.len(),
		LaneBytes:              uint64(len(s.mut.words)) * 8,
	}
	for _, ms := range s.members {
		st.Contributions += ms.lineage.len()
	}
	for _, v := range s.owners.all() {
		if !unpackOwnership(v).Resident {
			st.OmittedBlocks++
		}
	}
	for _, w := range s.mut.words {
		if w != 0 {
			st.OccupiedBuckets++
			st.OccupiedSlots += ckf.OccupiedSlots(w)
		}
	}
	st.ExactBytesEstimate = uint64(st.Contributions)*16 + uint64(st.UniqueBlocks)*uint64(8+unsafe.Sizeof(BlockOwnership{})) +
		uint64(st.Members)*uint64(unsafe.Sizeof(Member{})+8)
	return st
}

// String renders the stats on one line for logs.
func (st Stats) String() string {
	return fmt.Sprintf("mode=%s members=%d contributions=%d unique=%d omitted=%d occupied_buckets=%d occupied_slots=%d/%d "+
		"unknown_removals=%d capacity_failures=%d touches=%d distinct_touched=%d emitted=%d net_reverted=%d publications=%d pending=%d dirty=%d",
		st.Mode, st.Members, st.Contributions, st.UniqueBlocks, st.OmittedBlocks, st.OccupiedBuckets, st.OccupiedSlots, st.BucketCount*4,
		st.UnknownRemovals, st.CapacityFailures, st.PhysicalTouches, st.DistinctTouchedBuckets, st.EmittedImages, st.NetRevertedBuckets,
		st.Publications, st.PendingEvents, st.DirtyBuckets)
}

// UniqueBlocks is the number of tracked full hashes, in O(1): Stats scans
// the lane and the tables, this does not.
func (s *State) UniqueBlocks() int { return s.owners.len() }

// OccupiedSlots is Stats().OccupiedSlots: a scan of the lane alone, without
// Stats' walks of the ownership tables, for callers that sample it often
// (the relay's gauge, once per heartbeat).
func (s *State) OccupiedSlots() int {
	n := 0
	for _, w := range s.mut.words {
		if w != 0 {
			n += ckf.OccupiedSlots(w)
		}
	}
	return n
}
