package producer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// writeSizes records the length of every Write it is handed.
type writeSizes struct {
	buf   bytes.Buffer
	sizes []int
}

func (w *writeSizes) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.buf.Write(p)
}

// TestCheckpointWritesInChunks: Checkpoint hands its writer chunks of at
// most checkpointChunk bytes (the object store's part size), filling each
// one as far as the next field allows: the header and the lane words are
// 8-byte aligned, so with more than a chunk of lane the first write is a
// whole chunk. The 8-byte checksum is the last write.
func TestCheckpointWritesInChunks(t *testing.T) {
	cfg := verbatimConfig(1 << 15) // 16384 buckets: 128 KiB of lane words
	s := mustState(t, cfg)
	if bc := s.Format().BucketCount; 8*bc < 2*checkpointChunk {
		t.Fatalf("fixture lane of %d buckets is not over two chunks", bc)
	}
	storeRange(s, 1, 0, 3000)
	s.Flush()
	w := &writeSizes{}
	if err := s.Checkpoint(w); err != nil {
		t.Fatal(err)
	}
	n := len(w.sizes)
	if n < 4 {
		t.Fatalf("writes %v: want at least three chunks and the checksum", w.sizes)
	}
	if w.sizes[0] != checkpointChunk {
		t.Fatalf("first write %d bytes, want a whole chunk of %d", w.sizes[0], checkpointChunk)
	}
	for i, sz := range w.sizes[:n-2] {
		// A chunk ends early only when the next field (at most 8 bytes)
		// does not fit.
		if sz > checkpointChunk || sz <= checkpointChunk-8 {
			t.Fatalf("write %d of %v: %d bytes", i, w.sizes, sz)
		}
	}
	if last := w.sizes[n-1]; last != 8 {
		t.Fatalf("last write %d bytes, want the 8-byte checksum", last)
	}
	got := restore(t, w.buf.Bytes(), cfg)
	if err := sameState(s, got); err != nil {
		t.Fatal(err)
	}
}

// roundTrip checkpoints s, restores it with cfg and checks that the
// restored state is s and re-encodes to the same bytes.
func roundTrip(t *testing.T, s *State, cfg ckf.Config) *State {
	t.Helper()
	b := checkpointBytes(t, s)
	got := restore(t, b, cfg)
	if err := sameState(s, got); err != nil {
		t.Fatal(err)
	}
	if err := checkInvariants(got); err != nil {
		t.Fatal(err)
	}
	if again := checkpointBytes(t, got); !bytes.Equal(again, b) {
		t.Fatal("restored state re-encodes differently")
	}
	return got
}

