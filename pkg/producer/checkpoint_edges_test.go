package producer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// An over-budget table refused early in a large checkpoint: the rest of
// the body (a member table far larger than the read buffer) must still be
// hashed, so the checkpoint is called over budget, not corrupt.
func TestAnOverBudgetTableEarlyInALargeCheckpointIsReportedAsSuch(t *testing.T) {
	cfg := verbatimConfig(1 << 16)
	s := mustState(t, cfg)
	storeRange(s, 1, 1, 20000)
	s.Flush()
	b := checkpointBytes(t, s)
	if len(b) < 8*checkpointChunk {
		t.Fatalf("fixture of %d bytes does not outgrow the read buffer", len(b))
	}
	owners := checkpointHeaderSize + 8 + 8*telemetryCounters + 8*int(s.Format().BucketCount)
	if b[owners] != 0 {
		t.Fatal("fixture should not track hash 0")
	}
	forged := slices.Clone(b)
	binary.LittleEndian.PutUint64(forged[owners+1:], 1<<40) // the owner table's capacity
	_, err := RestoreState(bytes.NewReader(reseal(forged)), cfg)
	var ce *CheckpointError
	if !errors.As(err, &ce) || ce.Kind != ErrCheckpointOverBudget {
		t.Fatalf("an intact checkpoint with an over-budget first table: %v, want over_budget", err)
	}
}

// A source that fails after handing out the whole checkpoint fails the
// restore with its error: nothing says the checkpoint ended there.
func TestARestoreReportsAReaderErrorAfterTheChecksum(t *testing.T) {
	b, cfg := smallCheckpoint(t, ckf.HashModeVerbatim)
	boom := errors.New("disk went away")
	r := io.MultiReader(bytes.NewReader(b), &failingReader{err: boom})
	if _, err := RestoreState(r, cfg); !errors.Is(err, boom) {
		t.Fatalf("restore over a reader failing after the checksum: %v", err)
	}
	if _, err := RestoreState(bytes.NewReader(b), cfg); err != nil {
		t.Fatalf("the same bytes alone: %v", err)
	}
}

type failingReader struct{ err error }

func (f *failingReader) Read([]byte) (int, error) { return 0, f.err }

// Entries past the first listed out of their layout order are refused: the
// restored table would not be the checkpointed one.
func TestRestoreRefusesLaterEntriesOutOfLayoutOrder(t *testing.T) {
	cfg := verbatimConfig(8)
	s := mustState(t, cfg)
	s.ApplyEvent(storedEv(1, 0, 3, 4, 5))
	s.ApplyEvent(storedEv(2, 0, 4, 6))
	b := checkpointBytes(t, s)
	owners := checkpointHeaderSize + 8 + 8*telemetryCounters + 8*int(s.Format().BucketCount)
	if n := binary.LittleEndian.Uint64(b[owners+9:]); n < 3 {
		t.Fatalf("fixture has %d owners", n)
	}
	first := owners + 17
	forged := slices.Clone(b)
	swap16(forged[first+16:], forged[first+32:]) // the second and third entries
	_, err := RestoreState(bytes.NewReader(reseal(forged)), cfg)
	var ce *CheckpointError
	if !errors.As(err, &ce) || ce.Kind != ErrCheckpointMalformed {
		t.Fatalf("entries 2 and 3 swapped: %v", err)
	}
}

// In verbatim mode a member re-offering a block it already holds changes
// nothing and is no error, through an event and through ReplaceRanks.
func TestAVerbatimReofferIsANoOp(t *testing.T) {
	s := mustState(t, verbatimConfig(256))
	s.ApplyEvent(storedEv(1, 0, 21, 22))
	s.Flush()
	words := slices.Clone(s.Words())
	if out := s.ApplyEvent(storedEv(1, 0, 22, 21)); out.FirstError != nil {
		t.Fatalf("re-offer: %v", out.FirstError)
	}
	if o, _ := s.Ownership(21); o.Refcount != 1 || !slices.Equal(words, s.Words()) {
		t.Fatalf("re-offer changed the state: %+v", o)
	}
	if _, err := s.ReplaceRanks(map[Member][]uint64{{WorkerID: 1}: {21, 22, 21}}); err != nil {
		t.Fatalf("a replacement listing a block twice: %v", err)
	}
	if o, _ := s.Ownership(21); o.Refcount != 1 {
		t.Fatalf("after the replacement: %+v", o)
	}
}
