package inflight

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults and limits of a Config.
const (
	// DefaultMaxEntries is the default Config.MaxEntries: a lane taking
	// 800 routes/s keeps every one for DefaultMaxAge.
	DefaultMaxEntries = 4096
	// DefaultMaxAge is the default Config.MaxAge: the indexer's default load
	// age bound (five 1 s windows).
	DefaultMaxAge = 5 * time.Second
	// MaxLanes bounds Config.Lanes.
	MaxLanes = 1024
	// MaxEntriesLimit bounds Config.MaxEntries.
	MaxEntriesLimit = 1 << 20
	// MaxTokens caps one entry's tokens (2³²: far past any prompt), so a
	// lane's sum stays below 2⁵² and needs no saturation inside the Ledger.
	MaxTokens = 1 << 32
)

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("inflight: bad config")

// Config bounds a Ledger.
type Config struct {
	// Lanes is the number of lanes, numbered 0..Lanes-1 (1..MaxLanes).
	Lanes int
	// MaxEntries bounds each lane's entries (0: DefaultMaxEntries).
	MaxEntries int
	// MaxAge is how long an entry waits for a covering window (0:
	// DefaultMaxAge).
	MaxAge time.Duration
}

// Stats are a Ledger's counters since New (Entries and Pending are current).
type Stats struct {
	// Entries is the number of entries held over every lane.
	Entries int
	// Prefilling is the number of covered entries still draining
	// (CoverPrefilling).
	Prefilling int
	// Added counts entries added, Covered those a window covered, Expired
	// those that reached MaxAge, Dropped those pushed out by MaxEntries;
	// Added = Entries + Covered + Expired + Dropped. Drained counts the
	// prefilling entries that left the account (drained, or the nearest to
	// drained pushed out by MaxEntries).
	Added, Covered, Expired, Dropped, Drained uint64
}

type entry struct {
	at, due int64 // ns since the ledger's base instant
	tokens  uint64
}

// ring is one lane's entries in the order they were added, and its
// prefilling entries.
type ring struct {
	buf     []entry
	head, n int
	pending uint64
	pre     prefilling
}

// prefilling is a lane's covered entries whose prompts the lane's load
// windows cannot show (CoverPrefilling): a min-heap by the instant each
// finishes draining. An entry of rate r (tokens/ns) finishing at f holds
// r·(f − now) tokens at now, so the lane's sum is sumRF − now·sumR over
// the entries not finished.
type prefilling struct {
	heap       []drain
	sumRF      float64
	sumR       float64
	maxEntries int
}

type drain struct {
	finish int64   // ns on the ledger's scale
	rate   float64 // tokens/ns
}

// add adds d, dropping the entry closest to finishing when the heap is
// full; it reports whether it dropped one.
func (p *prefilling) add(d drain) (dropped bool) {
	if len(p.heap) == p.maxEntries {
		p.pop()
		dropped = true
	}
	p.heap = append(p.heap, d)
	p.sumRF += d.rate * float64(d.finish)
	p.sumR += d.rate
	for i := len(p.heap) - 1; i != 0; {
		parent := (i - 1) / 2
		if !p.heap[i].before(p.heap[parent]) {
			break
		}
		p.heap[parent], p.heap[i] = p.heap[i], p.heap[parent]
		i = parent
	}
	return dropped
}

// before orders the heap. Entries finishing at the same instant may go in
// either order: they hold the same tokens from then on (none).
func (d drain) before(e drain) bool { return d.finish < e.finish }

// pop removes the entry finishing first.
func (p *prefilling) pop() {
	top := p.heap[0]
	last := len(p.heap) - 1
	p.heap[0] = p.heap[last]
	p.heap = p.heap[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < last && p.heap[l].before(p.heap[small]) {
			small = l
		}
		if r < last && p.heap[r].before(p.heap[small]) {
			small = r
		}
		if small == i {
			break
		}
		p.heap[i], p.heap[small] = p.heap[small], p.heap[i]
		i = small
	}
	if len(p.heap) == 0 {
		// No rounding left over from the removed entries.
		p.sumRF, p.sumR = 0, 0
		return
	}
	p.sumRF -= top.rate * float64(top.finish)
	p.sumR -= top.rate
}

