package route

import (
	"math"
	"testing"
	"time"
)

// A load report is untrusted: an underflowed counter or a hostile relay can
// claim 2^64 queued tokens. Such a DC gets the largest queue term, never a
// wrapped negative one, so it is the last choice of the policies that read
// load, not the first.
func TestAnAbsurdQueueSaturatesAndLoses(t *testing.T) {
	r := New(Config{RTT: map[string]time.Duration{"a": 5 * time.Millisecond, "b": 5 * time.Millisecond}})
	for _, huge := range []uint64{math.MaxUint64, 1 << 62, 1e14} {
		cs := []Candidate{cand(0, "a", 0, served(huge)), cand(1, "b", 0, served(1000))}
		for _, pol := range Policies {
			d := route(t, r, Request{Blocks: 4, BlockSize: 16, Policy: pol, Key: 1}, cs...)
			for _, s := range d.Ranked {
				if s.Cost < 0 || s.Terms.Queue < 0 || s.Terms.RTT < 0 || s.Terms.Prefill < 0 || s.Terms.Penalty < 0 {
					t.Errorf("%s, %d tokens: lane %d has a negative term: %+v cost %v", pol, huge, s.Lane, s.Terms, s.Cost)
				}
			}
			if q := byLane(d, 0).Terms.Queue; q != MaxTerm {
				t.Errorf("%s, %d tokens: queue %v, want MaxTerm", pol, huge, q)
			}
			if pol == RoundRobin || pol == Random || pol == Prefix {
				continue // they do not read load
			}
			if d.Chosen().DC != "b" {
				t.Errorf("%s: the DC claiming %d queued tokens was chosen", pol, huge)
			}
		}
	}
}

// The missing-load estimate is the worst known queue plus a penalty; when
// the worst known queue is saturated, the sum saturates too instead of
// wrapping, and the DC with a small known queue still wins.
func TestMissingLoadAfterASaturatedQueueDoesNotWrap(t *testing.T) {
	r := New(Config{})
	cs := []Candidate{cand(0, "a", 0, served(1<<62)), cand(1, "b", 0, LoadReport{}), cand(2, "c", 0, served(100))}
	d := route(t, r, Request{Blocks: 4, BlockSize: 16, Policy: Load, Key: 1}, cs...)
	if d.Chosen().DC != "c" {
		t.Errorf("chose %s, want c", d.Chosen().DC)
	}
	if got := lanes(d); !equal(got, []int{2, 0, 1}) {
		t.Errorf("order %v, want c, then the saturated a, then b (missing: worse still)", got)
	}
	if b := byLane(d, 1); b.Terms.Queue != MaxTerm+100*time.Millisecond || b.Cost <= 0 {
		t.Errorf("missing-load queue %v cost %v, want MaxTerm + 100ms", b.Terms.Queue, b.Cost)
	}
}

// Sums saturate at the largest Duration; each term is bounded by MaxTerm.
func TestTermsSaturate(t *testing.T) {
	max := time.Duration(math.MaxInt64)
	if got := (Terms{RTT: max, Queue: max, Prefill: max, Penalty: max}).Sum(); got != max {
		t.Errorf("sum of maxima %v", got)
	}
	if got := (Terms{RTT: 1, Queue: 2, Prefill: 3, Penalty: 4}).Sum(); got != 10 {
		t.Errorf("sum %v, want 10", got)
	}
	if got := satAdd(max-1, 1); got != max {
		t.Errorf("satAdd at the edge %v", got)
	}
	if got := satAdd(max-1, 2); got != max {
		t.Errorf("satAdd past the edge %v", got)
	}
	if tokensTime(math.MaxUint64, 1e-9) != MaxTerm || tokensTime(1, 0) != MaxTerm {
		t.Error("tokensTime does not saturate")
	}
	if mulTerm(math.MaxUint64, time.Hour) != MaxTerm || mulTerm(3, time.Second) != 3*time.Second {
		t.Error("mulTerm")
	}
	// Decode blocks past any bound, a huge RTT override and a huge penalty
	// all give bounded, non-negative terms.
	r := New(Config{DecodeBlockTime: time.Hour, StalePenalty: max, Stale: StalePenalize, DefaultRTT: max})
	l := served(1)
	l.HasDecode, l.ActiveDecodeBlocks = true, math.MaxUint64
	c := cand(0, "a", 0, l)
	c.Stale = true
	neg := cand(1, "b", 0, served(0))
	neg.RTT, neg.RTTKnown = -time.Second, true
	d := route(t, r, Request{Blocks: 1, BlockSize: 1}, c, neg)
	a := byLane(d, 0)
	if a.Terms.Queue != MaxTerm || a.Terms.Penalty != MaxTerm || a.Terms.RTT != MaxTerm || a.Cost != 3*MaxTerm+a.Terms.Prefill {
		t.Errorf("bounded terms: %+v cost %v", a.Terms, a.Cost)
	}
	if b := byLane(d, 1); b.Terms.RTT != 0 {
		t.Errorf("a negative RTT override reads as %v, want 0", b.Terms.RTT)
	}
}
