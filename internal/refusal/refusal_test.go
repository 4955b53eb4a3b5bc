package refusal

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestWarningIsRateLimitedPerSource(t *testing.T) {
	tr := New(Config{WarnEvery: 10 * time.Second})
	if _, ok := tr.Refuse(1, 1, "parent_block_not_found", t0); !ok {
		t.Fatal("first refusal: no warning")
	}
	if _, ok := tr.Refuse(1, 3, "parent_block_not_found", t0.Add(time.Second)); ok {
		t.Fatal("second refusal within WarnEvery warned again")
	}
	if _, ok := tr.Refuse(2, 1, "invalid_block_sequence", t0.Add(time.Second)); !ok {
		t.Fatal("another source's first refusal: no warning")
	}
	w, ok := tr.Refuse(1, 1, "parent_block_not_found", t0.Add(10*time.Second))
	if !ok || w.Suppressed != 3 {
		t.Fatalf("warning after WarnEvery: %+v %v, want 3 suppressed", w, ok)
	}
}

func TestRefusingNeedsMostRecentEventsRefused(t *testing.T) {
	tr := New(Config{Window: 30 * time.Second, MinEvents: 8})
	tr.Refuse(7, 5, "parent_block_not_found", t0)
	if got := tr.Refusing(t0); len(got) != 0 {
		t.Fatalf("5 events (below MinEvents): %+v", got)
	}
	tr.Refuse(7, 5, "parent_block_not_found", t0.Add(time.Second))
	tr.Accept(7, 2, t0.Add(time.Second))
	tr.Accept(9, 100, t0.Add(time.Second))
	got := tr.Refusing(t0.Add(2 * time.Second))
	if len(got) != 1 || got[0].Key != 7 || got[0].Refused != 10 || got[0].Accepted != 2 || got[0].Reason != "parent_block_not_found" {
		t.Fatalf("refusing: %+v", got)
	}
	if s := got[0].String(); s != "10 of 12 recent events refused (parent_block_not_found)" {
		t.Fatalf("string: %q", s)
	}
	// Accepted events outnumber the refused: no longer refusing.
	tr.Accept(7, 11, t0.Add(3*time.Second))
	if got := tr.Refusing(t0.Add(3 * time.Second)); len(got) != 0 {
		t.Fatalf("mostly accepted: %+v", got)
	}
}

func TestWindowSlides(t *testing.T) {
	tr := New(Config{Window: 30 * time.Second, MinEvents: 4})
	tr.Refuse(7, 10, "x", t0)
	if len(tr.Refusing(t0.Add(20*time.Second))) != 1 {
		t.Fatal("refusals 20 s ago left a 30 s window")
	}
	if got := tr.Refusing(t0.Add(40 * time.Second)); len(got) != 0 {
		t.Fatalf("refusals 40 s ago still in a 30 s window: %+v", got)
	}
	if a, r := tr.Recent(7, t0.Add(40*time.Second)); a != 0 || r != 0 {
		t.Fatalf("recent after the window: %d %d", a, r)
	}
	// A slot reused by a later period starts from zero.
	tr.Refuse(7, 1, "x", t0.Add(60*time.Second))
	if _, r := tr.Recent(7, t0.Add(60*time.Second)); r != 1 {
		t.Fatalf("reused slot holds %d refusals, want 1", r)
	}
}

func TestKeysAreBounded(t *testing.T) {
	tr := New(Config{MaxKeys: 2, WarnEvery: time.Second})
	tr.Refuse(1, 1, "x", t0)
	tr.Refuse(2, 1, "x", t0)
	if _, ok := tr.Refuse(3, 1, "x", t0); ok {
		t.Fatal("a third source was tracked past MaxKeys")
	}
	// Once the first two are idle for a window, a new source fits.
	if _, ok := tr.Refuse(3, 1, "x", t0.Add(DefaultWindow+time.Second)); !ok {
		t.Fatal("a new source was not tracked after the others aged out")
	}
}

// The relay and the bridge call Accept once per message: it must not
// allocate once the source is tracked.
func BenchmarkAcceptAndRefuse(b *testing.B) {
	tr := New(Config{})
	now := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Millisecond)
		tr.Accept(uint64(i&63), 4, now)
		if i&7 == 0 {
			tr.Refuse(uint64(i&63), 1, "parent_block_not_found", now)
		}
	}
}
