package producer

import (
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Touch is one recorded lane write: the bucket and the word it held before
// that write.
type Touch struct {
	Bucket   uint64
	Original uint64
}

// Mutator inserts and removes fingerprints on an owned lane with bounded
// relocation (spec §5). It owns its relocation RNG; it never allocates once
// its touch buffer has grown to the longest relocation seen.
type Mutator struct {
	words    []uint64
	addr     ckf.Addressing
	maxKicks int
	rng      uint64
	touched  []Touch
}

// NewMutator wraps words (len must equal the addressing's bucket count) with
// a relocation budget of maxKicks (0 = relocation-free) and an initial RNG
// state, normally ckf.LaneRNGSeed(seed, 0). The mutator writes words in place.
func NewMutator(words []uint64, addr ckf.Addressing, maxKicks int, rngState uint64) (*Mutator, error) {
	m, err := newMutator(words, addr, maxKicks, rngState)
	if err != nil {
		return nil, err
	}
	return &m, nil
}

func newMutator(words []uint64, addr ckf.Addressing, maxKicks int, rngState uint64) (Mutator, error) {
	if uint64(len(words)) != addr.BucketCount() {
		return Mutator{}, fmt.Errorf("producer: lane has %d words, addressing wants %d: %w", len(words), addr.BucketCount(), ckf.ErrCapacityOverflow)
	}
	if maxKicks < 0 || maxKicks > ckf.MaxKicks {
		return Mutator{}, &ckf.BuildError{Kind: ckf.ErrInvalidMaxKicks, Value: uint64(max(maxKicks, 0)), Maximum: ckf.MaxKicks}
	}
	return Mutator{words: words, addr: addr, maxKicks: maxKicks, rng: rngState, touched: make([]Touch, 0, 16)}, nil
}

// Words returns the lane the mutator writes (not a copy).
func (m *Mutator) Words() []uint64 { return m.words }

// RNGState returns the current relocation RNG state.
func (m *Mutator) RNGState() uint64 { return m.rng }

// Insert places one fingerprint copy of fullHash with up to maxKicks
// relocation steps. On success it returns every write as (bucket, value
// before) in write order; a bucket written twice appears twice and only its
// first entry is its true original. The slice is reused by the next call. On
// failure every write has been undone in reverse order, nothing is returned
// and the error is ckf.ErrCapacityExhausted; the RNG is not rolled back.
func (m *Mutator) Insert(fullHash uint64) ([]Touch, error) {
	return m.insert(fullHash, m.maxKicks)
}

// InsertWithoutRelocation is Insert with a budget of zero kicks: it only
// tries the two candidate buckets' empty slots.
func (m *Mutator) InsertWithoutRelocation(fullHash uint64) ([]Touch, error) {
	return m.insert(fullHash, 0)
}

func (m *Mutator) insert(fullHash uint64, kicks int) ([]Touch, error) {
	return m.insertProbe(m.addr.Prepare(fullHash), kicks)
}

// insertProbe is insert for a probe the caller already prepared (the
// State's warm-up pass computes it once per block).
func (m *Mutator) insertProbe(p ckf.Probe, kicks int) ([]Touch, error) {
	m.touched = m.touched[:0]
	if m.place(uint64(p.BucketA), p.Fingerprint) || m.place(uint64(p.BucketB), p.Fingerprint) {
		return m.touched, nil
	}
	if kicks == 0 {
		return nil, ckf.ErrCapacityExhausted
	}
	bucket := uint64(p.BucketA)
	if ckf.NextRandom(&m.rng)&1 != 0 {
		bucket = uint64(p.BucketB)
	}
	fp := p.Fingerprint
	for range kicks {
		s := int(ckf.NextRandom(&m.rng) & 3)
		w := m.words[bucket]
		evicted := ckf.Slot(w, s)
		m.write(bucket, ckf.WithSlot(w, s, fp))
		fp = evicted
		bucket = m.addr.Alternate(bucket, fp)
		if m.place(bucket, fp) {
			return m.touched, nil
		}
	}
	for i := len(m.touched) - 1; i >= 0; i-- {
		t := m.touched[i]
		m.words[t.Bucket] = t.Original
	}
	m.touched = m.touched[:0]
	return nil, ckf.ErrCapacityExhausted
}

// place writes fp into the first empty slot of bucket, if any.
func (m *Mutator) place(bucket uint64, fp uint16) bool {
	w := m.words[bucket]
	s := ckf.FirstEmpty(w)
	if s < 0 {
		return false
	}
	m.write(bucket, ckf.WithSlot(w, s, fp))
	return true
}

func (m *Mutator) write(bucket, value uint64) {
	m.touched = append(m.touched, Touch{Bucket: bucket, Original: m.words[bucket]})
	m.words[bucket] = value
}

// Remove deletes one copy of fullHash's fingerprint, looking in bucket_a then
// bucket_b, and returns the single write. If neither bucket holds the
// fingerprint it returns ckf.ErrIndexerInvariantViolation: the caller
// believed the hash resident.
func (m *Mutator) Remove(fullHash uint64) (Touch, error) {
	return m.removeProbe(m.addr.Prepare(fullHash))
}

func (m *Mutator) removeProbe(p ckf.Probe) (Touch, error) {
	for _, b := range [2]uint64{uint64(p.BucketA), uint64(p.BucketB)} {
		w := m.words[b]
		if s := ckf.FirstSlot(w, p.Fingerprint); s >= 0 {
			m.words[b] = ckf.WithSlot(w, s, 0)
			return Touch{Bucket: b, Original: w}, nil
		}
	}
	return Touch{}, ckf.ErrIndexerInvariantViolation
}

// Contains reports whether fullHash's fingerprint is in either candidate
// bucket (false positives possible).
func (m *Mutator) Contains(fullHash uint64) bool {
	p := m.addr.Prepare(fullHash)
	return ckf.Contains(m.words[p.BucketA], p.Fingerprint) || ckf.Contains(m.words[p.BucketB], p.Fingerprint)
}

// touch loads both candidate buckets of p so that their cache lines are in
// flight before the dependent work that needs them; see State.warmSink.
func (m *Mutator) touch(p ckf.Probe) uint64 {
	return m.words[p.BucketA] ^ m.words[p.BucketB]
}
