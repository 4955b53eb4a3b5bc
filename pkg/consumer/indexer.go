package consumer

import (
	"sync"
	"sync/atomic"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/route"
)

// Indexer is GlobalCkfIndexer (spec §8.3): one indexer domain's transposed
// table shared by query goroutines and the lane ingestors.
//
// Concurrency: queries share only immutable addressing, the atomic table
// words, the atomic ready mask and the atomically published manifest. A
// query loads the ready mask exactly once (acquire) and never retries: it
// may finish against a lane retired after that load and may observe a
// cross-bucket mixture of old and new words during a delta. There is
// deliberately no seqlock, double buffer or reader retry.
type Indexer struct {
	manifest   atomic.Pointer[Manifest]
	table      *table
	addressing ckf.Addressing
	window     int
	// readyLanes and claimedLanes hold 16-bit masks; atomic Or/And set and
	// clear single bits.
	readyLanes   atomic.Uint32
	claimedLanes atomic.Uint32
	// configureMu serializes ConfigureLane's copy-on-write of the manifest.
	configureMu sync.Mutex
}

// NewIndexer validates the verification window (ErrInvalidVerificationWindow),
// sizes the table from the manifest's format (ErrCkf wrapping
// ckf.ErrCapacityOverflow for impossible sizes) and builds the addressing.
func NewIndexer(m *Manifest, search ckf.PrefixSearchConfig) (*Indexer, error) {
	if m == nil {
		return nil, &BuildError{Kind: ErrNoConfiguredLanes}
	}
	if w := search.VerificationWindow; w < 1 || w > ckf.MaxVerificationWindow {
		return nil, &BuildError{Kind: ErrInvalidVerificationWindow, Value: w}
	}
	bucketCount := m.Format().BucketCount
	addressing, err := ckf.NewAddressing(bucketCount, m.Format().Seed)
	if err != nil {
		return nil, ckfBuildError(err)
	}
	t, err := newTable(bucketCount)
	if err != nil {
		return nil, err
	}
	ix := &Indexer{table: t, addressing: addressing, window: search.VerificationWindow}
	ix.manifest.Store(m)
	return ix, nil
}

// Manifest returns the current manifest: the one given to NewIndexer plus
// any lane added since by ConfigureLane. The returned value is immutable.
func (ix *Indexer) Manifest() *Manifest { return ix.manifest.Load() }

// BucketCount returns the number of buckets per lane.
func (ix *Indexer) BucketCount() uint64 { return ix.table.bucketCount }

// ConfigureLane is a ckfrelay extension for a DC that joins while the
// indexer runs: it configures one more lane for pool, validated exactly like
// NewManifest (ErrMixedIndexerDomain, ErrDuplicatePool, ErrDuplicateDcLane),
// plus ErrInvalidLane for lane outside 0..16 and ErrLaneAlreadyConfigured for
// a lane that is already configured (even with the same pool). A lane is never unconfigured or
// re-pointed, so a query's captured ready mask always names configured lanes.
//
// The new manifest is published with one atomic store (copy-on-write), so a
// query sees either the old or the new lane set, never a torn one. The lane
// starts unready and unclaimed; ClaimLane then works for it.
func (ix *Indexer) ConfigureLane(lane int, pool ckf.PoolID) error {
	ix.configureMu.Lock()
	defer ix.configureMu.Unlock()
	next, err := ix.manifest.Load().withLane(lane, pool)
	if err != nil {
		return err
	}
	ix.manifest.Store(next)
	return nil
}

// TableMemory reports the table's size and whether it sits on huge pages
// (it reads /proc/self/smaps: for benchmarks and diagnostics, not hot paths).
func (ix *Indexer) TableMemory() TableMemory { return ix.table.memory() }

// ReadyLanes returns the ready mask with one acquire load.
func (ix *Indexer) ReadyLanes() uint16 { return uint16(ix.readyLanes.Load()) }

// RetireLaneReadiness clears one lane's ready bit before its ingestion FIFO
// is discarded. A query that already captured the bit may still finish
// under the weak-read contract. Lanes outside 0..16 are ignored.
func (ix *Indexer) RetireLaneReadiness(lane int) {
	if lane < 0 || lane >= ckf.LaneCount {
		return
	}
	ix.readyLanes.And(^uint32(1 << lane))
}

// ClaimLane hands out the single ingestor of a configured lane:
// ErrInvalidLane, ErrUnconfiguredLane or ErrLaneAlreadyClaimed otherwise.
// LaneIngestor.Release gives the claim back.
func (ix *Indexer) ClaimLane(lane int) (*LaneIngestor, error) {
	if lane < 0 || lane >= ckf.LaneCount {
		return nil, &BuildError{Kind: ErrInvalidLane, Lane: lane}
	}
	if _, ok := ix.Manifest().PoolID(lane); !ok {
		return nil, &BuildError{Kind: ErrUnconfiguredLane, Lane: lane}
	}
	bit := uint32(1) << lane
	if ix.claimedLanes.Or(bit)&bit != 0 {
		return nil, &BuildError{Kind: ErrLaneAlreadyClaimed, Lane: lane}
	}
	return newLaneIngestor(ix, lane), nil
}

