package producer

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// storeRange stores hashes first*0x9E37…|1 … for count blocks on member
// (worker, 0), perEvent blocks per event, as a worker caching a prefix would.
func storeRange(s *State, worker uint64, first, count uint64) {
	const perEvent = 64
	hashes := make([]uint64, 0, perEvent)
	for h := first; h < first+count; h++ {
		hashes = append(hashes, h*0x9E3779B97F4A7C15|1)
		if len(hashes) == perEvent || h == first+count-1 {
			s.ApplyEvent(storedEv(worker, 0, hashes...))
			hashes = hashes[:0]
		}
	}
}

// removeRange removes what storeRange(s, worker, first, count) stored.
func removeRange(s *State, worker uint64, first, count uint64) {
	const perEvent = 64
	hashes := make([]uint64, 0, perEvent)
	for h := first; h < first+count; h++ {
		hashes = append(hashes, h*0x9E3779B97F4A7C15|1)
		if len(hashes) == perEvent || h == first+count-1 {
			s.ApplyEvent(removedEv(worker, 0, hashes...))
			hashes = hashes[:0]
		}
	}
}

// TestCheckpointsOfSharedPrefixPoolsRestore: the tables grow with (member,
// block) edges, so a pool whose workers cache the same prefix needs one
// table of the prefix's size per worker while its unique blocks stay far
// below the relay's bound (4 × expected). Each such state must restore from
// its own checkpoint, identical to the original.
func TestCheckpointsOfSharedPrefixPoolsRestore(t *testing.T) {
	// 8192 buckets: the fixed budget this replaced allowed 131072 slots in
	// all, which every case below exceeds.
	const n = 26214
	cases := []struct {
		mode    ckf.HashMode
		workers uint64
		blocks  uint64
	}{
		{ckf.HashModeCanonical, 1, 19 * n / 10}, // one worker at 1.9 n
		{ckf.HashModeCanonical, 4, n / 2},
		{ckf.HashModeCanonical, 64, n / 10},
		{ckf.HashModeVerbatim, 64, n / 10},
		{ckf.HashModeCanonical, 512, 512}, // many small members on one prefix
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d_workers_x_%d_blocks", tc.mode, tc.workers, tc.blocks), func(t *testing.T) {
			cfg := ckf.NewConfig(n)
			cfg.Mode = tc.mode
			cfg.MaxKicks = 16 // beyond 1.6 n most inserts fail: fail fast
			s := mustState(t, cfg)
			for w := range tc.workers {
				storeRange(s, w, 1, tc.blocks)
			}
			s.Flush()
			if got := uint64(s.UniqueBlocks()); got != tc.blocks {
				t.Fatalf("setup: %d unique blocks, want %d", got, tc.blocks)
			}
			if err := s.CheckpointFits(); err != nil {
				t.Fatalf("CheckpointFits: %v", err)
			}
			b := checkpointBytes(t, s)
			got, err := RestoreState(bytes.NewReader(b), cfg)
			if err != nil {
				t.Fatalf("%d-byte checkpoint of %d workers × %d shared blocks: %v", len(b), tc.workers, tc.blocks, err)
			}
			if err := sameState(s, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(checkpointBytes(t, got), b) {
				t.Fatal("restored state re-encodes differently")
			}
		})
	}
}

// emptiedPool builds a state whose tables kept the capacity of 60,000
// blocks after their entries left (tables never shrink): member 0 still
// holds the prefix, members 1..emptied cached the same prefix and removed
// all of it but one block. The lane (64 expected blocks) is tiny, so the
// restore budget's base is its minimum, 64Ki slots.
func emptiedPool(t testing.TB, emptied uint64) (*State, ckf.Config) {
	t.Helper()
	cfg := ckf.NewConfig(64)
	cfg.MaxKicks = 1 // nearly every block is a capacity omission: keep it fast
	s := mustState(t, cfg)
	const prefix = 60000
	storeRange(s, 0, 1, prefix)
	for w := uint64(1); w <= emptied; w++ {
		storeRange(s, w, 1, prefix)
		removeRange(s, w, 2, prefix-1)
	}
	s.Flush()
	return s, cfg
}

