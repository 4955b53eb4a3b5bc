package inflight

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// A window that estimates its prefill covers an entry into the prefilling
// set: it drains from its due instant at the given rate, then leaves.
func TestCoverPrefillingDrains(t *testing.T) {
	l := newLedger(t, Config{Lanes: 2})
	l.Add(0, 1000, at(0), 50*time.Millisecond) // due at 50 ms
	l.Add(1, 7, at(0), 0)
	if n := l.CoverPrefilling(0, at(49), 10000); n != 0 || l.Pending(0, at(49)) != 1000 {
		t.Fatalf("covered %d before due", n)
	}
	if n := l.CoverPrefilling(0, at(60), 10000); n != 1 {
		t.Fatalf("covered %d, want 1", n)
	}
	// 10 tokens/ms from 50 ms: 1000 tokens are gone at 150 ms.
	for _, c := range []struct{ ms, want int }{{60, 900}, {100, 500}, {149, 10}, {150, 0}, {400, 0}} {
		if p := l.Pending(0, at(c.ms)); p != uint64(c.want) {
			t.Errorf("pending at %d ms = %d, want %d", c.ms, p, c.want)
		}
		if st := l.Stats(); (st.Drained == 1) != (c.ms >= 150) {
			t.Errorf("at %d ms: stats %+v (drained at 150 ms, not before)", c.ms, st)
		}
	}
	if p := l.Pending(1, at(400)); p != 7 {
		t.Errorf("the other lane's pending = %d, want 7", p)
	}
	if st := l.Stats(); st.Covered != 1 || st.Drained != 1 || st.Prefilling != 0 || st.Entries != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// While draining, the entry counts in Stats.Prefilling and PendingInto.
func TestPrefillingStatsAndPendingInto(t *testing.T) {
	l := newLedger(t, Config{Lanes: 2})
	l.Add(1, 2000, at(0), 0)
	l.CoverPrefilling(1, at(0), 1000) // 1 token/ms: 2000 ms
	if st := l.Stats(); st.Prefilling != 1 || st.Entries != 0 || st.Covered != 1 {
		t.Fatalf("stats %+v", st)
	}
	var dst [2]uint64
	if n := l.PendingInto(at(500), dst[:]); n != 2 || dst != [2]uint64{0, 1500} {
		t.Fatalf("PendingInto = %d %v", n, dst)
	}
}

// A plain Cover, and a rate that is no rate, drop covered entries at once.
func TestCoverPrefillingWithoutRateIsCover(t *testing.T) {
	for _, rate := range []float64{0, -5, math.NaN(), math.Inf(1)} {
		l := newLedger(t, Config{Lanes: 1})
		l.Add(0, 1000, at(0), 0)
		if n := l.CoverPrefilling(0, at(1), rate); n != 1 || l.Pending(0, at(1)) != 0 {
			t.Errorf("rate %v: covered %d, pending %d", rate, n, l.Pending(0, at(1)))
		}
		if st := l.Stats(); st.Prefilling != 0 || st.Drained != 0 {
			t.Errorf("rate %v: stats %+v", rate, st)
		}
	}
	l := newLedger(t, Config{Lanes: 1})
	l.Add(0, 1000, at(0), 0)
	if n := l.Cover(0, at(1)); n != 1 || l.Pending(0, at(1)) != 0 || l.Stats().Prefilling != 0 {
		t.Fatalf("Cover kept a prefilling entry")
	}
}

// An entry whose prompt has drained by the time a window covers it leaves;
// one that would drain past MaxAge after the cover is cut there.
func TestPrefillingBounds(t *testing.T) {
	l := newLedger(t, Config{Lanes: 1, MaxAge: 100 * time.Millisecond})
	l.Add(0, 10, at(0), 0)
	l.Add(0, 1<<30, at(0), 0)
	if n := l.CoverPrefilling(0, at(50), 1000); n != 2 {
		t.Fatalf("covered %d", n)
	}
	if st := l.Stats(); st.Drained != 1 || st.Prefilling != 1 {
		t.Fatalf("stats %+v: the drained entry should leave at the cover", st)
	}
	// 1 token/ms: at 149 ms, 1 ms before the cap at 50+100 ms, one ms of
	// tokens is left.
	if p := l.Pending(0, at(149)); p != 1 {
		t.Fatalf("pending 1 ms before the cap = %d, want 1", p)
	}
	if p := l.Pending(0, at(150)); p != 0 {
		t.Fatalf("pending at the cap = %d", p)
	}
}

// A lane's prefilling set holds at most MaxEntries: the entry closest to
// drained goes first (counted as drained).
func TestPrefillingDropsTheNearestToDrained(t *testing.T) {
	l := newLedger(t, Config{Lanes: 1, MaxEntries: 2})
	for _, tokens := range []uint64{300, 100, 200} {
		l.Add(0, tokens, at(0), 0)
		l.CoverPrefilling(0, at(0), 1000)
	}
	// 300 and 200 remain: at 50 ms, 250 + 150.
	if p := l.Pending(0, at(50)); p != 400 {
		t.Fatalf("pending %d, want 400", p)
	}
	if st := l.Stats(); st.Drained != 1 || st.Dropped != 0 || st.Prefilling != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// refEntry is the reference model's prefilling entry.
type refEntry struct {
	due, finish float64 // ms
	rate        float64 // tokens/ms
}

// The ledger's prefilling sum matches a direct sum over the entries, on
// random adds, covers and reads.
func TestPrefillingMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 200 {
		maxAge := 50 + rng.IntN(500)
		l := newLedger(t, Config{Lanes: 1, MaxAge: time.Duration(maxAge) * time.Millisecond})
		type pend struct {
			at, due int
			tokens  uint64
		}
		var pending []pend
		var pre []refEntry
		now := 0
		for range 60 {
			now += rng.IntN(30)
			prune := func(t int) {
				kept := pending[:0]
				for _, p := range pending {
					if p.at > t-maxAge {
						kept = append(kept, p)
					}
				}
				pending = kept
			}
			switch rng.IntN(3) {
			case 0:
				prune(now)
				tok := uint64(1 + rng.IntN(5000))
				rtt := rng.IntN(100)
				l.Add(0, tok, at(now), time.Duration(rtt)*time.Millisecond)
				pending = append(pending, pend{at: now, due: now + rtt, tokens: tok})
			case 1:
				rate := float64(1+rng.IntN(50)) * 1000 // tokens/s
				obs := now - rng.IntN(20)
				l.CoverPrefilling(0, at(obs), rate)
				kept := pending[:0]
				for _, p := range pending {
					if p.due > obs {
						kept = append(kept, p)
						continue
					}
					if p.at <= obs-maxAge {
						continue // too old to keep
					}
					r := rate / 1000
					fin := min(float64(p.due)+float64(p.tokens)/r, float64(obs+maxAge))
					if fin > float64(obs) {
						pre = append(pre, refEntry{due: float64(p.due), finish: fin, rate: r})
					}
				}
				pending = kept
			default:
				got := l.Pending(0, at(now))
				prune(now)
				var want float64
				for _, p := range pending {
					if p.at > now-maxAge {
						want += float64(p.tokens)
					}
				}
				for _, e := range pre {
					if e.finish > float64(now) {
						want += e.rate * (e.finish - float64(now))
					}
				}
				if d := math.Abs(float64(got) - want); d > 1.5 {
					t.Fatalf("round %d at %d ms: pending %d, reference %.2f", round, now, got, want)
				}
			}
		}
	}
}

// An entry that finishes draining exactly at the covering window's instant
// leaves at the cover.
func TestPrefillingEntryDrainedAtTheCoverLeaves(t *testing.T) {
	l := newLedger(t, Config{Lanes: 1})
	l.Add(0, 10, at(0), 0)
	l.CoverPrefilling(0, at(10), 1000) // 1 token/ms from 0: drained at 10 ms
	if st := l.Stats(); st.Drained != 1 || st.Prefilling != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A lane's prefilling sum is not capped below what its entries can hold:
// MaxEntries entries of MaxTokens each.
func TestPrefillingHoldsLargeSums(t *testing.T) {
	l := newLedger(t, Config{Lanes: 1, MaxAge: time.Hour})
	l.Add(0, 1<<31, at(0), 0)
	l.CoverPrefilling(0, at(0), 1e9) // 1M tokens/ms: drains in about 2 s
	if p := l.Pending(0, at(0)); p != 1<<31 {
		t.Fatalf("pending %d, want %d", p, uint64(1<<31))
	}
}
