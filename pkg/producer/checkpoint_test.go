package producer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// workload drives a State with random events over a few members and a
// small hash space: chains (canonical), duplicates, unknown removals,
// clears (which pool emptied member tables), lifecycle operations, and
// enough load for capacity failures and table growth.
type workload struct {
	r     *rand.Rand
	mode  ckf.HashMode
	space uint64
}

// event returns the next event, or nil for a lifecycle operation that op
// performs on s itself.
func (w *workload) event() *routerevent.RouterEvent {
	worker, rank := w.r.Uint64N(6), uint32(w.r.UintN(2))
	hash := func() uint64 { return w.r.Uint64N(w.space) }
	switch k := w.r.IntN(20); {
	case k < 14:
		n := 1 + w.r.IntN(24)
		blocks := make([]routerevent.StoredBlock, n)
		for i := range blocks {
			ext := hash()
			tokens := ext * 7
			if w.r.IntN(16) == 0 {
				tokens = hash() % 5 // provokes lineage conflicts
			}
			blocks[i] = routerevent.StoredBlock{BlockHash: ext, TokensHash: tokens}
		}
		var parent *uint64
		if w.mode == ckf.HashModeCanonical && w.r.IntN(4) == 0 {
			parent = ptr(hash())
		}
		ev := chainEv(worker, rank, parent, blocks...)
		if w.r.IntN(20) == 0 {
			ev.StorageTier = routerevent.TierHostPinned
		}
		return ev
	case k < 19:
		hs := make([]uint64, 1+w.r.IntN(6))
		for i := range hs {
			hs[i] = hash()
		}
		return removedEv(worker, rank, hs...)
	default:
		return clearedEv(worker, rank)
	}
}

// step applies one random operation to s and returns its outcome for
// comparison: events mostly, sometimes a lifecycle call.
func (w *workload) step(s *State) EventOutcome {
	if w.r.IntN(50) == 0 {
		var b Batch
		var err error
		switch w.r.IntN(3) {
		case 0:
			b, err = s.RemoveWorker(w.r.Uint64N(6))
		case 1:
			b, err = s.ReplaceRank(Member{WorkerID: w.r.Uint64N(6)}, []uint64{w.r.Uint64N(w.space), w.r.Uint64N(w.space)})
		default:
			b = s.Flush()
		}
		return EventOutcome{FirstError: err, Publication: b.Clone(), PublicationBoundary: true}
	}
	out := s.ApplyEvent(w.event())
	out.Publication = out.Publication.Clone()
	return out
}

func checkpointBytes(t testing.TB, s *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.Checkpoint(&buf); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	return buf.Bytes()
}

func restore(t testing.TB, b []byte, cfg ckf.Config) *State {
	t.Helper()
	s, err := RestoreState(bytes.NewReader(b), cfg)
	if err != nil {
		t.Fatalf("RestoreState: %v", err)
	}
	return s
}

// sameState compares everything a checkpoint carries, including the table
// layouts and pooled capacities that make later outcomes identical.
func sameState(a, b *State) error {
	if a.cfg != b.cfg || a.format != b.format {
		return fmt.Errorf("config %+v / %+v", a.cfg, b.cfg)
	}
	if !slices.Equal(a.mut.words, b.mut.words) {
		return errors.New("lane words differ")
	}
	if a.mut.rng != b.mut.rng {
		return fmt.Errorf("rng %#x / %#x", a.mut.rng, b.mut.rng)
	}
	if !maps.Equal(maps.Collect(a.ExactBlocks()), maps.Collect(b.ExactBlocks())) {
		return errors.New("ExactBlocks differ")
	}
	if !sameTable(&a.owners, &b.owners) {
		return errors.New("owner table layout differs")
	}
	if !slices.Equal(a.Members(), b.Members()) {
		return fmt.Errorf("members %v / %v", a.Members(), b.Members())
	}
	for _, m := range a.Members() {
		if !maps.Equal(maps.Collect(a.MemberBlocks(m)), maps.Collect(b.MemberBlocks(m))) {
			return fmt.Errorf("member %+v blocks differ", m)
		}
		if !sameTable(&a.members[m].lineage, &b.members[m].lineage) {
			return fmt.Errorf("member %+v table layout differs", m)
		}
	}
	pool := func(s *State) (caps []uint64) {
		for _, ms := range s.freeMember {
			caps = append(caps, ms.lineage.capacity())
		}
		return caps
	}
	if !slices.Equal(pool(a), pool(b)) {
		return fmt.Errorf("member pool %v / %v", pool(a), pool(b))
	}
	sa, sb := a.Stats(), b.Stats()
	// The publication window is not checkpointed.
	sa.PendingEvents, sa.DirtyBuckets, sb.PendingEvents, sb.DirtyBuckets = 0, 0, 0, 0
	if sa != sb {
		return fmt.Errorf("stats\n%v\n%v", sa, sb)
	}
	return nil
}

