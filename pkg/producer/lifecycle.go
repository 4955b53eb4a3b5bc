package producer

import (
	"maps"
	"math"
	"slices"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Flush cuts the publication window now, whatever the cadence.
func (s *State) Flush() Batch { return s.drain() }

// RemoveRank removes every block of one (worker, dp_rank) and then cuts the
// window. On error the removals already made stay in the window.
func (s *State) RemoveRank(m Member) (Batch, error) {
	if err := s.removeMember(m); err != nil {
		return Batch{}, err
	}
	return s.drain(), nil
}

// RemoveWorker removes every dp rank of workerID, then cuts the window.
func (s *State) RemoveWorker(workerID uint64) (Batch, error) {
	list := s.memberList[:0]
	for m := range s.members {
		if m.WorkerID == workerID {
			list = append(list, m)
		}
	}
	slices.SortFunc(list, Member.Compare)
	s.memberList = list[:0]
	for _, m := range list {
		if err := s.removeMember(m); err != nil {
			return Batch{}, err
		}
	}
	return s.drain(), nil
}

// ReplaceRank replaces member m's blocks with hashes; see ReplaceRanks.
func (s *State) ReplaceRank(m Member, hashes []uint64) (Batch, error) {
	return s.ReplaceRanks(map[Member][]uint64{m: hashes})
}

// ReplaceRanks transactionally replaces the block sets of several members
// (spec §6.4). The hashes are full hashes; in canonical mode each becomes a
// lineage edge whose external hash equals the canonical hash. Any error
// (including capacity exhaustion) leaves the state untouched.
//
// The new state is derived from a copy of the current one (removals, then
// stores) rather than from an empty table, so unrelated buckets keep their
// layout; the spec only makes exact ownership and convergence contractual.
// The new window is the diff against what consumers have seen: buckets dirty
// in the old window keep their original and stay dirty only if the new value
// differs from it; other buckets become dirty if their value changed. The
// window is then cut.
func (s *State) ReplaceRanks(replacements map[Member][]uint64) (Batch, error) {
	next := s.cloneExact()
	order := slices.SortedFunc(maps.Keys(replacements), Member.Compare)
	for _, m := range order {
		if err := next.removeMember(m); err != nil {
			return Batch{}, err
		}
	}
	for _, m := range order {
		for _, h := range replacements[m] {
			if err := next.storeOne(m, h, h); err != nil {
				return Batch{}, err
			}
		}
	}

	oldWords, newWords := s.mut.words, next.mut.words
	marks := make([]Touch, 0, s.dirty.len())
	for i, b := range s.dirty.order {
		if orig := s.dirty.originals[i]; newWords[b] != orig {
			marks = append(marks, Touch{Bucket: b, Original: orig})
		}
	}
	for b := range newWords {
		if oldWords[b] != newWords[b] && !s.dirty.isDirty(uint64(b)) {
			marks = append(marks, Touch{Bucket: uint64(b), Original: oldWords[b]})
		}
	}
	s.dirty.reset()
	s.mut.words, s.mut.rng = next.mut.words, next.mut.rng
	s.members, s.owners = next.members, next.owners
	for _, t := range marks {
		s.dirty.mark(t.Bucket, t.Original)
	}
	s.pending = 1
	return s.drain(), nil
}

// storeOne is the §6.3 store of one edge (ext → h). In verbatim mode ext ==
// h. A duplicate edge is a no-op; re-mapping ext to another hash is
// ErrInvalidBlockSequence; a capacity failure records nothing.
func (s *State) storeOne(m Member, ext, h uint64) error {
	_, err := s.storeEdge(m, s.members[m], ext, h, s.mut.addr.Prepare(h))
	return err
}

// storeEdge is storeOne for m's known state ms (nil if m owns nothing yet)
// and h's probe p. It returns m's state afterwards.
func (s *State) storeEdge(m Member, ms *memberState, ext, h uint64, p ckf.Probe) (*memberState, error) {
	// Each table is walked once: the slot a lookup returns is where the
	// entry is written (nothing else changes either table in between).
	lslot := 0
	if ms != nil {
		slot, cur, dup := ms.lineage.lookup(ext)
		if dup {
			if cur != h {
				return ms, ckf.ErrInvalidBlockSequence
			}
			return ms, nil
		}
		lslot = slot
	}
	oslot, v, owned := s.owners.lookup(h)
	o := unpackOwnership(v)
	if owned && o.Refcount == math.MaxUint32 {
		return ms, ckf.ErrOwnershipDegreeOverflow
	}
	if !o.Resident {
		touched, err := s.mut.insertProbe(p, s.mut.maxKicks)
		if err != nil {
			s.tel.capacityFailures++
			return ms, err
		}
		s.markTouched(touched)
		o.Resident = true
	}
	o.Refcount++
	s.owners.storeAt(oslot, h, o.pack())
	if ms == nil {
		ms = s.newMember(m)
		ms.lineage.put(ext, h)
		return ms, nil
	}
	ms.lineage.storeAt(lslot, ext, h)
	return ms, nil
}

// cloneExact copies the exact state and lane; the copy has an empty window.
func (s *State) cloneExact() *State {
	c := &State{
		cfg:     s.cfg,
		format:  s.format,
		mut:     Mutator{words: slices.Clone(s.mut.words), addr: s.mut.addr, maxKicks: s.mut.maxKicks, rng: s.mut.rng},
		members: make(map[Member]*memberState, len(s.members)),
		owners:  s.owners.clone(),
		dirty:   newDirtyWindow(uint64(len(s.mut.words))),
	}
	for m, ms := range s.members {
		c.members[m] = &memberState{lineage: ms.lineage.clone()}
	}
	return c
}

// BarrierSnapshot copies the whole lane, then cuts the window (spec §6.7).
// The tail batch applied to the previously published state yields words. If
// the copy cannot be made the window is left intact (nothing unpublished is
// lost) and the error wraps ckf.ErrAllocationFailed. words is owned by the
// caller; the tail follows Batch's lifetime rule.
func (s *State) BarrierSnapshot() (tail Batch, words []uint64, err error) {
	if s.failNextSnapshotAlloc {
		s.failNextSnapshotAlloc = false
		return Batch{}, nil, &ckf.BuildError{Kind: ckf.ErrAllocationFailed}
	}
	words = slices.Clone(s.mut.words)
	return s.drain(), words, nil
}
