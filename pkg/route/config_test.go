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
		0: 500 * time.Millisecond, // 16000/s, the candidate's own
		1: time.Second,            // 8000/s configured for the DC, over 2 workers × 1000
		2: 2 * time.Second,        // 4 workers × 1000/s
		3: time.Second,            // 4 workers × 2000/s
		4: 4 * time.Second,        // no workers, a zero rate configured: the default 2000/s
		5: 4 * time.Second,        // the default 2000/s
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

// The zero Config takes DefaultConfig's values; negative durations read as
// zero.
func TestNewTakesTheDefaults(t *testing.T) {
	got := New(Config{DecodeBlockTime: -time.Second, DefaultRTT: -time.Second}).Config()
	d := DefaultConfig()
	if got.Policy != Cost || got.DefaultPrefillTokensPerSec != d.DefaultPrefillTokensPerSec || got.WaitingRequestTokens != d.WaitingRequestTokens ||
		got.KVFullQueue != time.Second || got.MissingLoadPenalty != 100*time.Millisecond || got.StalePenalty != time.Second ||
		got.AffinityMargin != AffinityMarginDefault || got.DecodeBlockTime != 0 || got.DefaultRTT != 0 {
		t.Errorf("New(Config{}).Config() = %+v", got)
	}
	// What each default does, seen in the terms.
	r := New(Config{})
	stale := cand(1, "b", 0, LoadReport{})
	stale.Stale = true
	d2 := route(t, New(Config{Stale: StalePenalize}), Request{Blocks: 1, BlockSize: 1},
		cand(0, "a", 0, withKV(LoadReport{}, 25, 100)), stale)
	if a := byLane(d2, 0); a.Terms.Queue != 250*time.Millisecond || a.Terms.Prefill != 100*time.Microsecond {
		t.Errorf("default KV-full queue or prefill rate: %+v", a.Terms)
	}
	if b := byLane(d2, 1); b.Terms.Penalty != time.Second || b.Terms.Queue != 350*time.Millisecond {
		t.Errorf("default stale or missing-load penalty: %+v", b.Terms)
	}
	d2 = route(t, r, Request{Blocks: 1, BlockSize: 1}, cand(0, "a", 0, reqs(0, 10)))
	if q := d2.Ranked[0].Terms.Queue; q != 1024*time.Millisecond {
		t.Errorf("default waiting request tokens: queue %v, want 10 × 1024 tokens at 10000/s", q)
	}
}

// Load older than MaxLoadAge is missing; load exactly that old is not, and
// MaxLoadAge 0 keeps load of any age.
func TestMaxLoadAgeBoundary(t *testing.T) {
	aged := func(age time.Duration) LoadReport {
		l := served(1000)
		l.Age = age
		return l
	}
	for _, tc := range []struct {
		maxAge, age time.Duration
		missing     bool
	}{
		{time.Second, time.Second, false},
		{time.Second, time.Second + 1, true},
		{0, time.Hour, false},
	} {
		d := route(t, New(Config{MaxLoadAge: tc.maxAge}), Request{Blocks: 1, BlockSize: 1}, cand(0, "a", 0, aged(tc.age)))
		if got := d.Ranked[0].LoadMissing; got != tc.missing {
			t.Errorf("max age %v, age %v: missing %v", tc.maxAge, tc.age, got)
		}
	}
}

// Chosen is nil when Best is out of range.
func TestChosenOutOfRange(t *testing.T) {
	d := Decision{Ranked: make([]Scored, 2)}
	for _, best := range []int{-1, 2, 3} {
		d.Best = best
		if d.Chosen() != nil {
			t.Errorf("Best %d: chosen", best)
		}
	}
	d.Best = 1
	if d.Chosen() != &d.Ranked[1] {
		t.Error("Best 1: not Ranked[1]")
	}
	// Round robin over no eligible lane chooses none.
	stale := cand(0, "a", 0, served(0))
	stale.Stale = true
	if d := route(t, New(Config{Policy: RoundRobin}), Request{Blocks: 1, BlockSize: 1}, stale); d.Best != -1 {
		t.Errorf("round robin, all excluded: best %d", d.Best)
	}
}

// The tie-break is a contract: replicas of the indexer, and the simulator,
// must order equal DCs alike for one request key, release after release.
// These orders are pinned.
func TestTieOrderIsPinned(t *testing.T) {
	cs := []Candidate{cand(0, "a", 1, served(0)), cand(1, "b", 1, served(0)), cand(2, "c", 1, served(0)), cand(3, "d", 1, served(0))}
	for _, tc := range []struct {
		key, seed uint64
		want      []int
	}{
		{1, 0, []int{0, 3, 1, 2}}, {2, 0, []int{0, 2, 3, 1}},
		{KeyOf([]uint64{42, 43}), 0, []int{1, 0, 3, 2}}, {1, 7, []int{3, 0, 2, 1}},
	} {
		for _, margin := range []time.Duration{-1, AffinityMarginDefault} {
			// With the affinity rule on, the deepest lane among equals is the
			// one the tie order puts first.
			d := route(t, New(Config{Seed: tc.seed, AffinityMargin: margin}), Request{Blocks: 2, BlockSize: 16, Key: tc.key}, cs...)
			if !equal(lanes(d), tc.want) {
				t.Errorf("key %#x seed %d margin %v: order %v, want %v", tc.key, tc.seed, margin, lanes(d), tc.want)
			}
		}
	}
	if KeyOf([]uint64{42, 43}) != 0x55110c4e9118617b {
		t.Errorf("KeyOf changed: %#x", KeyOf([]uint64{42, 43}))
	}
	if (Terms{RTT: 5}).Sum() != 5 || (Terms{Penalty: 7}).Sum() != 7 {
		t.Error("a sum with zero terms")
	}
}

// Round robin and random ignore the stale penalty: under penalize a stale
// lane takes its turn and its share.
func TestRoundRobinAndRandomIgnoreThePenalty(t *testing.T) {
	stale := cand(0, "a", 0, served(0))
	stale.Stale = true
	cs := []Candidate{cand(2, "c", 0, served(0)), stale, cand(1, "b", 0, served(0))}
	rr := New(Config{Policy: RoundRobin, Stale: StalePenalize})
	var got []int
	for range 4 {
		got = append(got, route(t, rr, Request{Blocks: 1, BlockSize: 1}, cs...).Chosen().Lane)
	}
	if !equal(got, []int{0, 1, 2, 0}) {
		t.Errorf("round robin under penalize: %v", got)
	}
	rnd := New(Config{Policy: Random, Stale: StalePenalize})
	n := 0
	for k := uint64(1); k <= 3000; k++ {
		if route(t, rnd, Request{Blocks: 1, BlockSize: 1, Key: k}, cs...).Chosen().Lane == 0 {
			n++
		}
	}
	if n < 800 || n > 1200 {
		t.Errorf("random under penalize: the stale lane won %d of 3000", n)
	}
}
