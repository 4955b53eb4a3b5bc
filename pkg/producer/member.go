package producer

import "cmp"

// Member is one event source of a pool: (worker_id, dp_rank).
type Member struct {
	WorkerID uint64
	DpRank   uint32
}

// Compare orders members by worker id, then dp rank.
func (m Member) Compare(o Member) int {
	if c := cmp.Compare(m.WorkerID, o.WorkerID); c != 0 {
		return c
	}
	return cmp.Compare(m.DpRank, o.DpRank)
}

// MemberCount is one row of State.MemberCounts.
type MemberCount struct {
	Member Member
	Blocks int
}

// memberState is one member's exact ownership: external block hash → full
// hash. In verbatim mode both are the event's block_hash; in canonical mode
// the value is the resolved canonical (sequence) hash.
type memberState struct {
	lineage u64Table
}

// BlockOwnership is the exact state of one tracked full hash.
type BlockOwnership struct {
	// Refcount is the number of (member, external hash) edges mapping to the
	// hash; in verbatim mode that is the number of owning members.
	Refcount uint32
	// Resident says a fingerprint copy is in the lane. Always true in
	// verbatim mode; false in canonical mode for a capacity-omitted block.
	Resident bool
}

const residentBit = uint64(1) << 32

func (o BlockOwnership) pack() uint64 {
	v := uint64(o.Refcount)
	if o.Resident {
		v |= residentBit
	}
	return v
}

func unpackOwnership(v uint64) BlockOwnership {
	return BlockOwnership{Refcount: uint32(v), Resident: v&residentBit != 0}
}