// expire removes the entries finished at now and returns how many.
func (p *prefilling) expire(now int64) int {
	n := 0
	for len(p.heap) > 0 && p.heap[0].finish <= now {
		p.pop()
		n++
	}
	return n
}

// tokens is what the entries not finished at now still hold (expire(now)
// first).
func (p *prefilling) tokens(now int64) uint64 {
	// Rounding can leave the sums a hair below zero, never NaN (finite
	// rates and instants).
	v := max(p.sumRF-float64(now)*p.sumR, 0)
	return uint64(min(math.Round(v), float64(MaxTokens)*float64(p.maxEntries)))
}

func (r *ring) get(i int) *entry { return &r.buf[(r.head+i)%len(r.buf)] }

func (r *ring) pop() {
	r.pending -= r.buf[r.head].tokens
	r.head = (r.head + 1) % len(r.buf)
	r.n--
}

// Ledger is the in-flight account of every lane. See the package comment
// for its contract; the zero value is not usable (use New).
type Ledger struct {
	mu     sync.Mutex
	maxAge int64
	maxN   int
	lanes  []ring
	base   time.Time
	based  bool
	last   int64
	st     Stats
}

// New returns an empty Ledger.
func New(c Config) (*Ledger, error) {
	if c.Lanes < 1 || c.Lanes > MaxLanes {
		return nil, fmt.Errorf("%w: lanes %d, want 1..%d", ErrConfig, c.Lanes, MaxLanes)
	}
	if c.MaxEntries == 0 {
		c.MaxEntries = DefaultMaxEntries
	}
	if c.MaxEntries < 1 || c.MaxEntries > MaxEntriesLimit {
		return nil, fmt.Errorf("%w: max entries %d, want 1..%d", ErrConfig, c.MaxEntries, MaxEntriesLimit)
	}
	if c.MaxAge < 0 {
		return nil, fmt.Errorf("%w: negative max age %s", ErrConfig, c.MaxAge)
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	return &Ledger{maxAge: int64(c.MaxAge), maxN: c.MaxEntries, lanes: make([]ring, c.Lanes)}, nil
}

// Lanes is the number of lanes.
func (l *Ledger) Lanes() int { return len(l.lanes) }

// ns is t on the ledger's scale. Called with mu held.
func (l *Ledger) ns(t time.Time) int64 {
	if !l.based {
		l.base, l.based = t, true
	}
	return int64(t.Sub(l.base))
}

// Add accounts tokens against lane from at, due at at + rtt: a window of
// the lane observed at or after the due instant covers it. It reports false
// (and accounts nothing) for a lane out of range or zero tokens; tokens
// above MaxTokens count as MaxTokens and a negative rtt as 0.
func (l *Ledger) Add(lane int, tokens uint64, at time.Time, rtt time.Duration) bool {
	if lane < 0 || lane >= len(l.lanes) || tokens == 0 {
		return false
	}
	tokens = min(tokens, MaxTokens)
	rtt = max(rtt, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	t := max(l.ns(at), l.last)
	l.last = t
	r := &l.lanes[lane]
	l.expire(r, t)
	if r.buf == nil {
		r.buf = make([]entry, l.maxN)
	}
	if r.n == len(r.buf) {
		r.pop()
		l.st.Dropped++
		l.st.Entries--
	}
	due := t + int64(rtt)
	if due < t { // overflow: never due
		due = math.MaxInt64
	}
	*r.get(r.n) = entry{at: t, due: due, tokens: tokens}
	r.n++
	r.pending += tokens
	l.st.Added++
	l.st.Entries++
	return true
}

// expire drops r's entries added at or before now − MaxAge. Called with mu
// held; entries are in the order of their at.
func (l *Ledger) expire(r *ring, now int64) {
	cut := now - l.maxAge
	for r.n > 0 && r.buf[r.head].at <= cut {
		r.pop()
		l.st.Expired++
		l.st.Entries--
	}
}

// Cover removes lane's entries due at or before observed, the instant a
// load window of the lane was observed at the DC (on the caller's clock),
// and returns how many it removed. A lane out of range covers nothing.
func (l *Ledger) Cover(lane int, observed time.Time) int {
	return l.CoverPrefilling(lane, observed, 0)
}

// CoverPrefilling is Cover for a window whose prefill figure leaves out the
// prompts the DC is prefilling (an estimate from request counts): each
// entry it covers stays in the lane's pending tokens, draining from its due
// instant at perSec tokens/s (one worker's prefill speed while it shares
// the worker), until it has drained or for at most MaxAge from observed.
// An entry added MaxAge or more before observed is not kept. perSec ≤ 0,
// NaN or infinite is Cover.
func (l *Ledger) CoverPrefilling(lane int, observed time.Time, perSec float64) int {
	if lane < 0 || lane >= len(l.lanes) {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &l.lanes[lane]
	if r.n == 0 {
		return 0
	}
	w := l.ns(observed)
	rate := perSec / float64(time.Second) // tokens/ns
	keep := rate > 0 && !math.IsInf(rate, 0)
	if keep && r.pre.maxEntries == 0 {
		r.pre.maxEntries = l.maxN
		r.pre.heap = make([]drain, 0, l.maxN)
	}
	kept := 0
	for i := 0; i < r.n; i++ {
		e := *r.get(i)
		if e.due <= w {
			r.pending -= e.tokens
			if keep && e.at > w-l.maxAge {
				l.prefill(r, e, rate, w)
			}
			continue
		}
		*r.get(kept) = e
		kept++
	}
	removed := r.n - kept
	r.n = kept
	l.st.Covered += uint64(removed)
	l.st.Entries -= removed
	return removed
}

// prefill keeps covered entry e of r draining at rate (tokens/ns) from its
// due instant, for at most MaxAge past the cover at w. Called with mu held.
func (l *Ledger) prefill(r *ring, e entry, rate float64, w int64) {
	finish := float64(e.due) + float64(e.tokens)/rate
	finish = min(finish, float64(w)+float64(l.maxAge))
	if finish <= float64(w) {
		l.st.Drained++
		return
	}
	if r.pre.add(drain{finish: int64(finish), rate: rate}) {
		l.st.Drained++ // pushed out early, by MaxEntries
		l.st.Prefilling--
	}
	l.st.Prefilling++
}

// expirePrefilling drops r's prefilling entries finished at now. Called
// with mu held.
func (l *Ledger) expirePrefilling(r *ring, now int64) {
	n := r.pre.expire(now)
	l.st.Drained += uint64(n)
	l.st.Prefilling -= n
}

// Pending is lane's tokens not yet covered at now, plus what its
// prefilling entries still hold (0 for a lane out of range), after
// expiring its entries older than MaxAge and the drained ones.
func (l *Ledger) Pending(lane int, now time.Time) uint64 {
	if lane < 0 || lane >= len(l.lanes) {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &l.lanes[lane]
	t := max(l.ns(now), l.last)
	l.expire(r, t)
	l.expirePrefilling(r, t)
	return AddSat(r.pending, r.pre.tokens(t))
}

// PendingInto writes every lane's Pending tokens at now into dst (up to
// len(dst) lanes) under one lock, and returns how many it wrote.
func (l *Ledger) PendingInto(now time.Time, dst []uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := max(l.ns(now), l.last)
	n := min(len(dst), len(l.lanes))
	for i := range n {
		r := &l.lanes[i]
		l.expire(r, t)
		l.expirePrefilling(r, t)
		dst[i] = AddSat(r.pending, r.pre.tokens(t))
	}
	return n
}

// Stats returns the counters.
func (l *Ledger) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

// AddSat is a + b, saturating at the uint64 maximum: a window's load plus
// a lane's pending tokens.
func AddSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}
