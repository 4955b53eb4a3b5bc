package producer

import (
	"iter"
	"math"
	"slices"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// Batch is DcCkfPublicationBatch: absolute images of the buckets whose value
// changed in one publication window, in first-touch order. An empty Batch
// means "no publication".
//
// Ownership: Images is backed by a buffer the State reuses; it stays valid
// only until the next call on that State that drains a window (ApplyEvent,
// Flush, RemoveRank, RemoveWorker, ReplaceRank(s), BarrierSnapshot). Callers
// that keep it longer must Clone it. Publisher.Publish hands the slice to the
// Sink within that validity and a Sink must therefore not retain it.
type Batch struct {
	Images []ckf.BucketImage
}

// Empty reports whether the batch carries no image.
func (b Batch) Empty() bool { return len(b.Images) == 0 }

// Clone returns a batch with its own copy of the images.
func (b Batch) Clone() Batch {
	if len(b.Images) == 0 {
		return Batch{}
	}
	return Batch{Images: slices.Clone(b.Images)}
}

// EventOutcome is DcCkfEventOutcome.
type EventOutcome struct {
	// FirstError is the first ckf.EventError the event hit, or nil. Earlier
	// and later blocks of the event may still have been applied.
	FirstError error
	// Publication is the drained window when the cadence boundary was reached
	// and at least one bucket changed; see Batch for its lifetime.
	Publication Batch
	// UnknownRemovals counts removed hashes this member did not own.
	UnknownRemovals uint64
	// PublicationBoundary says the window was cut (even if nothing changed).
	PublicationBoundary bool
	// ZeroParentRoot says a stored event named parent hash 0, which the
	// member does not hold, and was read as having no parent: the array
	// form of engines that write 0 for "none" (llm-d-inference-sim).
	ZeroParentRoot bool
}

// HasPublication reports whether Publication carries images.
func (o EventOutcome) HasPublication() bool { return !o.Publication.Empty() }

// telemetry are the monotonic counters of spec §6.1.
type telemetry struct {
	unknownRemovals  uint64
	capacityFailures uint64
	physicalTouches  uint64
	distinctTouched  uint64
	emittedImages    uint64
	netReverted      uint64
	publications     uint64
}

// State is DcCkfState: the exact ownership of one DC pool plus its owned CKF
// lane and publication window. Not safe for concurrent use.
type State struct {
	cfg    ckf.Config
	format ckf.FormatIdentity
	mut    Mutator

	members map[Member]*memberState
	owners  u64Table

	dirty   dirtyWindow
	pending uint64
	images  []ckf.BucketImage
	tel     telemetry

	// Reused scratch for one stored event / lifecycle op.
	evBlocks   []eventBlock
	evCands    []candidate
	evDedup    eventDedup
	freeMember []*memberState
	memberList []Member
	extScratch []uint64

	// Warm-up scratch: the probe and expected full hash of each block of
	// the chunk being applied, and the sink that consumes the warm-up loads
	// (its value means nothing). See warmBatch.
	warmProbes [warmBatch]ckf.Probe
	warmHashes [warmBatch]uint64
	warmSlots  [warmBatch]int
	warmSink   uint64

	// failNextSnapshotAlloc is a test hook: the next BarrierSnapshot fails
	// as if copying the lane could not allocate.
	failNextSnapshotAlloc bool
}

// warmBatch is how many blocks one warm-up pass covers. Each block's work is
// a chain of dependent cache misses (member table, owner table, lane
// buckets), and block after block those misses would serialize. A first pass
// that only loads every block's lines lets the CPU overlap the misses; the
// second pass then does the real work on warm lines. Go has no prefetch
// intrinsic, so plain loads whose results feed State.warmSink stand in for
// one. The warm-up never changes state, so it cannot change behaviour.
const warmBatch = 16

// maxPreallocBlocks caps the owner-map preallocation so a huge
// ExpectedBlocksPerDC does not reserve gigabytes up front.
const maxPreallocBlocks = 1 << 22

// NewState validates cfg and builds an empty state whose relocation RNG
// starts at ckf.LaneRNGSeed(cfg.Seed, 0).
func NewState(cfg ckf.Config) (*State, error) {
	format, addr, err := stateFormat(cfg)
	if err != nil {
		return nil, err
	}
	words := make([]uint64, format.BucketCount)
	owners := newU64Table(int(min(cfg.ExpectedBlocksPerDC, maxPreallocBlocks)))
	return newStateFrom(cfg, format, addr, words, ckf.LaneRNGSeed(cfg.Seed, 0), owners)
}

// stateFormat validates cfg and derives its format and addressing.
func stateFormat(cfg ckf.Config) (ckf.FormatIdentity, ckf.Addressing, error) {
	if err := cfg.Validate(); err != nil {
		return ckf.FormatIdentity{}, ckf.Addressing{}, err
	}
	format, err := cfg.Format()
	if err != nil {
		return ckf.FormatIdentity{}, ckf.Addressing{}, err
	}
	addr, err := ckf.NewAddressing(format.BucketCount, cfg.Seed)
	if err != nil {
		return ckf.FormatIdentity{}, ckf.Addressing{}, err
	}
	if format.BucketCount > math.MaxInt/8 {
		return ckf.FormatIdentity{}, ckf.Addressing{}, &ckf.BuildError{Kind: ckf.ErrCapacityOverflow}
	}
	return format, addr, nil
}

// newStateFrom assembles a state with no members around a lane, its RNG
// state and an owner table (NewState and RestoreState fill them).
func newStateFrom(cfg ckf.Config, format ckf.FormatIdentity, addr ckf.Addressing, words []uint64, rng uint64, owners u64Table) (*State, error) {
	mut, err := newMutator(words, addr, cfg.MaxKicks, rng)
	if err != nil {
		return nil, err
	}
	return &State{
		cfg:     cfg,
		format:  format,
		mut:     mut,
		members: make(map[Member]*memberState),
		owners:  owners,
		dirty:   newDirtyWindow(format.BucketCount),
	}, nil
}

// Config returns the producer configuration.
func (s *State) Config() ckf.Config { return s.cfg }

// Format returns the format identity consumers must match.
func (s *State) Format() ckf.FormatIdentity { return s.format }

// Mode returns the hash mode.
func (s *State) Mode() ckf.HashMode { return s.cfg.Mode }

// ApplyEvent applies one router event (spec §6.2): tier filter, pending
// count, per-block store/remove or member clear, then a cut of the
// publication window when the cadence boundary is reached.
func (s *State) ApplyEvent(ev *routerevent.RouterEvent) EventOutcome {
	data := &ev.Event.Data
	if ev.StorageTier != routerevent.TierDevice && data.Kind != routerevent.EventCleared {
		return EventOutcome{}
	}
	if s.pending != math.MaxUint64 {
		s.pending++
	}
	m := Member{WorkerID: ev.WorkerID, DpRank: ev.Event.DpRank}
	var out EventOutcome
	switch data.Kind {
	case routerevent.EventStored:
		if s.cfg.Mode == ckf.HashModeCanonical {
			out.ZeroParentRoot, out.FirstError = s.storeCanonical(m, &data.Stored)
		} else {
			out.FirstError = s.storeVerbatim(m, data.Stored.Blocks)
		}
	case routerevent.EventRemoved:
		out.UnknownRemovals, out.FirstError = s.removeBlocks(m, data.Removed.BlockHashes)
	case routerevent.EventCleared:
		out.FirstError = s.removeMember(m)
	}
	s.tel.unknownRemovals += out.UnknownRemovals
	if s.pending >= s.cfg.PublishEveryNEvents {
		out.PublicationBoundary = true
		out.Publication = s.drain()
	}
	return out
}

// storeVerbatim applies a 1.4.0 stored event: each block_hash is the full
// hash; a failing block changes nothing and later blocks are still tried.
func (s *State) storeVerbatim(m Member, blocks []routerevent.StoredBlock) error {
	var first error
	ms := s.members[m]
	for len(blocks) > 0 {
		chunk := blocks[:min(len(blocks), warmBatch)]
		blocks = blocks[len(chunk):]
		probes := s.warmProbes[:len(chunk)]
		sink := uint64(0)
		for i := range chunk {
			h := chunk[i].BlockHash
			probes[i] = s.mut.addr.Prepare(h)
			sink ^= s.owners.touch(h) ^ s.mut.touch(probes[i])
			if ms != nil {
				sink ^= ms.lineage.touch(h)
			}
		}
		s.warmSink ^= sink
		for i := range chunk {
			h := chunk[i].BlockHash
			var err error
			if ms, err = s.storeEdge(m, ms, h, h, probes[i]); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

type blockKind uint8

const (
	blockNew blockKind = iota
	blockReoffer
)

type eventBlock struct {
	ext, canon uint64
	// lslot is where the validation's lookup of ext in the member's lineage
	// ended (the insertion slot of a new edge); the commit walks on from
	// there (see u64Table.lookupFrom).
	lslot int
	// cand indexes the candidate of canon (new edges only).
	cand int32
	kind blockKind
	// admit marks the first new edge of a canonical hash in the event: the
	// deduplicated admission candidate.
	admit bool
	// probe is canon's lane probe, computed by the warm-up pass.
	probe ckf.Probe
}

type candidate struct {
	canon uint64
	// oslot is where the validation's lookup of canon in the owner table
	// ended; the commit walks on from there.
	oslot int
	inc   uint32
}

// storeCanonical applies a stored event in canonical lineage mode (spec
// §6.9): validate the whole event first, then commit lineage and ownership,
// then admit new candidates with the full kick search and give non-resident
// re-offers one relocation-free attempt.
//
// A parent hash of 0 that the member does not hold is read as no parent
// (zeroRoot): engines whose array form has no nil (llm-d-inference-sim)
// write 0 for "none", and llm-d's own indexer reads 0 so too. A block
// hash 0 the member does hold still chains.
func (s *State) storeCanonical(m Member, d *routerevent.StoreData) (zeroRoot bool, err error) {
	ms := s.members[m]
	var prev uint64
	hasPrev := false
	if d.ParentHash != nil {
		c, ok := uint64(0), false
		if ms != nil {
			c, ok = ms.lineage.get(*d.ParentHash)
		}
		switch {
		case ok:
			prev, hasPrev = c, true
		case *d.ParentHash == 0:
			zeroRoot = true
		default:
			return false, ckf.ErrParentBlockNotFound
		}
	}
	if !hasPrev && d.StartPosition != nil && *d.StartPosition != 0 {
		return zeroRoot, ckf.ErrInvalidBlockSequence
	}

	blocks, cands := s.evBlocks[:0], s.evCands[:0]
	defer func() { s.evBlocks, s.evCands = blocks[:0], cands[:0] }()

	// Resolve every canonical hash and probe first: the chain depends on no
	// table, so this pass can also warm each block's lineage entry, owner
	// entry and lane buckets in one go (see warmBatch).
	sink := uint64(0)
	for i := range d.Blocks {
		b := &d.Blocks[i]
		c := b.TokensHash
		if hasPrev {
			c = uint64(ckf.NextSequenceHash(ckf.SequenceHash(prev), ckf.LocalBlockHash(b.TokensHash)))
		}
		prev, hasPrev = c, true
		p := s.mut.addr.Prepare(c)
		blocks = append(blocks, eventBlock{ext: b.BlockHash, canon: c, probe: p})
		sink ^= s.owners.touch(c) ^ s.mut.touch(p)
		if ms != nil {
			sink ^= ms.lineage.touch(b.BlockHash)
		}
	}
	s.warmSink ^= sink

	// Validate. The lookups remember where they ended, so that the commit
	// below, which only inserts and overwrites, walks no run twice (unless a
	// table grows in between, which the slot counts detect).
	dd := &s.evDedup
	dd.reset(len(blocks))
	lineageSlots := 0
	if ms != nil {
		lineageSlots = len(ms.lineage.slots)
	}
	for i := range blocks {
		b := &blocks[i]
		if i > 0 {
			dd.noteBlock(blocks[i-1].ext)
		}
		c := b.canon
		existing, seen := uint64(0), false
		if ms != nil {
			b.lslot, existing, seen = ms.lineage.lookup(b.ext)
		}
		if !seen {
			if j := dd.findExt(blocks[:i], b.ext); j >= 0 {
				existing, seen = blocks[j].canon, true
			}
		}
		if seen {
			if existing != c {
				return zeroRoot, ckf.ErrInvalidBlockSequence
			}
			b.kind = blockReoffer
			continue
		}
		b.kind = blockNew
		if j := dd.findCand(cands, c); j >= 0 {
			cands[j].inc++
			b.cand = int32(j)
		} else {
			b.cand = int32(len(cands))
			dd.noteCand(c)
			b.admit = true
			cands = append(cands, candidate{canon: c, inc: 1})
		}
	}
	ownerSlots := len(s.owners.slots)
	for j := range cands {
		cd := &cands[j]
		slot, v, _ := s.owners.lookup(cd.canon)
		cd.oslot = slot
		if unpackOwnership(v).Refcount > math.MaxUint32-cd.inc {
			return zeroRoot, ckf.ErrOwnershipDegreeOverflow
		}
	}

	// Commit all new edges; validation above guarantees no error below
	// except a capacity omission, which keeps the committed ownership.
	hinted := ms != nil
	if len(cands) > 0 && ms == nil {
		ms = s.newMember(m)
	}
	var first error
	for i := range blocks {
		b := &blocks[i]
		if b.kind != blockNew {
			continue
		}
		if hinted && len(ms.lineage.slots) == lineageSlots {
			slot, _, _ := ms.lineage.lookupFrom(b.lslot, b.ext)
			ms.lineage.storeAt(slot, b.ext, b.canon)
		} else {
			ms.lineage.put(b.ext, b.canon)
		}
		var oslot int
		var v uint64
		if len(s.owners.slots) == ownerSlots {
			oslot, v, _ = s.owners.lookupFrom(cands[b.cand].oslot, b.canon)
		} else {
			oslot, v, _ = s.owners.lookup(b.canon)
		}
		o := unpackOwnership(v)
		o.Refcount++
		// Admitting while committing is equivalent to the spec's two passes:
		// committing never touches the lane and validation is already done.
		if b.admit && !o.Resident {
			if touched, err := s.mut.insertProbe(b.probe, s.mut.maxKicks); err == nil {
				s.markTouched(touched)
				o.Resident = true
			} else {
				s.tel.capacityFailures++
				if first == nil {
					first = err
				}
			}
		}
		s.owners.storeAt(oslot, b.canon, o.pack())
	}
	for _, b := range blocks {
		if b.kind != blockReoffer {
			continue
		}
		slot, v, _ := s.owners.lookup(b.canon)
		o := unpackOwnership(v)
		if o.Resident {
			continue
		}
		if touched, err := s.mut.insertProbe(b.probe, 0); err == nil {
			s.markTouched(touched)
			o.Resident = true
			s.owners.storeAt(slot, b.canon, o.pack())
		}
	}
	return zeroRoot, first
}

// remove drops member m's edge for external hash ext (spec §6.3 / §6.9).
// unknown reports that m did not own ext (no change). On error nothing
// exact changed.
func (s *State) remove(m Member, ext uint64) (unknown bool, err error) {
	ms := s.members[m]
	if ms == nil {
		return true, nil
	}
	h, ok := ms.lineage.get(ext)
	if !ok {
		return true, nil
	}
	_, unknown, err = s.removeEdge(m, ms, ext, h, s.mut.addr.Prepare(h), noSlot)
	return unknown, err
}

// removeBlocks applies a removed event's hashes in order (see remove),
// counting the unknown ones and keeping the first error; an error does not
// stop the later hashes.
func (s *State) removeBlocks(m Member, exts []uint64) (unknown uint64, first error) {
	ms := s.members[m]
	verbatim := s.cfg.Mode == ckf.HashModeVerbatim
	for len(exts) > 0 && ms != nil {
		chunk := exts[:min(len(exts), warmBatch)]
		exts = exts[len(chunk):]
		probes, hashes, slots := s.warmProbes[:len(chunk)], s.warmHashes[:len(chunk)], s.warmSlots[:len(chunk)]
		// Warm-up (see warmBatch). In verbatim mode ext is the full hash, so
		// every line can be requested at once; in canonical mode the full
		// hash comes from the lineage entry, which is warmed first, and the
		// entry's slot is kept for the removal (see removeEdge).
		sink := uint64(0)
		if verbatim {
			for i, ext := range chunk {
				hashes[i], probes[i], slots[i] = ext, s.mut.addr.Prepare(ext), noSlot
				sink ^= ms.lineage.touch(ext) ^ s.owners.touch(ext) ^ s.mut.touch(probes[i])
			}
		} else {
			for _, ext := range chunk {
				sink ^= ms.lineage.touch(ext)
			}
			for i, ext := range chunk {
				slot, h, _ := ms.lineage.lookup(ext)
				hashes[i], probes[i], slots[i] = h, s.mut.addr.Prepare(h), slot
				sink ^= s.owners.touch(h) ^ s.mut.touch(probes[i])
			}
		}
		s.warmSink ^= sink
		for i, ext := range chunk {
			if ms == nil {
				unknown++
				continue
			}
			var u bool
			var err error
			ms, u, err = s.removeEdge(m, ms, ext, hashes[i], probes[i], slots[i])
			if u {
				unknown++
			}
			if err != nil && first == nil {
				first = err
			}
		}
	}
	if ms == nil {
		unknown += uint64(len(exts))
	}
	return unknown, first
}

// noSlot is a lineage slot hint that names no slot (see removeEdge).
const noSlot = -2

// removeEdge is remove for m's known state ms; guess is the full hash ext
// is expected to map to and p its probe (recomputed if the guess is wrong);
// hint is the lineage slot an earlier lookup found ext at, or noSlot. It
// returns m's state afterwards, nil once m owns nothing.
func (s *State) removeEdge(m Member, ms *memberState, ext, guess uint64, p ckf.Probe, hint int) (_ *memberState, unknown bool, err error) {
	slot, h, ok := ms.lineage.lookupHint(hint, ext)
	if !ok {
		return ms, true, nil
	}
	if h != guess {
		// Within a removed event an edge can only disappear, never change,
		// so this only guards that invariant.
		p = s.mut.addr.Prepare(h)
	}
	// One walk of the owner's run: the entry is changed or deleted at the
	// slot found (the lane write in between does not touch the table).
	oslot, v, ok := s.owners.lookup(h)
	o := unpackOwnership(v)
	if !ok || o.Refcount == 0 {
		return ms, false, ckf.ErrIndexerInvariantViolation
	}
	if o.Refcount == 1 {
		if o.Resident {
			t, err := s.mut.removeProbe(p)
			if err != nil {
				return ms, false, err
			}
			s.tel.physicalTouches++
			s.dirty.mark(t.Bucket, t.Original)
		}
		s.owners.delAt(oslot)
	} else {
		o.Refcount--
		s.owners.storeAt(oslot, h, o.pack())
	}
	ms.lineage.delAt(slot) // the lineage is unchanged since the lookup
	if ms.lineage.len() == 0 {
		s.dropMember(m, ms)
		return nil, false, nil
	}
	return ms, false, nil
}

// removeMember removes every edge of m, stopping at the first error.
func (s *State) removeMember(m Member) error {
	ms := s.members[m]
	if ms == nil {
		return nil
	}
	// Backward-shift deletion moves entries, so take the keys first.
	exts := s.extScratch[:0]
	for ext := range ms.lineage.all() {
		exts = append(exts, ext)
	}
	defer func() { s.extScratch = exts[:0] }()
	for _, ext := range exts {
		if _, err := s.remove(m, ext); err != nil {
			return err
		}
	}
	return nil
}

func (s *State) markTouched(touched []Touch) {
	s.tel.physicalTouches += uint64(len(touched))
	for _, t := range touched {
		s.dirty.mark(t.Bucket, t.Original)
	}
}

// freeMemberCap bounds the pool of emptied member maps kept for reuse.
const freeMemberCap = 64

// maxPooledMemberSlots keeps huge emptied member tables out of the pool.
const maxPooledMemberSlots = 1 << 16

func (s *State) newMember(m Member) *memberState {
	var ms *memberState
	if n := len(s.freeMember); n > 0 {
		ms = s.freeMember[n-1]
		s.freeMember = s.freeMember[:n-1]
		if ms.lineage.slots == nil {
			// A restored pool entry carries only its capacity (see
			// RestoreState); allocate it on first use.
			ms.lineage = makeU64Table(ms.lineage.mask + 1)
		}
	} else {
		ms = &memberState{lineage: newU64Table(0)}
	}
	ms.lineage.sparse = true
	s.members[m] = ms
	return ms
}

func (s *State) dropMember(m Member, ms *memberState) {
	delete(s.members, m)
	if len(s.freeMember) < freeMemberCap && len(ms.lineage.slots) <= maxPooledMemberSlots {
		ms.lineage.reset()
		s.freeMember = append(s.freeMember, ms)
	}
}

// drain cuts the publication window (spec §6.6).
func (s *State) drain() Batch {
	if s.pending == 0 && s.dirty.len() == 0 {
		return Batch{}
	}
	imgs := s.images[:0]
	for i, b := range s.dirty.order {
		if v := s.mut.words[b]; v != s.dirty.originals[i] {
			imgs = append(imgs, ckf.BucketImage{Bucket: b, Value: v})
		}
	}
	touched := uint64(s.dirty.len())
	s.tel.distinctTouched += touched
	s.tel.emittedImages += uint64(len(imgs))
	s.tel.netReverted += touched - uint64(len(imgs))
	s.dirty.reset()
	s.pending = 0
	s.images = imgs
	if len(imgs) == 0 {
		return Batch{}
	}
	s.tel.publications++
	return Batch{Images: imgs}
}

// Contains reports whether h's fingerprint is in the lane (may be a false
// positive). In canonical mode h is a canonical hash.
func (s *State) Contains(h uint64) bool { return s.mut.Contains(h) }

// MemberBlockCount returns how many blocks member m owns.
func (s *State) MemberBlockCount(m Member) int {
	if ms := s.members[m]; ms != nil {
		return ms.lineage.len()
	}
	return 0
}

// MemberCounts returns every member with its block count, sorted by member.
func (s *State) MemberCounts() []MemberCount {
	out := make([]MemberCount, 0, len(s.members))
	for m, ms := range s.members {
		out = append(out, MemberCount{Member: m, Blocks: ms.lineage.len()})
	}
	slices.SortFunc(out, func(a, b MemberCount) int { return a.Member.Compare(b.Member) })
	return out
}

// ExactBlocks enumerates every tracked full hash (canonical hash in
// canonical mode) with its ownership, in map order. The state must not be
// mutated during the iteration.
func (s *State) ExactBlocks() iter.Seq2[uint64, BlockOwnership] {
	return func(yield func(uint64, BlockOwnership) bool) {
		for h, v := range s.owners.all() {
			if !yield(h, unpackOwnership(v)) {
				return
			}
		}
	}
}

// Ownership returns the exact state of full hash h.
func (s *State) Ownership(h uint64) (BlockOwnership, bool) {
	return s.owner(h)
}

func (s *State) owner(h uint64) (BlockOwnership, bool) {
	v, ok := s.owners.get(h)
	return unpackOwnership(v), ok
}

// MemberBlocks enumerates member m's edges as (external block hash, full
// hash); both are equal in verbatim mode.
func (s *State) MemberBlocks(m Member) iter.Seq2[uint64, uint64] {
	return func(yield func(uint64, uint64) bool) {
		ms := s.members[m]
		if ms == nil {
			return
		}
		for ext, h := range ms.lineage.all() {
			if !yield(ext, h) {
				return
			}
		}
	}
}

// Members returns every member, sorted.
func (s *State) Members() []Member {
	out := make([]Member, 0, len(s.members))
	for m := range s.members {
		out = append(out, m)
	}
	slices.SortFunc(out, Member.Compare)
	return out
}

// Words returns the live lane (not a copy). It is only valid to read until
// the next mutating call.
func (s *State) Words() []uint64 { return s.mut.words }

// CopyWords copies the lane into dst (grown if too short) and returns it.
func (s *State) CopyWords(dst []uint64) []uint64 {
	dst = slices.Grow(dst[:0], len(s.mut.words))[:len(s.mut.words)]
	copy(dst, s.mut.words)
	return dst
}

// HasPendingPublication reports pending events or a dirty bucket.
func (s *State) HasPendingPublication() bool { return s.pending != 0 || s.dirty.len() != 0 }
