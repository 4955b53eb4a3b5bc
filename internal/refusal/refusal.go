// Package refusal keeps refused events from going unnoticed: per source
// (a worker, an engine) it keeps a sliding window of accepted and refused
// events, says when a warning is due (rate-limited per source), and says
// which sources are refusing most of their recent events, so the owner
// can raise a standing fault instead of only counting.
//
// Concurrency: a Tracker is safe for concurrent use (one mutex; the
// owner's event loop writes, status readers read).
package refusal

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Defaults of Config's zero fields.
const (
	DefaultWindow    = 30 * time.Second
	DefaultMinEvents = 8
	DefaultWarnEvery = 30 * time.Second
	DefaultMaxKeys   = 4096
)

// slots is the window's resolution: it slides by Window/slots.
const slots = 6

// Config bounds a Tracker; zero fields take the defaults.
type Config struct {
	// Window is how far back "recent" reaches.
	Window time.Duration
	// MinEvents is the fewest events in the window for "most are
	// refused" to hold: one refused event alone is a warning, not a fault.
	MinEvents uint64
	// WarnEvery is the shortest time between two warnings of one source.
	WarnEvery time.Duration
	// MaxKeys bounds the sources tracked (keys come from untrusted input);
	// past it a new source is not tracked until an idle one ages out.
	MaxKeys int
}

func (c Config) withDefaults() Config {
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.MinEvents == 0 {
		c.MinEvents = DefaultMinEvents
	}
	if c.WarnEvery <= 0 {
		c.WarnEvery = DefaultWarnEvery
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	return c
}

type slot struct {
	tick              int64 // which Window/slots period the counts belong to
	accepted, refused uint64
}

type entry struct {
	slots      [slots]slot
	reason     string
	warned     time.Time
	suppressed uint64
}

// Tracker tracks the sources of one component.
type Tracker struct {
	cfg   Config
	width int64 // one slot's length in nanoseconds

	mu   sync.Mutex
	keys map[uint64]*entry
}

// New returns a Tracker.
func New(cfg Config) *Tracker {
	cfg = cfg.withDefaults()
	return &Tracker{cfg: cfg, width: max(int64(cfg.Window)/slots, 1), keys: make(map[uint64]*entry)}
}

// Warning is a due warning: the caller logs it with its sample.
type Warning struct {
	// Suppressed is how many refusals of the source went unlogged since
	// its previous warning.
	Suppressed uint64
}

// Accept counts n accepted events of key.
func (t *Tracker) Accept(key uint64, n int, now time.Time) {
	if n <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.entry(key, now); e != nil {
		t.current(e, now).accepted += uint64(n)
	}
}

// Refuse counts n refused events of key for reason and reports whether a
// warning is due (at most one per Config.WarnEvery and source).
func (t *Tracker) Refuse(key uint64, n int, reason string, now time.Time) (Warning, bool) {
	if n <= 0 {
		return Warning{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entry(key, now)
	if e == nil {
		return Warning{}, false
	}
	t.current(e, now).refused += uint64(n)
	e.reason = reason
	if !e.warned.IsZero() && now.Sub(e.warned) < t.cfg.WarnEvery {
		e.suppressed += uint64(n)
		return Warning{}, false
	}
	w := Warning{Suppressed: e.suppressed}
	e.warned, e.suppressed = now, 0
	return w, true
}

// Refusing is a source most of whose recent events were refused.
type Refusing struct {
	Key               uint64
	Accepted, Refused uint64
	// Reason is the reason of its latest refusal.
	Reason string
}

func (r Refusing) String() string {
	return fmt.Sprintf("%d of %d recent events refused (%s)", r.Refused, r.Accepted+r.Refused, r.Reason)
}

// Refusing returns the sources refusing most of their recent events (more
// refused than accepted, at least Config.MinEvents in the window), by key.
// It also forgets sources idle for a whole window.
func (t *Tracker) Refusing(now time.Time) []Refusing {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Refusing
	for k, e := range t.keys {
		a, r := t.sums(e, now)
		if a+r == 0 && now.Sub(e.warned) >= t.cfg.WarnEvery {
			delete(t.keys, k)
			continue
		}
		if a+r >= t.cfg.MinEvents && r > a {
			out = append(out, Refusing{Key: k, Accepted: a, Refused: r, Reason: e.reason})
		}
	}
	slices.SortFunc(out, func(x, y Refusing) int {
		switch {
		case x.Key < y.Key:
			return -1
		case x.Key > y.Key:
			return 1
		}
		return 0
	})
	return out
}

// Recent returns key's accepted and refused events in the window.
func (t *Tracker) Recent(key uint64, now time.Time) (accepted, refused uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.keys[key]; e != nil {
		return t.sums(e, now)
	}
	return 0, 0
}

// entry returns key's entry, creating it within MaxKeys (nil past it).
func (t *Tracker) entry(key uint64, now time.Time) *entry {
	if e := t.keys[key]; e != nil {
		return e
	}
	if len(t.keys) >= t.cfg.MaxKeys {
		for k, e := range t.keys {
			if a, r := t.sums(e, now); a+r == 0 {
				delete(t.keys, k)
			}
		}
		if len(t.keys) >= t.cfg.MaxKeys {
			return nil
		}
	}
	e := &entry{}
	t.keys[key] = e
	return e
}

func (t *Tracker) tick(now time.Time) int64 { return now.UnixNano() / t.width }

// current returns the slot of now, emptied if it held an older period.
func (t *Tracker) current(e *entry, now time.Time) *slot {
	tk := t.tick(now)
	s := &e.slots[int(uint64(tk)%slots)]
	if s.tick != tk {
		*s = slot{tick: tk}
	}
	return s
}

// sums adds the slots still inside the window ending at now.
func (t *Tracker) sums(e *entry, now time.Time) (accepted, refused uint64) {
	tk := t.tick(now)
	for _, s := range e.slots {
		if s.tick <= tk && tk-s.tick < slots {
			accepted += s.accepted
			refused += s.refused
		}
	}
	return accepted, refused
}
