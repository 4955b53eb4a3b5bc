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
	// Added counts entries added, Covered those a window covered, Expired
	// those that reached MaxAge, Dropped those pushed out by MaxEntries.
	Added, Covered, Expired, Dropped uint64
}

type entry struct {
	at, due int64 // ns since the ledger's base instant
	tokens  uint64
}

// ring is one lane's entries in the order they were added.
type ring struct {
	buf     []entry
	head, n int
	pending uint64
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
	kept := 0
	for i := 0; i < r.n; i++ {
		e := *r.get(i)
		if e.due <= w {
			r.pending -= e.tokens
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

// Pending is lane's tokens not yet covered at now (0 for a lane out of
// range), after expiring its entries older than MaxAge.
func (l *Ledger) Pending(lane int, now time.Time) uint64 {
	if lane < 0 || lane >= len(l.lanes) {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &l.lanes[lane]
	l.expire(r, max(l.ns(now), l.last))
	return r.pending
}

// PendingInto writes every lane's pending tokens at now into dst (up to
// len(dst) lanes) under one lock, and returns how many it wrote.
func (l *Ledger) PendingInto(now time.Time, dst []uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := max(l.ns(now), l.last)
	n := min(len(dst), len(l.lanes))
	for i := range n {
		r := &l.lanes[i]
		l.expire(r, t)
		dst[i] = r.pending
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