// TestCheckpointsOfMinimalSections round-trips states whose sections are
// as small as the encoding allows, so each length check meets a section
// that ends exactly at its bound: verbatim members owning only hash 0 (29
// bytes each, the smallest member), a canonical last member whose entries
// end 8 bytes before the body (only the empty pool count follows), a
// member of worker 0 rank 0 (the zero Member, first in order) and a
// member table holding 6 entries in 8 slots (the most before it grows).
func TestCheckpointsOfMinimalSections(t *testing.T) {
	t.Run("verbatim members owning hash 0", func(t *testing.T) {
		cfg := verbatimConfig(64)
		for members := uint64(1); members <= 3; members++ {
			s := mustState(t, cfg)
			for w := range members {
				s.ApplyEvent(storedEv(w+1, 0, 0))
			}
			s.Flush()
			got := roundTrip(t, s, cfg)
			if o, ok := got.Ownership(0); !ok || o.Refcount != uint32(members) || got.MemberBlockCount(Member{WorkerID: members}) != 1 {
				t.Fatalf("%d members: hash 0 %+v %v", members, o, ok)
			}
		}
	})
	t.Run("canonical member last without pool", func(t *testing.T) {
		cfg := ckf.NewConfig(64)
		for n := uint64(1); n <= 7; n++ {
			s := mustState(t, cfg)
			hs := make([]uint64, n)
			for i := range hs {
				hs[i] = 100 + uint64(i)
			}
			s.ApplyEvent(storedEv(3, 1, hs...))
			s.Flush()
			if len(s.freeMember) != 0 {
				t.Fatal("fixture has a pool")
			}
			got := roundTrip(t, s, cfg)
			if got.MemberBlockCount(Member{WorkerID: 3, DpRank: 1}) != int(n) {
				t.Fatalf("%d blocks: restored member owns %d", n, got.MemberBlockCount(Member{WorkerID: 3, DpRank: 1}))
			}
		}
	})
	t.Run("the zero member with a full small table", func(t *testing.T) {
		for _, cfg := range []ckf.Config{verbatimConfig(64), ckf.NewConfig(64)} {
			s := mustState(t, cfg)
			// Lineage tables grow at 5/8 load now; one filled to 3/4, as
			// earlier versions left them, must still round-trip.
			s.ApplyEvent(storedEv(0, 0, 1))
			s.members[Member{}].lineage.sparse = false
			s.ApplyEvent(storedEv(0, 0, 2, 3, 4, 5, 6))
			s.ApplyEvent(storedEv(0, 1, 1))
			s.Flush()
			if c := s.members[Member{}].lineage.capacity(); c != tableMinSlots {
				t.Fatalf("fixture table has %d slots", c)
			}
			got := roundTrip(t, s, cfg)
			if got.MemberBlockCount(Member{}) != 6 {
				t.Fatalf("%s: zero member owns %d", cfg.Mode, got.MemberBlockCount(Member{}))
			}
		}
	})
}

// TestCheckpointOfAFullMemberPool: the pool keeps at most freeMemberCap
// emptied tables of at most maxPooledMemberSlots slots, and a checkpoint of
// a pool at both limits restores; the restored pool hands the big table
// out first, as the original does.
func TestCheckpointOfAFullMemberPool(t *testing.T) {
	cfg := ckf.NewConfig(64) // canonical: omitted blocks stay tracked
	s := mustState(t, cfg)
	// A member table of exactly maxPooledMemberSlots slots: it grows to
	// 2^16 slots at its 24577th entry.
	const big = maxPooledMemberSlots*3/8 + 1
	storeRange(s, 1000, 0, big)
	if c := s.members[Member{WorkerID: 1000}].lineage.capacity(); c != maxPooledMemberSlots {
		t.Fatalf("fixture table has %d slots", c)
	}
	// One small table more than the pool keeps: the last one emptied is
	// dropped.
	for w := range uint64(freeMemberCap) {
		s.ApplyEvent(storedEv(w, 0, 1<<40+w))
	}
	for w := range uint64(freeMemberCap - 1) {
		s.ApplyEvent(clearedEv(w, 0))
	}
	s.ApplyEvent(clearedEv(1000, 0))
	s.ApplyEvent(clearedEv(freeMemberCap-1, 0))
	s.Flush()
	if len(s.freeMember) != freeMemberCap {
		t.Fatalf("pool holds %d tables", len(s.freeMember))
	}
	got := roundTrip(t, s, cfg)
	got.ApplyEvent(storedEv(5, 5, 77))
	if c := got.members[Member{WorkerID: 5, DpRank: 5}].lineage.capacity(); c != maxPooledMemberSlots {
		t.Fatalf("reused pooled table has %d slots", c)
	}
}

