package cbi1

import "fmt"

// Snapshot is a completely assembled lane.
type Snapshot struct {
	// DcID is the dc_id every chunk carried.
	DcID uint64
	// Epoch is the snapshot's epoch (= FilterUpdate.sequence of its chunks).
	Epoch uint64
	// Words is the full bucket-word table, BucketCount words. The caller owns
	// it: the Assembler never touches it again unless it is handed back with
	// Recycle.
	Words []uint64
}

// Assembler rebuilds one lane from the chunks of a snapshot (§5.3). It
// accepts chunks strictly in order: chunk 0 (re)starts an assembly and fixes
// its epoch, chunk count and dc_id; every further chunk must be the next
// index with the same chunk count, epoch, dc_id and format, and must start at
// the first bucket not yet covered. Any violation discards the partial
// assembly and returns ErrChunkSequence; a consumer must then resubscribe.
// Words are written straight into the table, and because coverage must be
// contiguous and complete, every word of a finished table came from a chunk.
//
// An Assembler is not safe for concurrent use; one pool stream owns one.
type Assembler struct {
	format Format

	active     bool
	dcID       uint64
	epoch      uint64
	chunkCount uint32
	nextChunk  uint32
	nextBucket uint64

	// table is the lane being written; nil until the first chunk 0 (a
	// 2^24-bucket lane is 128 MiB, so it is not allocated up front).
	table []uint64
}

// NewAssembler returns an assembler for lanes of format f.
func NewAssembler(f Format) (*Assembler, error) {
	if !f.valid() {
		return nil, fail(ErrBucketCount, f.bucketCount, MaxBucketCount)
	}
	return &Assembler{format: f}, nil
}

// Format is the lane format this assembler accepts.
func (a *Assembler) Format() Format { return a.format }

// InProgress reports whether a snapshot is partially assembled.
func (a *Assembler) InProgress() bool { return a.active }

// Reset discards any partial assembly. The table buffer is kept for reuse.
func (a *Assembler) Reset() {
	a.active = false
	a.dcID, a.epoch = 0, 0
	a.chunkCount, a.nextChunk, a.nextBucket = 0, 0, 0
}

// Recycle hands back a table previously returned in a Snapshot (for example
// the one a newly installed snapshot replaced) so that the next assembly does
// not allocate. Tables of the wrong size are ignored.
func (a *Assembler) Recycle(words []uint64) {
	if a.table == nil && uint64(len(words)) == a.format.bucketCount {
		a.table = words
	}
}

// Add feeds one decoded frame. It returns the finished snapshot and true when
// fr completes the lane, and (zero, false, nil) while more chunks are needed.
// On error the partial assembly is discarded.
func (a *Assembler) Add(fr Frame) (Snapshot, bool, error) {
	if fr.Header.Kind != KindSnapshotChunk {
		return a.abort(fmt.Sprintf("frame of kind %v is not a snapshot chunk", fr.Header.Kind))
	}
	c := fr.Chunk
	// Re-checked here because a Frame can be built by hand, and the writes
	// below must stay inside the table whatever the frame says.
	if c.Count == 0 || c.Index >= c.Count {
		return a.abort(fmt.Sprintf("chunk %d of %d", c.Index, c.Count))
	}
	if fr.Header.Seed != a.format.seed || fr.Header.BucketCount != a.format.bucketCount {
		return a.abort(fmt.Sprintf("chunk format seed %#x buckets %d, assembling %v",
			fr.Header.Seed, fr.Header.BucketCount, a.format))
	}
	if c.Index == 0 {
		a.Reset()
		a.active = true
		a.dcID, a.epoch, a.chunkCount = fr.Header.DcID, fr.Header.Epoch, c.Count
		if a.table == nil {
			a.table = make([]uint64, a.format.bucketCount)
		}
	}
	switch {
	case !a.active:
		return a.abort(fmt.Sprintf("chunk %d without chunk 0", c.Index))
	case c.Index != a.nextChunk:
		return a.abort(fmt.Sprintf("chunk %d, expected %d", c.Index, a.nextChunk))
	case c.Count != a.chunkCount:
		return a.abort(fmt.Sprintf("chunk count %d, snapshot has %d", c.Count, a.chunkCount))
	case fr.Header.Epoch != a.epoch:
		return a.abort(fmt.Sprintf("epoch %d, snapshot has %d", fr.Header.Epoch, a.epoch))
	case fr.Header.DcID != a.dcID:
		return a.abort(fmt.Sprintf("dc_id %#x, snapshot has %#x", fr.Header.DcID, a.dcID))
	case c.BucketOffset != a.nextBucket:
		return a.abort(fmt.Sprintf("bucket offset %d, expected %d", c.BucketOffset, a.nextBucket))
	}
	n := uint64(c.Len())
	if n > a.format.bucketCount-a.nextBucket {
		return a.abort(fmt.Sprintf("%d words at offset %d overrun %d buckets", n, a.nextBucket, a.format.bucketCount))
	}
	c.CopyWords(a.table[a.nextBucket : a.nextBucket+n])
	a.nextBucket += n
	a.nextChunk++
	if a.nextChunk < a.chunkCount {
		return Snapshot{}, false, nil
	}
	covered := a.nextBucket
	if covered != a.format.bucketCount {
		a.Reset()
		return Snapshot{}, false, &Error{Kind: ErrIncompleteCoverage, Got: covered, Limit: a.format.bucketCount}
	}
	s := Snapshot{DcID: a.dcID, Epoch: a.epoch, Words: a.table}
	a.table = nil
	a.Reset()
	return s, true, nil
}

func (a *Assembler) abort(detail string) (Snapshot, bool, error) {
	a.Reset()
	return Snapshot{}, false, &Error{Kind: ErrChunkSequence, Detail: detail}
}