// TestAStateTheRestoreWouldRefuseIsNeverWritten: the writer applies the
// restore's rule. Two emptied tables are paid for by the credit the full
// ones leave; three are not, and Checkpoint then writes nothing.
func TestAStateTheRestoreWouldRefuseIsNeverWritten(t *testing.T) {
	fits, cfg := emptiedPool(t, 2)
	if err := fits.CheckpointFits(); err != nil {
		t.Fatalf("two emptied tables: %v", err)
	}
	if err := sameState(fits, restore(t, checkpointBytes(t, fits), cfg)); err != nil {
		t.Fatal(err)
	}

	over, _ := emptiedPool(t, 3)
	err := over.CheckpointFits()
	var ce *CheckpointError
	if !errors.As(err, &ce) || ce.Kind != ErrCheckpointOverBudget || !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("three emptied tables: CheckpointFits = %v, want over_budget", err)
	}
	var buf bytes.Buffer
	if err := over.Checkpoint(&buf); !errors.Is(err, ErrCheckpointOverBudget) || buf.Len() != 0 {
		t.Fatalf("Checkpoint of an over-budget state: %v after %d bytes", err, buf.Len())
	}
}

// TestAnOverBudgetCheckpointIsRefusedWithoutAllocatingItsTables: a
// checkpoint of an over-budget state (written around the writer's check,
// as a build without it did) is read to its end and refused as over
// budget, without allocating the table it cannot pay for; the same bytes
// damaged are reported as corrupt or truncated, not as over budget.
func TestAnOverBudgetCheckpointIsRefusedWithoutAllocatingItsTables(t *testing.T) {
	for _, emptied := range []uint64{3, 0} {
		s, cfg := emptiedPool(t, emptied)
		if emptied == 0 {
			// The owner table itself over budget: one block left of 60,000.
			removeRange(s, 0, 2, 59999)
			s.Flush()
		}
		var buf bytes.Buffer
		if err := s.encodeCheckpoint(&buf, s.sortedMembers()); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()

		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := RestoreState(bytes.NewReader(b), cfg)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrCheckpointOverBudget) || !errors.Is(err, ErrCheckpoint) {
			t.Fatalf("%d emptied members: %v", emptied, err)
		}
		if emptied == 0 {
			// The owner table comes first: refusing it allocates the read
			// buffer and the lane, nothing of its 2 MiB.
			if alloc, table := after.TotalAlloc-before.TotalAlloc, 16*s.owners.capacity(); alloc > table/8 {
				t.Fatalf("refusing the owner table allocated %d bytes; the table is %d", alloc, table)
			}
		}

		damaged := slices.Clone(b)
		damaged[len(b)-16] ^= 1 // the pool count, past the refused table
		if _, err := RestoreState(bytes.NewReader(damaged), cfg); !errors.Is(err, ErrCheckpointChecksum) {
			t.Fatalf("%d emptied members, damaged: %v, want checksum_mismatch", emptied, err)
		}
		if _, err := RestoreState(bytes.NewReader(b[:len(b)-9]), cfg); !errors.Is(err, ErrCheckpointTruncated) {
			t.Fatalf("%d emptied members, truncated: %v, want truncated", emptied, err)
		}
	}
}

