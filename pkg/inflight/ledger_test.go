package inflight

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func newLedger(t testing.TB, c Config) *Ledger {
	t.Helper()
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, c := range []Config{{}, {Lanes: -1}, {Lanes: MaxLanes + 1}, {Lanes: 1, MaxEntries: -1},
		{Lanes: 1, MaxEntries: MaxEntriesLimit + 1}, {Lanes: 1, MaxAge: -time.Second}} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
	for _, c := range []Config{{Lanes: 1}, {Lanes: 1, MaxEntries: 1}, {Lanes: MaxLanes, MaxEntries: MaxEntriesLimit, MaxAge: time.Nanosecond}} {
		l, err := New(c)
		if err != nil || l.Lanes() != c.Lanes {
			t.Errorf("New(%+v) = %v, %v", c, l, err)
		}
	}
}

// A window covers an entry once it is observed at or after route time + RTT,
// and only on the entry's lane.
func TestCoverAtDue(t *testing.T) {
	l := newLedger(t, Config{Lanes: 2})
	l.Add(0, 100, at(0), 50*time.Millisecond)
	l.Add(0, 30, at(10), 200*time.Millisecond)
	l.Add(1, 7, at(10), 0)
	if p := l.Pending(0, at(20)); p != 130 {
		t.Fatalf("pending = %d, want 130", p)
	}
	if n := l.Cover(1, at(9)); n != 0 || l.Pending(1, at(20)) != 7 {
		t.Fatalf("a window before the route covered %d", n)
	}
	if n := l.Cover(0, at(49)); n != 0 {
		t.Fatalf("a window 1 ms before due covered %d", n)
	}
	if n := l.Cover(0, at(50)); n != 1 || l.Pending(0, at(60)) != 30 || l.Pending(1, at(60)) != 7 {
		t.Fatalf("window at due: covered %d, pending %d/%d", n, l.Pending(0, at(60)), l.Pending(1, at(60)))
	}
	if n := l.Cover(0, at(209)); n != 0 {
		t.Fatal("covered before due")
	}
	if n := l.Cover(0, at(210)); n != 1 || l.Pending(0, at(220)) != 0 {
		t.Fatalf("covered %d", n)
	}
	if n := l.Cover(1, at(10)); n != 1 {
		t.Fatalf("zero-RTT entry not covered by a window at its route time: %d", n)
	}
	st := l.Stats()
	if st != (Stats{Entries: 0, Added: 3, Covered: 3}) {
		t.Fatalf("stats %+v", st)
	}
}