// TestRestoreRefusesADuplicateMember: a member listed twice is refused even
// when the edge counts of both copies match the refcounts (restoring it
// would drop one copy's edges).
func TestRestoreRefusesADuplicateMember(t *testing.T) {
	cfg := verbatimConfig(64)
	s := mustState(t, cfg)
	s.ApplyEvent(storedEv(1, 0, 9))
	s.ApplyEvent(storedEv(2, 0, 9))
	s.Flush()
	b := checkpointBytes(t, s)
	le := binary.LittleEndian
	// Verbatim member records after the owner table: worker u64 | rank u32
	// | table (flags, capacity, count, one 8-byte entry).
	const member = 8 + 4 + 1 + 8 + 8 + 8
	second := len(b) - 8 - 8 - member
	if le.Uint64(b[second:]) != 2 || le.Uint64(b[second-member:]) != 1 {
		t.Fatalf("fixture layout: workers %d %d", le.Uint64(b[second-member:]), le.Uint64(b[second:]))
	}
	le.PutUint64(b[second:], 1)
	_, err := RestoreState(bytes.NewReader(reseal(b)), cfg)
	var ce *CheckpointError
	if !errors.As(err, &ce) || ce.Kind != ErrCheckpointMalformed {
		t.Fatalf("duplicate member: %v", err)
	}
}

// TestTheRestoreBudgetIsExactAtItsBoundary: a state whose owner table
// uses the whole budget (131072 slots for 16382 entries: 2^16 base + 4 ×
// 16382 + 8 credit) checkpoints and restores; one entry fewer and the
// writer refuses it as over budget.
func TestTheRestoreBudgetIsExactAtItsBoundary(t *testing.T) {
	cfg := ckf.NewConfig(1024)
	cfg.MaxKicks = 1 // the lane overflows; canonical mode keeps ownership
	s := mustState(t, cfg)
	if base := checkpointBaseSlots(s.Format().BucketCount); base != 1<<16 {
		t.Fatalf("fixture base %d", base)
	}
	const kept = (1<<17 - 1<<16 - tableMinSlots) / budgetSlotsPerEntry // 16382
	storeRange(s, 2, 0, kept)
	storeRange(s, 1, 1<<20, 1<<16*3/4+1) // grows the owner table to 2^17 slots
	s.ApplyEvent(clearedEv(1, 0))
	s.Flush()
	if c, n := s.owners.capacity(), s.owners.len(); c != 1<<17 || n != kept {
		t.Fatalf("owner table %d entries in %d slots", n, c)
	}
	if err := s.CheckpointFits(); err != nil {
		t.Fatalf("a state at the budget's limit: %v", err)
	}
	roundTrip(t, s, cfg)

	removeRange(s, 2, kept-1, 1)
	s.Flush()
	if err := s.CheckpointFits(); !errors.Is(err, ErrCheckpointOverBudget) {
		t.Fatalf("one slot over the budget: %v", err)
	}
	if err := s.Checkpoint(&bytes.Buffer{}); !errors.Is(err, ErrCheckpointOverBudget) {
		t.Fatalf("Checkpoint one slot over the budget: %v", err)
	}
}

// TestRestoreRefusesCountsTheBodyCannotHold: a section count larger than
// the declared body could hold is refused as malformed on sight, before
// any entry is read, so even an input that ends right after the count is
// reported as malformed, not truncated.
func TestRestoreRefusesCountsTheBodyCannotHold(t *testing.T) {
	cfg := verbatimConfig(64)
	s := mustState(t, cfg)
	s.ApplyEvent(storedEv(1, 0, 3, 4, 5))
	s.Flush()
	b := checkpointBytes(t, s)
	le := binary.LittleEndian
	owners := checkpointHeaderSize + 8 + 8*telemetryCounters + 8*int(s.Format().BucketCount)
	ownerCount := owners + 9
	memberCount := owners + 17 + 16*3
	lineageCount := memberCount + 8 + 12 + 1 + 8
	if le.Uint64(b[ownerCount:]) != 3 || le.Uint64(b[memberCount:]) != 1 || le.Uint64(b[lineageCount:]) != 3 {
		t.Fatal("fixture layout")
	}
	for name, at := range map[string]int{"owner count": ownerCount, "member count": memberCount, "lineage count": lineageCount} {
		// 8 is just over what the rest of this small body could hold.
		for _, count := range []uint64{8, 1 << 20, 1 << 62} {
			c := slices.Clone(b[:at+8])
			le.PutUint64(c[at:], count)
			if name != "member count" {
				le.PutUint64(c[at-8:], 1<<40) // a capacity that admits the count
			}
			_, err := RestoreState(bytes.NewReader(c), cfg)
			var ce *CheckpointError
			if !errors.As(err, &ce) || ce.Kind != ErrCheckpointMalformed {
				t.Errorf("%s %d: %v", name, count, err)
			}
		}
	}
}