// ValidateAssignment checks an assignment of lane against the current
// manifest (spec §8.4), in order: consumer instance, physical lane, lane
// owner, format, and, when hasPrev, an epoch newer than prevEpoch.
func (ix *Indexer) ValidateAssignment(lane int, id ckf.ProducerIdentity, lease ckf.LaneLease, prevEpoch uint64, hasPrev bool) error {
	m := ix.Manifest()
	if lease.ConsumerInstance != m.ConsumerInstance() {
		return &AssignmentError{Kind: ErrWrongConsumerInstance, Expected: uint64(m.ConsumerInstance()), Actual: uint64(lease.ConsumerInstance)}
	}
	if int(lease.PhysicalLane) != lane {
		return &AssignmentError{Kind: ErrWrongPhysicalLane, Expected: uint64(lane), Actual: uint64(lease.PhysicalLane)}
	}
	if pool, ok := m.PoolID(lane); !ok || pool != id.Pool {
		return &AssignmentError{Kind: ErrWrongLaneOwner, Lane: uint8(lane)}
	}
	if id.Format != m.Format() {
		return &AssignmentError{Kind: ErrWrongFormat}
	}
	if hasPrev && lease.AssignmentEpoch <= prevEpoch {
		return &AssignmentError{Kind: ErrStaleAssignmentEpoch, MinimumExclusive: prevEpoch, Actual: lease.AssignmentEpoch}
	}
	return nil
}

// LaneMatch is one captured lane's result. Present is false for lanes the
// query did not capture as ready.
type LaneMatch struct {
	Present bool
	Lane    uint8
	Pool    ckf.PoolID
	Depth   uint32
}

// QueryResult is GlobalCkfQueryResult: the ready mask the query captured
// and one entry per lane.
type QueryResult struct {
	CapturedReadyLanes uint16
	Lanes              [ckf.LaneCount]LaneMatch
}

// QueryScratch holds one query goroutine's reusable buffers. It grows to the
// longest query seen and is then reused, so steady-state queries do not
// allocate. A QueryScratch must not be shared by concurrent queries.
type QueryScratch struct {
	seq    []ckf.SequenceHash
	prober queryProber
}

// queryProber hashes lazily: the sequence-hash chain is extended only as far
// as the deepest position the search visits, and only visited positions are
// prepared into fingerprints and buckets.
type queryProber struct {
	table      *table
	addressing ckf.Addressing
	// locals feed the chain; nil when the caller supplied the whole chain.
	locals []ckf.LocalBlockHash
	// seq[:hashed] holds the sequence hashes computed so far.
	seq    []ckf.SequenceHash
	hashed int
	// key, when keyed, folds seq[:hashed] in order as extend computes it:
	// its multiply chain runs beside the hash chain instead of after it.
	key   route.KeyHash
	keyed bool
	// probes[i].Fingerprint == 0 marks position i as not yet prepared;
	// prepared fingerprints are never 0.
	probes []probeMemo
	sink   uint64
}

// probeMemo is one position's prepared probe and the lane bits already
// read for it: the search re-probes some positions (the verification
// window re-checks positions the binary phase probed), and a query sees one
// read of a lane word per position, as a weak read allows.
type probeMemo struct {
	ckf.Probe
	read, hits uint16
}

func (q *queryProber) prepared(pos int) *probeMemo {
	pm := &q.probes[pos]
	if pm.Fingerprint == 0 {
		if pos >= q.hashed {
			q.extend(pos)
		}
		pm.Probe = q.addressing.Prepare(uint64(q.seq[pos]))
	}
	return pm
}

// extend computes the chain through pos (spec §2.2).
func (q *queryProber) extend(pos int) {
	if q.keyed {
		q.extendKeyed(pos)
		return
	}
	i := q.hashed
	if i == 0 {
		q.seq[0] = ckf.SequenceHash(q.locals[0])
		i = 1
	}
	for ; i <= pos; i++ {
		q.seq[i] = ckf.NextSequenceHash(q.seq[i-1], q.locals[i])
	}
	q.hashed = pos + 1
}

// extendKeyed is extend folding each new sequence hash into q.key.
func (q *queryProber) extendKeyed(pos int) {
	k := q.key
	i := q.hashed
	if i == 0 {
		q.seq[0] = ckf.SequenceHash(q.locals[0])
		k.Add(uint64(q.seq[0]))
		i = 1
	}
	prev := q.seq[i-1]
	for ; i <= pos; i++ {
		prev = ckf.NextSequenceHash(prev, q.locals[i])
		q.seq[i] = prev
		k.Add(uint64(prev))
	}
	q.key = k
	q.hashed = pos + 1
}