// Cover keeps the uncovered entries in order when due times interleave.
func TestCoverKeepsOrder(t *testing.T) {
	l := newLedger(t, Config{Lanes: 1, MaxAge: time.Second})
	for i, rtt := range []int{500, 10, 400, 20, 300} {
		l.Add(0, uint64(1<<i), at(i), time.Duration(rtt)*time.Millisecond)
	}
	if n := l.Cover(0, at(100)); n != 2 || l.Pending(0, at(100)) != 1+4+16 {
		t.Fatalf("covered %d, pending %d", n, l.Pending(0, at(100)))
	}
	// The kept entries expire in the order they were added.
	if p := l.Pending(0, at(1000)); p != 4+16 {
		t.Fatalf("after the first expiry pending %d, want 20", p)
	}
	if p := l.Pending(0, at(1002)); p != 16 {
		t.Fatalf("pending %d, want 16", p)
	}
	if p := l.Pending(0, at(1004)); p != 0 {
		t.Fatalf("pending %d, want 0", p)
	}
	if st := l.Stats(); st.Expired != 3 || st.Covered != 2 || st.Entries != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestExpireAtMaxAge(t *testing.T) {
	l := newLedger(t, Config{Lanes: 1, MaxAge: 100 * time.Millisecond})
	l.Add(0, 5, at(0), time.Hour)
	if p := l.Pending(0, at(99)); p != 5 {
		t.Fatalf("pending %d before max age", p)
	}
	if p := l.Pending(0, at(100)); p != 0 {
		t.Fatalf("pending %d at max age", p)
	}
	// An Add expires the lane too.
	l.Add(0, 5, at(200), time.Hour)
	l.Add(0, 6, at(300), time.Hour)
	var dst [1]uint64
	if n := l.PendingInto(at(301), dst[:]); n != 1 || dst[0] != 6 {
		t.Fatalf("PendingInto = %d %v", n, dst)
	}
	if st := l.Stats(); st.Expired != 2 || st.Entries != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDropOldestPastMaxEntries(t *testing.T) {
	l := newLedger(t, Config{Lanes: 2, MaxEntries: 3})
	for i := range 5 {
		l.Add(0, uint64(10+i), at(i), time.Second)
	}
	if p := l.Pending(0, at(5)); p != 12+13+14 {
		t.Fatalf("pending %d, want the newest three", p)
	}
	if st := l.Stats(); st.Dropped != 2 || st.Entries != 3 || st.Added != 5 {
		t.Fatalf("stats %+v", st)
	}
	// The ring wraps: covering and adding past the end keep the right sum.
	l.Cover(0, at(1003))
	l.Add(0, 1, at(6), time.Second)
	l.Add(0, 2, at(7), time.Second)
	if p := l.Pending(0, at(8)); p != 14+1+2 {
		t.Fatalf("pending %d after wrap", p)
	}
}

func TestAddRefusesAndCaps(t *testing.T) {
	l := newLedger(t, Config{Lanes: 2})
	if l.Add(-1, 1, at(0), 0) || l.Add(2, 1, at(0), 0) || l.Add(0, 0, at(0), 0) {
		t.Fatal("Add accepted a bad lane or zero tokens")
	}
	if l.Cover(5, at(0)) != 0 || l.Cover(2, at(0)) != 0 || l.Cover(-1, at(0)) != 0 ||
		l.Pending(-1, at(0)) != 0 || l.Pending(2, at(0)) != 0 {
		t.Fatal("bad lane")
	}
	l.Add(0, math.MaxUint64, at(0), -time.Second)
	if p := l.Pending(0, at(0)); p != MaxTokens {
		t.Fatalf("pending %d, want MaxTokens", p)
	}
	if l.Cover(0, at(0)) != 1 {
		t.Fatal("negative RTT not taken as 0")
	}
	l.Add(1, 1, at(1), time.Duration(math.MaxInt64))
	if l.Cover(1, at(1).Add(time.Duration(math.MaxInt64/2))) != 0 {
		t.Fatal("an overflowing due time was covered")
	}
}

// A clock stepping back does not reorder entries: the later Add is taken
// at the last instant.
func TestClockStepsBack(t *testing.T) {
	l := newLedger(t, Config{Lanes: 1, MaxAge: 100 * time.Millisecond})
	l.Add(0, 1, at(50), 0)
	l.Add(0, 2, at(0), 0)
	if p := l.Pending(0, at(149)); p != 3 {
		t.Fatalf("pending %d, want 3", p)
	}
	if p := l.Pending(0, at(150)); p != 0 {
		t.Fatalf("pending %d, want 0: the stepped-back entry is as old as the last", p)
	}
}

func TestAddSat(t *testing.T) {
	for _, c := range []struct{ a, b, want uint64 }{{1, 2, 3}, {math.MaxUint64, 1, math.MaxUint64},
		{math.MaxUint64 - 1, 1, math.MaxUint64}, {1 << 63, 1 << 63, math.MaxUint64}, {0, 0, 0}} {
		if got := AddSat(c.a, c.b); got != c.want {
			t.Errorf("AddSat(%d, %d) = %d", c.a, c.b, got)
		}
	}
}

func TestConcurrent(t *testing.T) {
	l := newLedger(t, Config{Lanes: 4, MaxEntries: 64})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst [4]uint64
			for i := range 1000 {
				l.Add(g, 1, at(i), time.Millisecond)
				l.PendingInto(at(i), dst[:])
				if i%10 == 0 && g%2 == 0 {
					l.Cover(g, at(i))
				} else if i%10 == 0 {
					l.CoverPrefilling(g, at(i), 1000)
				}
			}
		}()
	}
	wg.Wait()
	st := l.Stats()
	if st.Added != 4000 || uint64(st.Entries)+st.Covered+st.Expired+st.Dropped != st.Added {
		t.Fatalf("stats do not add up: %+v", st)
	}
}

func BenchmarkAddPending(b *testing.B) {
	l := newLedger(b, Config{Lanes: 16})
	var dst [16]uint64
	b.ReportAllocs()
	for i := range 16 {
		l.Add(i, 1, t0, 0) // each lane's ring is allocated once
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		l.PendingInto(now, dst[:])
		l.Add(i%16, 32768, now, 5*time.Millisecond)
		if i%1000 == 0 {
			l.Cover(i%16, now)
		}
	}
}

// Zero config values take the defaults: entries live DefaultMaxAge, and a
// lane holds DefaultMaxEntries.
func TestDefaults(t *testing.T) {
	l := newLedger(t, Config{Lanes: 1})
	for i := range DefaultMaxEntries + 1 {
		l.Add(0, 1, at(0).Add(time.Duration(i)), time.Hour)
	}
	if st := l.Stats(); st.Dropped != 1 || st.Entries != DefaultMaxEntries {
		t.Fatalf("stats %+v", st)
	}
	// The oldest left was added 1 ns after the first: 5 s later it is the
	// only one gone.
	if p := l.Pending(0, at(0).Add(5*time.Second)); p != DefaultMaxEntries {
		t.Fatalf("pending %d at 5 s", p)
	}
	if p := l.Pending(0, at(0).Add(5*time.Second+1)); p != DefaultMaxEntries-1 {
		t.Fatalf("pending %d at 5 s + 1 ns, want all but the oldest", p)
	}
	if p := l.Pending(0, at(0).Add(5*time.Second+DefaultMaxEntries)); p != 0 {
		t.Fatalf("pending %dpast the default max age", p)
	}
}
