package route

import (
	"slices"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// A DC with no RTT given or configured is shown as unknown and charged the
// largest known RTT, never 0; MissingRTT names such DCs for a router that
// refuses them at start.
func TestUnknownRTTIsNeverZero(t *testing.T) {
	r := New(Config{RTT: map[string]time.Duration{"a": 20 * time.Millisecond, "b": 90 * time.Millisecond}})
	over := cand(3, "z", 0, served(0))
	over.RTT, over.RTTKnown = 50*time.Millisecond, true
	d := route(t, r, Request{Blocks: 1, BlockSize: 1, Policy: Load},
		cand(0, "a", 0, served(0)), cand(1, "b", 0, served(0)), cand(2, "unlisted", 0, served(0)), over)
	if s := byLane(d, 2); !s.RTTUnknown || s.Terms.RTT != 90*time.Millisecond {
		t.Errorf("unlisted DC: unknown %v RTT %v, want unknown, 90ms", s.RTTUnknown, s.Terms.RTT)
	}
	for _, lane := range []int{0, 1, 3} {
		if byLane(d, lane).RTTUnknown {
			t.Errorf("lane %d: RTT shown unknown", lane)
		}
	}
	if d.Chosen().Lane != 0 {
		t.Errorf("chose lane %d; the unlisted DC must not look nearest", d.Chosen().Lane)
	}
	// A positive DefaultRTT is an RTT for every DC not listed.
	d = route(t, New(Config{DefaultRTT: 7 * time.Millisecond}), Request{Blocks: 1, BlockSize: 1}, cand(0, "x", 0, served(0)))
	if s := d.Ranked[0]; s.RTTUnknown || s.Terms.RTT != 7*time.Millisecond {
		t.Errorf("default RTT: %+v", s)
	}
	// No RTT known at all: every DC is unknown at 0, so none is favoured.
	d = route(t, New(Config{}), Request{Blocks: 1, BlockSize: 1}, cand(0, "x", 0, served(0)), cand(1, "y", 0, served(0)))
	for _, s := range d.Ranked {
		if !s.RTTUnknown || s.Terms.RTT != 0 {
			t.Errorf("none known: %+v", s)
		}
	}

	c := Config{RTT: map[string]time.Duration{"a": 0, "c": time.Millisecond}}
	if got := c.MissingRTT([]string{"a", "b", "c", "d"}); !slices.Equal(got, []string{"b", "d"}) {
		t.Errorf("MissingRTT %v, want [b d] (an RTT of 0 listed is configured)", got)
	}
	c.DefaultRTT = time.Nanosecond
	if got := c.MissingRTT([]string{"b"}); len(got) != 0 {
		t.Errorf("MissingRTT with a default %v", got)
	}
}

// The queue drains at, in order: the candidate's rate, the DC's configured
// rate, its workers × the prefill rate, the default queue rate, one
// worker's prefill rate.
func TestQueueRatePerDC(t *testing.T) {
	r := New(Config{DefaultPrefillTokensPerSec: 1000, DefaultQueueTokensPerSec: 2000,
		QueueTokensPerSec: map[string]float64{"cfg": 8000, "zero": 0}})
	workers := func(n uint64) LoadReport {
		l := served(8000)
		l.Workers = n
		return l
	}
	own := cand(0, "cfg", 0, workers(2))
	own.QueueTokensPerSec = 16000
	fast := cand(3, "w", 0, workers(4))
	fast.PrefillTokensPerSec = 2000
	d := route(t, r, Request{Blocks: 1, BlockSize: 1},
		own, cand(1, "cfg", 0, workers(2)), cand(2, "w", 0, workers(4)), fast,
		cand(4, "zero", 0, workers(0)), cand(5, "plain", 0, served(8000)))
	for lane, want := range map[int]time.Duration{
		0: 500 * time.Millisecond,  // 16000/s, the candidate's own
		1: time.Second,             // 8000/s configured for the DC, over 2 workers × 1000
		2: 2 * time.Second,         // 4 workers × 1000/s
		3: time.Second,             // 4 workers × 2000/s
		4: 4 * time.Second,         // no workers, a zero rate configured: the default 2000/s
		5: 4 * time.Second,         // the default 2000/s
	} {
		if got := byLane(d, lane).Terms.Queue; got != want {
			t.Errorf("lane %d queue %v, want %v", lane, got, want)
		}
	}
	d = route(t, New(Config{DefaultPrefillTokensPerSec: 1000}), Request{Blocks: 1, BlockSize: 1}, cand(0, "p", 0, served(500)))
	if got := d.Ranked[0].Terms.Queue; got != 500*time.Millisecond {
		t.Errorf("one worker's rate: %v", got)
	}
}

// KeyOf is the request key of the indexer: a fold of the block count and
// the sequence hashes, never 0, and distinct prompts get distinct keys.
func TestKeyOf(t *testing.T) {
	seqs := []ckf.SequenceHash{11, 22, 33}
	k := NewKeyHash(3)
	for _, s := range seqs {
		k.Add(uint64(s))
	}
	if KeyOf(seqs) != k.Sum() || KeyOf(seqs) == 0 {
		t.Fatal("KeyOf differs from KeyHash")
	}
	// The fold, written out: start, then per hash xor, multiply, shift-xor.
	h := uint64(0x9e3779b97f4a7c15) ^ 3
	for _, s := range seqs {
		h ^= uint64(s)
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 31
	}
	if KeyOf(seqs) != h {
		t.Errorf("KeyOf %#x, want %#x", KeyOf(seqs), h)
	}
	seen := map[uint64]bool{}
	for i := range 1000 {
		seen[KeyOf([]uint64{uint64(i), 7})] = true
		seen[KeyOf([]uint64{uint64(i)})] = true
	}
	if len(seen) != 2000 {
		t.Errorf("%d distinct keys of 2000 prompts", len(seen))
	}
	if (KeyHash{}).Sum() != 1 {
		t.Error("a zero fold must not give the key 0")
	}
}
