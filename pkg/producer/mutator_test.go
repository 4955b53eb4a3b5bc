package producer

import (
	"errors"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

func newTestMutator(t *testing.T, buckets uint64, maxKicks int) *Mutator {
	t.Helper()
	addr, err := ckf.NewAddressing(buckets, ckf.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMutator(make([]uint64, buckets), addr, maxKicks, ckf.LaneRNGSeed(ckf.DefaultSeed, 0))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestBoundedRelocationRollsBackEveryWriteAndEmitsNoDirtyBucket(t *testing.T) {
	// Mutator level: two full buckets, one kick.
	m := newTestMutator(t, 2, 1)
	for h := uint64(1); h <= 8; h++ {
		if _, err := m.Insert(h); err != nil {
			t.Fatalf("insert %d: %v", h, err)
		}
	}
	before := slices.Clone(m.Words())
	rng := m.RNGState()
	touched, err := m.Insert(9)
	if !errors.Is(err, ckf.ErrCapacityExhausted) || touched != nil {
		t.Fatalf("insert 9 = %v, %v; want nil, CapacityExhausted", touched, err)
	}
	if !slices.Equal(before, m.Words()) {
		t.Fatalf("words %x, want rolled back %x", m.Words(), before)
	}
	if m.RNGState() == rng {
		t.Fatal("RNG must advance (it is not rolled back)")
	}

	// State level: the failed store marks nothing dirty and publishes nothing.
	cfg := verbatimConfig(1)
	cfg.MaxKicks = 1
	cfg.PublishEveryNEvents = 16
	s := mustState(t, cfg)
	for h := uint64(1); h <= 8; h++ {
		s.ApplyEvent(storedEv(1, 0, h))
	}
	s.Flush()
	words := s.CopyWords(nil)
	out := s.ApplyEvent(storedEv(1, 0, 9))
	if !errors.Is(out.FirstError, ckf.ErrCapacityExhausted) {
		t.Fatalf("first error %v", out.FirstError)
	}
	if st := s.Stats(); st.DirtyBuckets != 0 || st.CapacityFailures != 1 {
		t.Fatalf("stats after failure: %v", st)
	}
	if !slices.Equal(words, s.Words()) {
		t.Fatal("lane changed by a failed relocation")
	}
	if b := s.Flush(); !b.Empty() {
		t.Fatalf("flush after failure published %v", b.Images)
	}
}

func TestDistinctHashesWithOneCkfRepresentationKeepSeparateCopies(t *testing.T) {
	for _, buckets := range []uint64{2, 4, 8} {
		m := newTestMutator(t, buckets, 8)
		h1, h2 := findCollision(t, m.addr)
		p := m.addr.Prepare(h1)
		if p != m.addr.Prepare(h2) || h1 == h2 {
			t.Fatalf("not a collision: %#x %#x", h1, h2)
		}
		copies := func() int {
			n := 0
			for _, w := range m.Words() {
				for s := range 4 {
					if ckf.Slot(w, s) == p.Fingerprint {
						n++
					}
				}
			}
			return n
		}
		for _, h := range []uint64{h1, h2} {
			if _, err := m.Insert(h); err != nil {
				t.Fatal(err)
			}
		}
		if c := copies(); c != 2 {
			t.Fatalf("%d buckets: %d copies after two inserts", buckets, c)
		}
		if _, err := m.Remove(h1); err != nil {
			t.Fatal(err)
		}
		if c := copies(); c != 1 || !m.Contains(h2) {
			t.Fatalf("after one removal: %d copies, contains %v", c, m.Contains(h2))
		}
		if _, err := m.Remove(h2); err != nil {
			t.Fatal(err)
		}
		if m.Contains(h2) {
			t.Fatal("still contained after both removals")
		}
		if _, err := m.Remove(h2); !errors.Is(err, ckf.ErrIndexerInvariantViolation) {
			t.Fatalf("third removal: %v", err)
		}
	}
}

func TestStoreRemoveChurnDrainsEveryPhysicalSlot(t *testing.T) {
	m := newTestMutator(t, 64, ckf.DefaultMaxKicks)
	for h := uint64(1); h <= 128; h++ {
		if _, err := m.Insert(h * 0x9E3779B97F4A7C15); err != nil {
			t.Fatal(err)
		}
	}
	for h := uint64(128); h >= 1; h-- {
		if _, err := m.Remove(h * 0x9E3779B97F4A7C15); err != nil {
			t.Fatalf("remove %d: %v", h, err)
		}
	}
	for b, w := range m.Words() {
		if w != 0 {
			t.Fatalf("bucket %d = %#x after churn", b, w)
		}
	}

	// Same churn through the producer, with its window tracking.
	s := mustState(t, verbatimConfig(128))
	base := s.CopyWords(nil)
	for h := uint64(1); h <= 128; h++ {
		applyBatch(base, s.ApplyEvent(storedEv(1, 0, h)).Publication)
	}
	for h := uint64(128); h >= 1; h-- {
		applyBatch(base, s.ApplyEvent(removedEv(1, 0, h)).Publication)
	}
	for b, w := range s.Words() {
		if w != 0 || base[b] != 0 {
			t.Fatalf("bucket %d = %#x (replayed %#x)", b, w, base[b])
		}
	}
}

func TestTouchedListRecordsFirstOriginalAndRelocationFreeVariant(t *testing.T) {
	m := newTestMutator(t, 2, 64)
	for h := uint64(1); h <= 7; h++ {
		touched, err := m.Insert(h)
		if err != nil || len(touched) != 1 {
			t.Fatalf("insert %d: %v %v", h, touched, err)
		}
	}
	before := slices.Clone(m.Words())
	touched, err := m.InsertWithoutRelocation(8)
	if err != nil || len(touched) != 1 || touched[0].Original != before[touched[0].Bucket] {
		t.Fatalf("relocation-free insert of 8: %v %v", touched, err)
	}
	if _, err := m.InsertWithoutRelocation(9); !errors.Is(err, ckf.ErrCapacityExhausted) {
		t.Fatalf("relocation-free insert into a full lane: %v", err)
	}
}

// TestNewMutatorAcceptsExactlyTheKickRange: 0 (relocation-free) through
// ckf.MaxKicks are valid budgets; anything outside is ErrInvalidMaxKicks,
// as is a lane of the wrong size ErrCapacityOverflow.
func TestNewMutatorAcceptsExactlyTheKickRange(t *testing.T) {
	addr, err := ckf.NewAddressing(4, ckf.DefaultSeed)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{0, 1, ckf.MaxKicks} {
		if _, err := NewMutator(make([]uint64, 4), addr, k, 1); err != nil {
			t.Errorf("maxKicks %d: %v", k, err)
		}
	}
	for _, k := range []int{-1, ckf.MaxKicks + 1} {
		if _, err := NewMutator(make([]uint64, 4), addr, k, 1); !errors.Is(err, ckf.ErrInvalidMaxKicks) {
			t.Errorf("maxKicks %d: %v", k, err)
		}
	}
	if _, err := NewMutator(make([]uint64, 8), addr, 1, 1); !errors.Is(err, ckf.ErrCapacityOverflow) {
		t.Errorf("lane of 8 words for 4 buckets: %v", err)
	}
}

// specInsert is spec §5.1 written out step by step, as the reference the
// Mutator's relocation path must match word for word.
func specInsert(words []uint64, addr ckf.Addressing, maxKicks int, rng *uint64, h uint64) bool {
	p := addr.Prepare(h)
	for _, b := range []uint64{uint64(p.BucketA), uint64(p.BucketB)} {
		if s := ckf.FirstEmpty(words[b]); s >= 0 {
			words[b] = ckf.WithSlot(words[b], s, p.Fingerprint)
			return true
		}
	}
	orig := slices.Clone(words)
	bucket := uint64(p.BucketA)
	if ckf.NextRandom(rng)&1 != 0 { // step 3: bucket_a on an even draw
		bucket = uint64(p.BucketB)
	}
	fp := p.Fingerprint
	for range maxKicks {
		s := int(ckf.NextRandom(rng) & 3)
		evicted := ckf.Slot(words[bucket], s)
		words[bucket] = ckf.WithSlot(words[bucket], s, fp)
		fp = evicted
		bucket = addr.Alternate(bucket, fp)
		if e := ckf.FirstEmpty(words[bucket]); e >= 0 {
			words[bucket] = ckf.WithSlot(words[bucket], e, fp)
			return true
		}
	}
	copy(words, orig)
	return false
}

// TestRelocationFollowsTheSpecWordForWord: filling a 64-bucket lane to
// its first failures, every insertion (including the relocating ones and
// the rolled-back failures) leaves the words and the RNG state the spec's
// procedure does.
func TestRelocationFollowsTheSpecWordForWord(t *testing.T) {
	const maxKicks = 50
	m := newTestMutator(t, 64, maxKicks)
	ref, rng := make([]uint64, 64), ckf.LaneRNGSeed(ckf.DefaultSeed, 0)
	relocated, failed := 0, 0
	for h := uint64(1); h <= 400 && failed < 5; h++ {
		touched, err := m.Insert(h)
		if ok := specInsert(ref, m.addr, maxKicks, &rng, h); ok != (err == nil) {
			t.Fatalf("hash %d: mutator %v, spec success %v", h, err, ok)
		}
		if err != nil {
			failed++
		} else if len(touched) > 1 {
			relocated++
		}
		if !slices.Equal(m.Words(), ref) || m.RNGState() != rng {
			t.Fatalf("hash %d: words or RNG state differ from the spec's", h)
		}
	}
	if relocated == 0 || failed == 0 {
		t.Fatalf("weak fixture: %d relocations, %d failures", relocated, failed)
	}
}