// TestTheRestoreBudgetFollowsTheBytesReceived pins the rule: with nothing
// read yet only the base is available, and every table pays for itself at
// budgetSlotsPerEntry slots per entry plus a minimum table.
func TestTheRestoreBudgetFollowsTheBytesReceived(t *testing.T) {
	b := newSlotBudget(8) // tiny lane: the 64Ki minimum
	if b.left != 1<<16 {
		t.Fatalf("base %d", b.left)
	}
	if got := newSlotBudget(1 << 20).left; got != 16<<20 {
		t.Fatalf("base of 2^20 buckets: %d", got)
	}
	// A table grown by inserts (3c/8 + 1 entries in c slots) always leaves
	// credit, whatever the account held before.
	for c := uint64(16); c <= 1<<24; c <<= 1 {
		acct := slotBudget{}
		if !acct.account(&u64Table{n: int(3*c/8 + 1), mask: c - 1}) {
			t.Fatalf("grown table of %d slots refused on an empty account", c)
		}
	}
	acct := slotBudget{}
	if acct.account(&u64Table{n: 1, mask: 1<<16 - 1}) {
		t.Fatal("an emptied table was paid for by nothing")
	}
	// Saturation instead of overflow, from each of the three sums.
	acct = slotBudget{left: 1<<64 - 1}
	acct.credit(1 << 62)
	if acct.left != 1<<64-1 || !acct.charge(1<<63) {
		t.Fatalf("saturating credit: %d", acct.left)
	}
	for _, tc := range []struct {
		name          string
		left, entries uint64
		want          uint64
	}{
		{"plain", 5, 3, 5 + budgetSlotsPerEntry*3 + tableMinSlots},
		{"entries × slots overflows", 0, 1 << 62, 1<<64 - 1},
		{"the minimum table overflows", 0, (1<<64 - 4) / budgetSlotsPerEntry, 1<<64 - 1},
		{"the account overflows", 1<<64 - tableMinSlots + 1, 0, 1<<64 - 1},
		{"the account just fits", 1<<64 - 1 - tableMinSlots, 0, 1<<64 - 1},
	} {
		acct := slotBudget{left: tc.left}
		acct.credit(tc.entries)
		if acct.left != tc.want {
			t.Errorf("%s: left %d, want %d", tc.name, acct.left, tc.want)
		}
	}
}

// TestStoreRangeStoresEveryBlockOnce keeps the helpers above honest.
func TestStoreRangeStoresEveryBlockOnce(t *testing.T) {
	s := mustState(t, verbatimConfig(1024))
	storeRange(s, 3, 10, 130)
	if s.UniqueBlocks() != 130 || s.MemberBlockCount(Member{WorkerID: 3}) != 130 {
		t.Fatalf("%d unique, %d owned", s.UniqueBlocks(), s.MemberBlockCount(Member{WorkerID: 3}))
	}
	removeRange(s, 3, 10, 130)
	if s.UniqueBlocks() != 0 {
		t.Fatalf("%d left", s.UniqueBlocks())
	}
}

// TestATableTheAccountCoversIsNotBuffered: a table whose capacity the
// account covers exactly when it starts (an owner table of 2^16 slots, the
// whole base) is allocated up front and its entries go straight into it:
// restoring allocates little beyond the two tables, with no buffer of the
// entries.
func TestATableTheAccountCoversIsNotBuffered(t *testing.T) {
	cfg := ckf.NewConfig(1024)
	cfg.MaxKicks = 1
	s := mustState(t, cfg)
	storeRange(s, 1, 0, 40000)
	s.Flush()
	if c := s.owners.capacity(); c != checkpointBaseSlots(s.Format().BucketCount) {
		t.Fatalf("fixture owner table has %d slots", c)
	}
	b := checkpointBytes(t, s)
	tables := 16 * (s.owners.capacity() + s.members[Member{WorkerID: 1}].lineage.capacity())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	got, err := RestoreState(bytes.NewReader(b), cfg)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	// Beyond the tables: the lane, the 64 KiB read buffer and small state;
	// buffering the 40000 owner entries would add over 640 KiB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > tables+256<<10 {
		t.Fatalf("restore allocated %d bytes for %d bytes of tables", alloc, tables)
	}
	if err := sameState(s, got); err != nil {
		t.Fatal(err)
	}
}