func (q *queryProber) probe(pos int, need uint16) uint16 {
	pm := q.prepared(pos)
	if need&^pm.read == 0 {
		return pm.hits
	}
	read := lanesRead(need)
	pm.hits = pm.hits&^read | q.table.probeLanes(pm.Probe, need)
	pm.read |= read
	return pm.hits
}

func (q *queryProber) prefetch(pos int, need uint16) {
	if hasPrefetch {
		q.table.prefetchLanes(q.prepared(pos).Probe, need)
		return
	}
	q.sink ^= q.table.touchLanes(q.prepared(pos).Probe, need)
}

// FindPrefixMatches searches the currently ready lanes for the prefix of
// local block hashes, chained into sequence hashes (spec §2.2), with the
// prefix search of spec §11. It returns ErrUnavailable when no configured
// lane is ready. out is overwritten; s is reused. It does not allocate once
// s has grown to the query length.
func (ix *Indexer) FindPrefixMatches(hashes []ckf.LocalBlockHash, s *QueryScratch, out *QueryResult) error {
	_, err := ix.findLocals(hashes, s, out, false)
	return err
}

// FindPrefixMatchesChain is FindPrefixMatches that also returns the whole
// sequence-hash chain of hashes: the positions the search hashed are kept
// and the rest computed, so a caller that needs the chain (a router's key)
// does not hash the prompt twice. A non-nil key folds the chain in order
// (route.KeyOf's fold, started by the caller) as it is hashed, beside the
// hashing rather than in a pass after it. The chain is a view of s's
// buffer, valid until s's next query; nil with an error.
func (ix *Indexer) FindPrefixMatchesChain(hashes []ckf.LocalBlockHash, s *QueryScratch, out *QueryResult, key *route.KeyHash) ([]ckf.SequenceHash, error) {
	// The fold runs on a copy in s, so key itself does not escape.
	q := &s.prober
	if key != nil {
		q.key, q.keyed = *key, true
	}
	seq, err := ix.findLocals(hashes, s, out, true)
	if key != nil {
		*key, q.keyed = q.key, false
	}
	return seq, err
}

// findLocals is FindPrefixMatches, completing and returning the chain when
// chain is set.
func (ix *Indexer) findLocals(hashes []ckf.LocalBlockHash, s *QueryScratch, out *QueryResult, chain bool) ([]ckf.SequenceHash, error) {
	// The query's only readiness load.
	captured := ix.ReadyLanes()
	n := len(hashes)
	if cap(s.seq) < n {
		s.seq = make([]ckf.SequenceHash, n)
	}
	q := &s.prober
	q.locals, q.seq, q.hashed = hashes, s.seq[:n], 0
	err := ix.findWithCapturedReady(n, captured, s, out)
	var seq []ckf.SequenceHash
	if chain && err == nil {
		if n > q.hashed {
			q.extend(n - 1)
		}
		seq = q.seq
	}
	q.locals, q.seq = nil, nil // do not retain the caller's slice
	return seq, err
}

// FindPrefixMatchesSequence is FindPrefixMatches for callers that already
// hold the sequence hashes.
func (ix *Indexer) FindPrefixMatchesSequence(seqHashes []ckf.SequenceHash, s *QueryScratch, out *QueryResult) error {
	captured := ix.ReadyLanes()
	q := &s.prober
	q.locals, q.seq, q.hashed = nil, seqHashes, len(seqHashes)
	err := ix.findWithCapturedReady(len(seqHashes), captured, s, out)
	q.seq = nil
	return err
}

// findWithCapturedReady runs a query of n positions, already loaded into
// s.prober, against a captured ready mask.
func (ix *Indexer) findWithCapturedReady(n int, captured uint16, s *QueryScratch, out *QueryResult) error {
	m := ix.Manifest()
	captured &= m.ConfiguredLanes()
	*out = QueryResult{}
	if captured == 0 {
		return ErrUnavailable
	}
	out.CapturedReadyLanes = captured

	var depths [ckf.LaneCount]uint32
	if n > 0 {
		q := &s.prober
		if cap(q.probes) < n {
			q.probes = make([]probeMemo, n)
		}
		q.probes = q.probes[:n]
		clear(q.probes)
		q.table, q.addressing = ix.table, ix.addressing
		searchPrefixDepths(n, captured, ix.window, q, &depths)
	}
	for mask := captured; mask != 0; mask &= mask - 1 {
		l := lanesOf(mask)
		pool, _ := m.PoolID(l)
		out.Lanes[l] = LaneMatch{Present: true, Lane: uint8(l), Pool: pool, Depth: depths[l]}
	}
	return nil
}