// TestTheOwnerTableIsSizedForTheExpectedBlocks: a new state's owner table
// (whose capacity the checkpoint records) is the smallest power of two of
// at least 8 slots that holds ExpectedBlocksPerDC blocks within the 3/4
// load limit, and storing that many blocks does not grow it.
func TestTheOwnerTableIsSizedForTheExpectedBlocks(t *testing.T) {
	for _, tc := range []struct{ expected, slots uint64 }{{1, 8}, {6, 8}, {7, 16}, {12, 16}, {13, 32}, {96, 128}, {97, 256}} {
		cfg := ckf.NewConfig(tc.expected)
		s := mustState(t, cfg)
		ownerCapacity := func() uint64 {
			b := checkpointBytes(t, s)
			at := checkpointHeaderSize + 8 + 8*telemetryCounters + 8*int(s.Format().BucketCount) + 1
			return binary.LittleEndian.Uint64(b[at:])
		}
		if got := ownerCapacity(); got != tc.slots {
			t.Fatalf("expected %d blocks: %d owner slots, want %d", tc.expected, got, tc.slots)
		}
		storeRange(s, 1, 0, tc.expected)
		if got := ownerCapacity(); got != tc.slots || s.UniqueBlocks() != int(tc.expected) {
			t.Fatalf("expected %d blocks: %d slots after storing %d", tc.expected, got, s.UniqueBlocks())
		}
	}
}

// TestARemovalThatFindsNoFingerprintIsReportedAndTheEventGoesOn: a lane
// with one fingerprint copy where two colliding resident hashes need two
// (the spare slot holds another fingerprint, so the counts agree) cannot
// come from events or a restore, but the removal path must still fail
// soft. Removing both hashes finds no copy for the second: the removed
// event reports that invariant violation as its first error, and still
// applies its later hashes.
func TestARemovalThatFindsNoFingerprintIsReportedAndTheEventGoesOn(t *testing.T) {
	cfg := verbatimConfig(1)
	cfg.PublishEveryNEvents = 100
	s := mustState(t, cfg)
	h1, h2 := findCollision(t, s.addressing())
	h3 := h2 + 1
	for s.addressing().Prepare(h3) == s.addressing().Prepare(h1) {
		h3++
	}
	s.ApplyEvent(storedEv(1, 0, h1, h2, h3))
	s.Flush()
	// A restore refuses such a lane (TestRestoreCountsTheCopiesOfCollidingHashes),
	// so the lane is forged in place.
	fp := s.addressing().Prepare(h1).Fingerprint
	forged := false
	for i, w := range s.mut.words {
		if first := ckf.FirstSlot(w, fp); first >= 0 {
			for slot := first + 1; slot < 4 && !forged; slot++ {
				if ckf.Slot(w, slot) == fp {
					s.mut.words[i] = ckf.WithSlot(w, slot, fp^0x8000)
					forged = true
				}
			}
		}
	}
	if !forged {
		t.Fatal("fixture: no bucket holds both copies")
	}
	got := s
	out := got.ApplyEvent(removedEv(1, 0, h1, h2, h3))
	if !errors.Is(out.FirstError, ckf.ErrIndexerInvariantViolation) || out.UnknownRemovals != 0 {
		t.Fatalf("outcome %+v", out)
	}
	if mustOwn(got, h1) || !mustOwn(got, h2) || mustOwn(got, h3) {
		t.Fatal("the failed removal changed its own hash or stopped the later one")
	}
}
