package wanproxy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// Direction is a way through a link.
type Direction int

const (
	// Up is from the side that connected (a DC leaf) to the target (a hub node).
	Up Direction = iota
	// Down is from the target back to the side that connected.
	Down
)

func (d Direction) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// ParseDirections maps "up", "down" or "both" (or "") to the directions.
func ParseDirections(s string) ([]Direction, error) {
	switch strings.ToLower(s) {
	case "", "both":
		return []Direction{Up, Down}, nil
	case "up":
		return []Direction{Up}, nil
	case "down":
		return []Direction{Down}, nil
	}
	return nil, invalid("direction", s, "want up, down or both")
}

// Duration is a time.Duration that reads and writes as Go's duration text
// ("75ms") in JSON; a bare number reads as milliseconds.
type Duration time.Duration

// MarshalJSON writes the duration as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "75ms" or 75 (milliseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var ms float64
	if err := json.Unmarshal(b, &ms); err != nil {
		return fmt.Errorf("duration: want \"75ms\" or a number of milliseconds, got %s", b)
	}
	*d = Duration(ms * float64(time.Millisecond))
	return nil
}

// Latency delays one direction: each chunk by Delay ± Jitter (uniform).
type Latency struct {
	Delay  Duration `json:"delay"`
	Jitter Duration `json:"jitter"`
}

// Validate refuses negative values and a jitter above the delay.
func (l Latency) Validate() error {
	switch {
	case l.Delay < 0 || l.Jitter < 0:
		return invalid("latency", fmt.Sprint(time.Duration(l.Delay), "±", time.Duration(l.Jitter)), "durations must be ≥ 0")
	case l.Jitter > l.Delay:
		return invalid("latency", fmt.Sprint(time.Duration(l.Delay), "±", time.Duration(l.Jitter)), "jitter must not exceed the delay")
	}
	return nil
}

// sample draws one chunk's delay.
func (l Latency) sample() time.Duration {
	d := time.Duration(l.Delay)
	if j := time.Duration(l.Jitter); j > 0 {
		d += time.Duration(rand.Int64N(int64(2*j)+1)) - j
	}
	return d
}

// DirToxics is the impairment of one direction.
type DirToxics struct {
	Latency
	// BytesPerSecond caps the direction (0: unlimited).
	BytesPerSecond int64 `json:"bytes_per_second"`
}

// Toxics is the whole impairment state of a link.
type Toxics struct {
	Up   DirToxics `json:"up"`
	Down DirToxics `json:"down"`
	// Stalled: nothing is forwarded (connections stay open) until Heal.
	Stalled bool `json:"stalled"`
	// StallTimeout, when positive, closes connections stalled this long.
	StallTimeout Duration `json:"stall_timeout"`
	// Cut: open connections were closed; new ones are refused until Heal.
	Cut bool `json:"cut"`
}

func (t *Toxics) dir(d Direction) *DirToxics {
	if d == Up {
		return &t.Up
	}
	return &t.Down
}

// pacer spaces writes so that one direction of a link carries at most rate
// bytes/s, over all of its connections together. A writer reserves its
// bytes and sleeps until its slot; an idle link gathers at most burst of
// credit.
type pacer struct {
	mu   sync.Mutex
	rate int64
	next time.Time
}

// burst is the credit an idle paced direction may gather.
const burst = 10 * time.Millisecond

func (p *pacer) setRate(r int64) {
	p.mu.Lock()
	p.rate = r
	p.mu.Unlock()
}

// piece is the largest write that reserve is asked for at once, so a
// shared cap interleaves the connections and a slow rate still paces
// smoothly (about 50 slots a second).
func (p *pacer) piece() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rate <= 0 {
		return 1 << 30
	}
	return int(min(max(p.rate/50, 512), 16<<10))
}

// reserve books n bytes and returns how long to wait before sending them.
func (p *pacer) reserve(n int, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rate <= 0 {
		return 0
	}
	if floor := now.Add(-burst); p.next.Before(floor) {
		p.next = floor
	}
	p.next = p.next.Add(time.Duration(float64(n) / float64(p.rate) * float64(time.Second)))
	return p.next.Sub(now)
}
