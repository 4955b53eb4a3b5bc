package producer

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// tokenLocals returns the local hashes of tokens 0..n-1 in blocks of 4.
func tokenLocals(n int) []ckf.LocalBlockHash {
	toks := make([]uint32, n)
	for i := range toks {
		toks[i] = uint32(i)
	}
	return ckf.LocalBlockHashes(nil, toks, 4)
}

func TestCanonicalParentChainResolvesToSequenceHashes(t *testing.T) {
	s := mustState(t, ckf.NewConfig(1024))
	locals := tokenLocals(16)
	seq := ckf.SequenceHashes(nil, locals)
	ext := []uint64{0xE0, 0xE1, 0xE2, 0xE3} // engine ids unrelated to the chain
	blk := func(i int) routerevent.StoredBlock {
		return routerevent.StoredBlock{BlockHash: ext[i], TokensHash: uint64(locals[i])}
	}
	if out := s.ApplyEvent(chainEv(7, 0, nil, blk(0))); out.FirstError != nil {
		t.Fatal(out.FirstError)
	}
	if out := s.ApplyEvent(chainEv(7, 0, ptr(ext[0]), blk(1), blk(2))); out.FirstError != nil {
		t.Fatal(out.FirstError)
	}
	ev := chainEv(7, 0, ptr(ext[2]), blk(3))
	ev.Event.Data.Stored.StartPosition = ptr(uint32(12))
	if out := s.ApplyEvent(ev); out.FirstError != nil {
		t.Fatal(out.FirstError)
	}
	want := make([]uint64, len(seq))
	for i, h := range seq {
		want[i] = uint64(h)
		if !s.Contains(uint64(h)) {
			t.Fatalf("sequence hash %d not contained", i)
		}
	}
	got := slices.Sorted(maps.Keys(maps.Collect(s.ExactBlocks())))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("canonical hashes %#x want %#x", got, want)
	}
	lineage := maps.Collect(s.MemberBlocks(Member{7, 0}))
	for i, e := range ext {
		if lineage[e] != uint64(seq[i]) {
			t.Fatalf("lineage[%#x] = %#x want %#x", e, lineage[e], seq[i])
		}
	}
	// Removal by engine hash removes the canonical block.
	s.ApplyEvent(removedEv(7, 0, ext[3]))
	if _, ok := s.Ownership(uint64(seq[3])); ok {
		t.Fatal("removed block still owned")
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

func TestCanonicalParentBlockNotFoundRejectsTheWholeEvent(t *testing.T) {
	s := mustState(t, ckf.NewConfig(1024))
	s.ApplyEvent(storedEv(1, 0, 5))
	words := s.CopyWords(nil)
	out := s.ApplyEvent(chainEv(1, 0, ptr(uint64(404)), routerevent.StoredBlock{BlockHash: 6, TokensHash: 6}))
	if !errors.Is(out.FirstError, ckf.ErrParentBlockNotFound) || out.HasPublication() {
		t.Fatalf("outcome %+v", out)
	}
	// The parent of another member does not resolve either.
	out = s.ApplyEvent(chainEv(2, 0, ptr(uint64(5)), routerevent.StoredBlock{BlockHash: 6, TokensHash: 6}))
	if !errors.Is(out.FirstError, ckf.ErrParentBlockNotFound) {
		t.Fatalf("foreign parent: %v", out.FirstError)
	}
	if s.Stats().Contributions != 1 || !slices.Equal(words, s.Words()) {
		t.Fatal("rejected event changed state")
	}
}

func TestCanonicalInvalidBlockSequenceRejectsTheWholeEvent(t *testing.T) {
	s := mustState(t, ckf.NewConfig(1024))
	ev := chainEv(1, 0, nil, routerevent.StoredBlock{BlockHash: 1, TokensHash: 1})
	ev.Event.Data.Stored.StartPosition = ptr(uint32(4))
	if out := s.ApplyEvent(ev); !errors.Is(out.FirstError, ckf.ErrInvalidBlockSequence) || s.Stats().UniqueBlocks != 0 {
		t.Fatalf("nonzero start without parent: %v", out.FirstError)
	}
	ev.Event.Data.Stored.StartPosition = ptr(uint32(0))
	if out := s.ApplyEvent(ev); out.FirstError != nil {
		t.Fatalf("zero start: %v", out.FirstError)
	}
	words := s.CopyWords(nil)
	// External hash 1 re-mapped to different tokens, next to a new block.
	out := s.ApplyEvent(chainEv(1, 0, nil, routerevent.StoredBlock{BlockHash: 2, TokensHash: 2}, routerevent.StoredBlock{BlockHash: 1, TokensHash: 99}))
	if !errors.Is(out.FirstError, ckf.ErrInvalidBlockSequence) {
		t.Fatalf("conflicting re-mapping: %v", out.FirstError)
	}
	// Conflicting mapping inside one event.
	out = s.ApplyEvent(chainEv(1, 0, nil, routerevent.StoredBlock{BlockHash: 3, TokensHash: 3}, routerevent.StoredBlock{BlockHash: 3, TokensHash: 3}))
	if !errors.Is(out.FirstError, ckf.ErrInvalidBlockSequence) {
		t.Fatalf("in-event conflict: %v", out.FirstError)
	}
	if mustOwn(s, 2) || mustOwn(s, 3) || !slices.Equal(words, s.Words()) || s.Stats().Contributions != 1 {
		t.Fatal("rejected events changed state")
	}
	// An identical re-offer is accepted as a no-op.
	if out := s.ApplyEvent(chainEv(1, 0, nil, routerevent.StoredBlock{BlockHash: 1, TokensHash: 1})); out.FirstError != nil || s.Stats().Contributions != 1 {
		t.Fatalf("re-offer: %v", out.FirstError)
	}
}

func TestCanonicalCapacityOmittedBlockIsTrackedAndReadmittedOnReoffer(t *testing.T) {
	cfg := ckf.NewConfig(1)
	cfg.MaxKicks = 1
	s := mustState(t, cfg)
	var omitted uint64
	var inserted []uint64
	for h := uint64(1); h <= 64; h++ {
		out := s.ApplyEvent(storedEv(1, 0, h))
		if errors.Is(out.FirstError, ckf.ErrCapacityExhausted) {
			omitted = h
			break
		}
		inserted = append(inserted, h)
	}
	if omitted == 0 {
		t.Fatal("tiny producer never exhausted capacity")
	}
	if o, ok := s.Ownership(omitted); !ok || o.Resident || o.Refcount != 1 {
		t.Fatalf("omitted ownership %+v %v", o, ok)
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	if d := ckf.PointBoundedRelocationFailure.DispositionFor(s.Mode()); d.Commit != ckf.CommitExactCommittedPhysicalOmitted {
		t.Fatalf("disposition %v", d)
	}
	// Re-offering while the lane is still full fails silently.
	if out := s.ApplyEvent(storedEv(1, 0, omitted)); out.FirstError != nil {
		t.Fatalf("silent re-offer: %v", out.FirstError)
	}
	// Free a slot, then re-offer: the block is re-admitted without kicks.
	s.ApplyEvent(removedEv(1, 0, inserted[0]))
	out := s.ApplyEvent(storedEv(1, 0, omitted))
	if out.FirstError != nil || !out.HasPublication() {
		t.Fatalf("re-admission outcome %+v", out)
	}
	if o, _ := s.Ownership(omitted); !o.Resident || !s.Contains(omitted) {
		t.Fatal("re-offer did not re-admit")
	}
	// A later removal is known, not an unknown removal.
	if out := s.ApplyEvent(removedEv(1, 0, omitted)); out.UnknownRemovals != 0 || mustOwn(s, omitted) {
		t.Fatalf("removal of tracked block: %+v", out)
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

func TestCanonicalOmittedBlockRemovalIsNotUnknown(t *testing.T) {
	cfg := ckf.NewConfig(1)
	cfg.MaxKicks = 1
	s := mustState(t, cfg)
	h := uint64(1)
	for ; ; h++ {
		if errors.Is(s.ApplyEvent(storedEv(1, 0, h)).FirstError, ckf.ErrCapacityExhausted) {
			break
		}
	}
	words := s.CopyWords(nil)
	out := s.ApplyEvent(removedEv(1, 0, h))
	if out.UnknownRemovals != 0 || out.FirstError != nil || mustOwn(s, h) || !slices.Equal(words, s.Words()) {
		t.Fatalf("omitted removal %+v", out)
	}
}

func TestCanonicalSharedPrefixWithDifferentEngineHashesMapsToOneCanonicalHash(t *testing.T) {
	s := mustState(t, ckf.NewConfig(1024))
	locals := tokenLocals(8)
	seq := ckf.SequenceHashes(nil, locals)
	for w, base := range map[uint64]uint64{1: 0xA000, 2: 0xB000} {
		s.ApplyEvent(chainEv(w, 0, nil,
			routerevent.StoredBlock{BlockHash: base, TokensHash: uint64(locals[0])},
			routerevent.StoredBlock{BlockHash: base + 1, TokensHash: uint64(locals[1])}))
	}
	st := s.Stats()
	if st.UniqueBlocks != 2 || st.Contributions != 4 {
		t.Fatalf("stats %v", st)
	}
	for _, h := range seq {
		if o, _ := s.Ownership(uint64(h)); o.Refcount != 2 || !o.Resident {
			t.Fatalf("hash %#x ownership %+v", h, o)
		}
	}
	s.ApplyEvent(clearedEv(1, 0))
	for _, h := range seq {
		if o, _ := s.Ownership(uint64(h)); o.Refcount != 1 || !s.Contains(uint64(h)) {
			t.Fatalf("after clear %#x: %+v", h, o)
		}
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

func TestCanonicalLongEventUsesScratchMapsConsistently(t *testing.T) {
	s := mustState(t, ckf.NewConfig(1<<12))
	blocks := make([]routerevent.StoredBlock, 100)
	for i := range blocks {
		blocks[i] = routerevent.StoredBlock{BlockHash: uint64(5000 + i), TokensHash: uint64(i)}
	}
	if out := s.ApplyEvent(chainEv(1, 0, nil, blocks...)); out.FirstError != nil {
		t.Fatal(out.FirstError)
	}
	// Re-offer the whole chain plus a conflicting duplicate at the end.
	bad := append(slices.Clone(blocks), routerevent.StoredBlock{BlockHash: 5000, TokensHash: 1})
	if out := s.ApplyEvent(chainEv(1, 0, nil, bad...)); !errors.Is(out.FirstError, ckf.ErrInvalidBlockSequence) {
		t.Fatalf("long conflict: %v", out.FirstError)
	}
	if s.MemberBlockCount(Member{1, 0}) != 100 {
		t.Fatal("long event not fully tracked")
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

// TestCanonicalLongEventsDoNotSeeEachOthersScratch: the long-event scratch
// tables start empty for every event, after a huge event too. Members 2
// and 3 store the external hashes member 1 stored, under other tokens:
// their events must be validated on their own blocks only.
func TestCanonicalLongEventsDoNotSeeEachOthersScratch(t *testing.T) {
	s := mustState(t, ckf.NewConfig(1<<14))
	chain := func(n int, tokens uint64) []routerevent.StoredBlock {
		b := make([]routerevent.StoredBlock, n)
		for i := range b {
			b[i] = routerevent.StoredBlock{BlockHash: uint64(9000 + i), TokensHash: tokens + uint64(i)}
		}
		return b
	}
	for i, n := range []int{2000, 40, 40} {
		w := uint64(i + 1)
		if out := s.ApplyEvent(chainEv(w, 0, nil, chain(n, 100*w)...)); out.FirstError != nil {
			t.Fatalf("member %d: %v", w, out.FirstError)
		}
		if got := s.MemberBlockCount(Member{w, 0}); got != n {
			t.Fatalf("member %d owns %d blocks, want %d", w, got, n)
		}
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

// TestCanonicalReofferOfResidentBlocksChangesNothing: re-storing a chain
// whose blocks are all resident writes no bucket, keeps every refcount and
// adds no fingerprint copy.
func TestCanonicalReofferOfResidentBlocksChangesNothing(t *testing.T) {
	s := mustState(t, ckf.NewConfig(256))
	ev := storedEv(1, 0, 21, 22, 23)
	s.ApplyEvent(ev)
	s.Flush()
	before, words := s.Stats(), slices.Clone(s.Words())
	for range 2 {
		if out := s.ApplyEvent(storedEv(1, 0, 21, 22, 23)); out.FirstError != nil {
			t.Fatal(out.FirstError)
		}
	}
	after := s.Stats()
	if !slices.Equal(words, s.Words()) || after.PhysicalTouches != before.PhysicalTouches || after.DirtyBuckets != 0 ||
		after.Contributions != 3 || after.OccupiedSlots != 3 {
		t.Fatalf("re-offer changed the state:\n%v\n%v", before, after)
	}
	for h, o := range s.ExactBlocks() {
		if o.Refcount != 1 || !o.Resident {
			t.Fatalf("hash %#x: %+v", h, o)
		}
	}
}

// An engine whose array form has no nil writes parent 0 for "none"
// (llm-d-inference-sim): a parent 0 the member does not hold roots the
// chain, reported as ZeroParentRoot, and the next store chains onto it.
func TestCanonicalZeroParentNotHeldIsRoot(t *testing.T) {
	s := mustState(t, ckf.NewConfig(1024))
	locals := tokenLocals(12)
	seq := ckf.SequenceHashes(nil, locals)
	blk := func(i int) routerevent.StoredBlock {
		return routerevent.StoredBlock{BlockHash: 0xA0 + uint64(i), TokensHash: uint64(locals[i])}
	}
	out := s.ApplyEvent(chainEv(7, 0, ptr(uint64(0)), blk(0), blk(1)))
	if out.FirstError != nil || !out.ZeroParentRoot {
		t.Fatalf("zero parent not held: %+v", out)
	}
	out = s.ApplyEvent(chainEv(7, 0, ptr(uint64(0xA1)), blk(2)))
	if out.FirstError != nil || out.ZeroParentRoot {
		t.Fatalf("continuation: %+v", out)
	}
	for i, h := range seq {
		if !s.Contains(uint64(h)) {
			t.Fatalf("sequence hash %d not contained", i)
		}
	}
	// A nonzero start without a parent stays invalid under a zero parent.
	ev := chainEv(8, 0, ptr(uint64(0)), blk(0))
	ev.Event.Data.Stored.StartPosition = ptr(uint32(4))
	if out := s.ApplyEvent(ev); !errors.Is(out.FirstError, ckf.ErrInvalidBlockSequence) {
		t.Fatalf("nonzero start under a zero parent: %+v", out)
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

// A real block hash 0 the member holds is a parent like any other: the
// next store chains onto its canonical hash.
func TestCanonicalZeroParentHeldChains(t *testing.T) {
	s := mustState(t, ckf.NewConfig(1024))
	locals := tokenLocals(8)
	seq := ckf.SequenceHashes(nil, locals)
	if out := s.ApplyEvent(chainEv(7, 0, nil, routerevent.StoredBlock{BlockHash: 0, TokensHash: uint64(locals[0])})); out.FirstError != nil {
		t.Fatal(out.FirstError)
	}
	out := s.ApplyEvent(chainEv(7, 0, ptr(uint64(0)), routerevent.StoredBlock{BlockHash: 0xB1, TokensHash: uint64(locals[1])}))
	if out.FirstError != nil || out.ZeroParentRoot {
		t.Fatalf("held zero parent: %+v", out)
	}
	if !s.Contains(uint64(seq[1])) {
		t.Fatal("block after the held zero parent is not chained onto it")
	}
	if s.Contains(uint64(locals[1])) && uint64(locals[1]) != uint64(seq[1]) {
		t.Fatal("block after the held zero parent was stored as a root")
	}
}

// TestLongEventsOfVaryingLengthDoNotAllocate: the long-event scratch keeps
// its slots across events of 40 to 500 blocks, so re-offering them
// allocates nothing once the scratch has grown.
func TestLongEventsOfVaryingLengthDoNotAllocate(t *testing.T) {
	s := mustState(t, ckf.NewConfig(1<<14))
	chain := func(n int) *routerevent.RouterEvent {
		b := make([]routerevent.StoredBlock, n)
		for i := range b {
			b[i] = routerevent.StoredBlock{BlockHash: uint64(7000 + i), TokensHash: uint64(i)}
		}
		return chainEv(1, 0, nil, b...)
	}
	long, short := chain(500), chain(40)
	for _, ev := range []*routerevent.RouterEvent{long, short} {
		if out := s.ApplyEvent(ev); out.FirstError != nil {
			t.Fatal(out.FirstError)
		}
	}
	allocs := testing.AllocsPerRun(50, func() {
		for _, ev := range []*routerevent.RouterEvent{long, short} {
			if out := s.ApplyEvent(ev); out.FirstError != nil {
				panic(out.FirstError)
			}
		}
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per pair of long events", allocs)
	}
}

// TestCanonicalEventsFindTheirOwnDuplicates: an external hash repeated
// within one event under another canonical hash refuses the whole event,
// wherever the two copies sit, in short events (scanned) and long ones
// (hash tables filled on a filter hit), for a new member and for a member
// whose lineage does not hold the hash; the same events without the repeat
// are stored whole.
func TestCanonicalEventsFindTheirOwnDuplicates(t *testing.T) {
	for _, n := range []int{2, 10, 32, 33, 40, 300, 2000} {
		for _, pos := range [][2]int{{0, 1}, {0, n - 1}, {n / 2, n - 1}, {n - 2, n - 1}, {1, n / 2}} {
			i, j := pos[0], pos[1]
			if i >= j || j >= n {
				continue
			}
			blocks := make([]routerevent.StoredBlock, n)
			for k := range blocks {
				blocks[k] = routerevent.StoredBlock{BlockHash: 1<<40 + uint64(k)*0x9E3779B97F4A7C15, TokensHash: uint64(k)}
			}
			dup := slices.Clone(blocks)
			dup[j].BlockHash = dup[i].BlockHash
			s := mustState(t, ckf.NewConfig(1<<14))
			s.ApplyEvent(storedEv(2, 0, 7)) // member 2 holds an unrelated block
			for _, w := range []uint64{1, 2} {
				before := s.MemberBlockCount(Member{w, 0})
				if out := s.ApplyEvent(chainEv(w, 0, nil, dup...)); !errors.Is(out.FirstError, ckf.ErrInvalidBlockSequence) {
					t.Fatalf("n=%d, repeat at %d and %d, member %d: %v", n, i, j, w, out.FirstError)
				}
				if got := s.MemberBlockCount(Member{w, 0}); got != before {
					t.Fatalf("n=%d: a refused event changed member %d's blocks: %d → %d", n, w, before, got)
				}
				if out := s.ApplyEvent(chainEv(w, 0, nil, blocks...)); out.FirstError != nil {
					t.Fatalf("n=%d, member %d: %v", n, w, out.FirstError)
				}
				if got := s.MemberBlockCount(Member{w, 0}); got != before+n {
					t.Fatalf("n=%d: member %d owns %d blocks, want %d", n, w, got, before+n)
				}
			}
			if err := checkInvariants(s); err != nil {
				t.Fatal(err)
			}
		}
	}
}