func sameTable(a, b *u64Table) bool {
	return a.hasZero == b.hasZero && a.zeroVal == b.zeroVal && a.n == b.n && slices.Equal(a.slots, b.slots)
}

func sameOutcome(a, b EventOutcome) bool {
	return a.FirstError == b.FirstError && a.UnknownRemovals == b.UnknownRemovals &&
		a.PublicationBoundary == b.PublicationBoundary && slices.Equal(a.Publication.Images, b.Publication.Images)
}

func TestCheckpointRoundTripIsIndistinguishable(t *testing.T) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		for seed := range uint64(6) {
			t.Run(fmt.Sprintf("%s/seed=%d", mode, seed), func(t *testing.T) {
				cfg := ckf.NewConfig(256)
				cfg.Mode = mode
				cfg.MaxKicks = 64
				cfg.PublishEveryNEvents = 3
				orig := mustState(t, cfg)
				w := &workload{r: rand.New(rand.NewPCG(seed, uint64(mode))), mode: mode, space: 1200}
				for range 1500 + 300*int(seed) {
					w.step(orig)
				}
				st := orig.Stats()
				if st.CapacityFailures == 0 || st.UniqueBlocks < 200 || len(orig.freeMember) == 0 {
					t.Fatalf("weak workload: %v pool %d", st, len(orig.freeMember))
				}
				if err := checkInvariants(orig); err != nil {
					t.Fatal(err)
				}

				// A checkpoint taken with an open window: everything but
				// the window survives.
				if !orig.HasPendingPublication() {
					orig.ApplyEvent(storedEv(1, 0, 99999))
				}
				open := restore(t, checkpointBytes(t, orig), cfg)
				if err := sameState(orig, open); err != nil {
					t.Fatal(err)
				}
				if open.HasPendingPublication() || open.Stats().PendingEvents != 0 || open.Stats().DirtyBuckets != 0 {
					t.Fatalf("restored state has a pending publication: %v", open.Stats())
				}

				orig.Flush()
				b := checkpointBytes(t, orig)
				got := restore(t, b, cfg)
				if err := sameState(orig, got); err != nil {
					t.Fatal(err)
				}
				if err := checkInvariants(got); err != nil {
					t.Fatal(err)
				}
				if again := checkpointBytes(t, got); !bytes.Equal(again, b) {
					t.Fatal("restored state re-encodes differently")
				}
				// Same further operations (same random stream) on both.
				wa := &workload{r: rand.New(rand.NewPCG(seed, 99)), mode: mode, space: 1200}
				wb := &workload{r: rand.New(rand.NewPCG(seed, 99)), mode: mode, space: 1200}
				for i := range 1500 {
					oa, ob := wa.step(orig), wb.step(got)
					if !sameOutcome(oa, ob) {
						t.Fatalf("step %d: outcomes differ\n%+v\n%+v", i, oa, ob)
					}
					if !slices.Equal(orig.Words(), got.Words()) {
						t.Fatalf("step %d: words differ", i)
					}
				}
				if err := sameState(orig, got); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func TestCheckpointOfAnEmptyStateAndOfKeyZero(t *testing.T) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		cfg := ckf.NewConfig(64)
		cfg.Mode = mode
		s := mustState(t, cfg)
		got := restore(t, checkpointBytes(t, s), cfg)
		if err := sameState(s, got); err != nil {
			t.Fatal(err)
		}
		// Hash 0 lives outside the slots in both table kinds.
		s.ApplyEvent(storedEv(0, 0, 0, 5))
		s.Flush()
		got = restore(t, checkpointBytes(t, s), cfg)
		if err := sameState(s, got); err != nil {
			t.Fatal(err)
		}
		if o, ok := got.Ownership(0); !ok || o.Refcount != 1 {
			t.Fatalf("%s: hash 0 ownership %+v %v", mode, o, ok)
		}
	}
}

// smallCheckpoint is a checkpoint of a small state with members, a pool
// entry and capacity failures.
func smallCheckpoint(t testing.TB, mode ckf.HashMode) ([]byte, ckf.Config) {
	t.Helper()
	cfg := ckf.NewConfig(8)
	cfg.Mode = mode
	cfg.MaxKicks = 8
	s := mustState(t, cfg)
	w := &workload{r: rand.New(rand.NewPCG(1, 2)), mode: mode, space: 40}
	for range 60 {
		w.step(s)
	}
	s.ApplyEvent(storedEv(7, 1, 3, 4))
	s.Flush()
	return checkpointBytes(t, s), cfg
}

func TestRestoreRejectsEveryTruncation(t *testing.T) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		b, cfg := smallCheckpoint(t, mode)
		restore(t, b, cfg)
		for n := range len(b) {
			_, err := RestoreState(bytes.NewReader(b[:n]), cfg)
			if !errors.Is(err, ErrCheckpointTruncated) || !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("%s: prefix %d/%d: %v", mode, n, len(b), err)
			}
		}
		_, err := RestoreState(bytes.NewReader(append(slices.Clone(b), 0)), cfg)
		if !errors.Is(err, ErrCheckpointMalformed) {
			t.Fatalf("%s: trailing byte: %v", mode, err)
		}
	}
}

func TestRestoreRejectsEveryBitFlip(t *testing.T) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		b, cfg := smallCheckpoint(t, mode)
		bucketCount := int(mustState(t, cfg).Format().BucketCount)
		// rng, telemetry and words: plain data, only the checksum sees it.
		dataStart, dataEnd := checkpointHeaderSize, checkpointHeaderSize+8+8*telemetryCounters+8*bucketCount
		kinds := map[CheckpointErrorKind]int{}
		for i := range 8 * len(b) {
			c := slices.Clone(b)
			c[i/8] ^= 1 << (i % 8)
			_, err := RestoreState(bytes.NewReader(c), cfg)
			var ce *CheckpointError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("%s: flip of bit %d accepted or not typed: %v", mode, i, err)
			}
			kinds[ce.Kind]++
			pos := i / 8
			if (pos >= dataStart && pos < dataEnd || pos >= len(b)-8) && ce.Kind != ErrCheckpointChecksum {
				t.Fatalf("%s: flip of data bit %d: %v", mode, i, err)
			}
		}
		for _, k := range []CheckpointErrorKind{ErrCheckpointMagic, ErrCheckpointVersion, ErrCheckpointFormat, ErrCheckpointChecksum} {
			if kinds[k] == 0 {
				t.Fatalf("%s: no flip reported %s: %v", mode, k, kinds)
			}
		}
	}
}

func TestRestoreRejectsAnotherFormatOrMode(t *testing.T) {
	b, cfg := smallCheckpoint(t, ckf.HashModeCanonical)
	for name, mut := range map[string]func(*ckf.Config){
		"expected blocks": func(c *ckf.Config) { c.ExpectedBlocksPerDC = 1 << 10 },
		"seed":            func(c *ckf.Config) { c.Seed++ },
		"mode":            func(c *ckf.Config) { c.Mode = ckf.HashModeVerbatim },
	} {
		c := cfg
		mut(&c)
		_, err := RestoreState(bytes.NewReader(b), c)
		var ce *CheckpointError
		if !errors.As(err, &ce) || ce.Kind != ErrCheckpointFormat {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// Fields outside the format apply from now on.
	c := cfg
	c.ExpectedBlocksPerDC, c.MaxKicks, c.PublishEveryNEvents = 9, 100, 7 // 9 blocks: same bucket count
	s, err := RestoreState(bytes.NewReader(b), c)
	if err != nil || s.Config() != c {
		t.Fatalf("compatible config refused: %v", err)
	}
	// An invalid config is its own error.
	c.MaxKicks = 0
	if _, err := RestoreState(bytes.NewReader(b), c); !errors.Is(err, ckf.ErrInvalidMaxKicks) || errors.Is(err, ErrCheckpoint) {
		t.Fatalf("invalid config: %v", err)
	}
}

// reseal recomputes the checksum of an edited checkpoint.
func reseal(b []byte) []byte {
	n := len(b) - 8
	binary.LittleEndian.PutUint64(b[n:], xxh3.Hash(b[:n]))
	return b
}

func TestRestoreVerifiesInvariantsBehindAValidChecksum(t *testing.T) {
	cfg := verbatimConfig(8)
	s := mustState(t, cfg)
	s.ApplyEvent(storedEv(1, 0, 3, 4, 5))
	s.ApplyEvent(storedEv(2, 0, 4, 6))
	b := checkpointBytes(t, s)
	bucketCount := int(s.Format().BucketCount)
	owners := checkpointHeaderSize + 8 + 8*telemetryCounters + 8*bucketCount
	le := binary.LittleEndian
	hasZero := b[owners] == 1
	if hasZero {
		t.Fatal("fixture should not track hash 0")
	}
	capacity, count := le.Uint64(b[owners+1:]), le.Uint64(b[owners+9:])
	first := owners + 17
	if count < 2 {
		t.Fatalf("fixture has %d owners", count)
	}
	cases := map[string]struct {
		edit func(c []byte) []byte
		kind CheckpointErrorKind
	}{
		"refcount":           {func(c []byte) []byte { c[first+8]++; return c }, ErrCheckpointMalformed},
		"non-resident":       {func(c []byte) []byte { c[first+12] = 0; return c }, ErrCheckpointMalformed},
		"stray value bits":   {func(c []byte) []byte { c[first+15] = 0x80; return c }, ErrCheckpointMalformed},
		"entries swapped":    {func(c []byte) []byte { swap16(c[first:], c[first+16:]); return c }, ErrCheckpointMalformed},
		"capacity too large": {func(c []byte) []byte { le.PutUint64(c[owners+1:], 1<<40); return c }, ErrCheckpointOverBudget},
		"capacity not pow2":  {func(c []byte) []byte { le.PutUint64(c[owners+1:], capacity+1); return c }, ErrCheckpointMalformed},
		"count over load":    {func(c []byte) []byte { le.PutUint64(c[owners+9:], capacity); return c }, ErrCheckpointMalformed},
		"body length":        {func(c []byte) []byte { le.PutUint64(c[32:], le.Uint64(c[32:])+8); return c }, ErrCheckpointMalformed},
		"body length short":  {func(c []byte) []byte { le.PutUint64(c[32:], le.Uint64(c[32:])-8); return c }, ErrCheckpointMalformed},
		"body too long":      {func(c []byte) []byte { return append(c[:len(c)-8], make([]byte, 16)...) }, ErrCheckpointMalformed},
		"lane":               {func(c []byte) []byte { c[checkpointHeaderSize+64] ^= 0xFF; return c }, ErrCheckpointMalformed},
		"reserved":           {func(c []byte) []byte { c[7] = 1; return c }, ErrCheckpointMalformed},
	}
	for name, tc := range cases {
		c := reseal(tc.edit(slices.Clone(b)))
		if name == "body too long" {
			le.PutUint64(c[32:], le.Uint64(c[32:])+8)
			c = reseal(c)
		}
		_, err := RestoreState(bytes.NewReader(c), cfg)
		var ce *CheckpointError
		if !errors.As(err, &ce) || ce.Kind != tc.kind {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func swap16(a, b []byte) {
	var tmp [16]byte
	copy(tmp[:], a[:16])
	copy(a[:16], b[:16])
	copy(b[:16], tmp[:])
}

// failingWriter accepts limit bytes, then fails.
type failingWriter struct{ limit int }

var errWriterFull = errors.New("writer full")

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.limit {
		return 0, errWriterFull
	}
	f.limit -= len(p)
	return len(p), nil
}

func TestCheckpointReturnsTheWritersError(t *testing.T) {
	b, cfg := smallCheckpoint(t, ckf.HashModeCanonical)
	s := restore(t, b, cfg)
	for _, limit := range []int{0, len(b) - 8} {
		if err := s.Checkpoint(&failingWriter{limit: limit}); !errors.Is(err, errWriterFull) {
			t.Fatalf("limit %d: %v", limit, err)
		}
	}
}

func FuzzRestoreState(f *testing.F) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		b, _ := smallCheckpoint(f, mode)
		f.Add(b)
		cfg := ckf.NewConfig(8)
		cfg.Mode = mode
		f.Add(checkpointBytes(f, mustState(f, cfg)))
	}
	f.Add([]byte("CKC1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
			cfg := ckf.NewConfig(8)
			cfg.Mode = mode
			cfg.MaxKicks = 8
			// As given, and resealed so the structure checks behind the
			// checksum are explored too.
			inputs := [][]byte{data}
			if len(data) >= checkpointHeaderSize+8 {
				inputs = append(inputs, reseal(slices.Clone(data)))
			}
			for _, in := range inputs {
				s, err := RestoreState(bytes.NewReader(in), cfg)
				if err != nil {
					if !errors.Is(err, ErrCheckpoint) {
						t.Fatalf("untyped error: %v", err)
					}
					continue
				}
				if err := checkInvariants(s); err != nil {
					t.Fatalf("accepted state breaks invariants: %v", err)
				}
				if again := checkpointBytes(t, s); !bytes.Equal(again, in) {
					t.Fatalf("accepted input re-encodes differently:\n%x\n%x", in, again)
				}
				// The restored state must be usable (a forged lane may
				// still make a removal report an invariant violation).
				s.ApplyEvent(storedEv(1, 0, 1, 2, 3))
				s.ApplyEvent(clearedEv(1, 0))
				s.Flush()
			}
		}
	})
}

// TestRestoreCountsTheCopiesOfCollidingHashes: two resident hashes with the
// same fingerprint and bucket pair need two copies in the lane. A forged
// lane that keeps one copy for both and spends the other slot on a stray
// fingerprint has the right slot count and answers both lookups, but the
// first removal would leave the other hash unfindable: a false negative.
func TestRestoreCountsTheCopiesOfCollidingHashes(t *testing.T) {
	cfg := verbatimConfig(8)
	s := mustState(t, cfg)
	addr := s.mut.addr
	first := addr.Prepare(1)
	var twin uint64
	for h := uint64(2); ; h++ {
		if addr.Prepare(h) == first {
			twin = h
			break
		}
	}
	s.ApplyEvent(storedEv(1, 0, 1))
	s.ApplyEvent(storedEv(2, 0, twin))
	b := checkpointBytes(t, s)
	restore(t, b, cfg)

	words := checkpointHeaderSize + 8 + 8*telemetryCounters
	le := binary.LittleEndian
	stray := first.Fingerprint ^ 1
	if stray == 0 {
		stray = 2
	}
	forged := slices.Clone(b)
	edited := false
	for _, bucket := range []uint32{first.BucketA, first.BucketB} {
		at := words + 8*int(bucket)
		w := le.Uint64(forged[at:])
		if slot := ckf.FirstSlot(w, first.Fingerprint); slot >= 0 && !edited {
			le.PutUint64(forged[at:], ckf.WithSlot(w, slot, stray))
			edited = true
		}
	}
	if !edited {
		t.Fatal("fixture lane holds no copy of the colliding fingerprint")
	}
	_, err := RestoreState(bytes.NewReader(reseal(forged)), cfg)
	var ce *CheckpointError
	if !errors.As(err, &ce) || ce.Kind != ErrCheckpointMalformed {
		t.Fatalf("a lane with one copy for two colliding hashes was restored: %v", err)
	}
}
