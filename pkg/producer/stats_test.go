package producer

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// TestStatsAgreeWithThePublicViews: every Stats field is what the rest of
// the API shows for the same state (members and their block counts, the
// tracked hashes and their residency, the lane words) in a canonical state
// whose lane overflowed, so some hashes are omitted and some buckets are
// empty or partly full.
func TestStatsAgreeWithThePublicViews(t *testing.T) {
	cfg := ckf.NewConfig(16)
	cfg.MaxKicks = 4
	cfg.PublishEveryNEvents = 1000
	s := mustState(t, cfg)
	s.ApplyEvent(storedEv(1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36))
	s.ApplyEvent(storedEv(2, 3, 1, 2, 3))
	s.ApplyEvent(removedEv(2, 3, 3, 1000, 1001))
	s.ApplyEvent(removedEv(1, 0, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
	st := s.Stats()

	members, contributions := 0, 0
	for _, mc := range s.MemberCounts() {
		members++
		contributions += mc.Blocks
	}
	unique, omitted := 0, 0
	for _, o := range s.ExactBlocks() {
		unique++
		if !o.Resident {
			omitted++
		}
	}
	buckets, slots := 0, 0
	for _, w := range s.Words() {
		if w != 0 {
			buckets++
		}
		slots += ckf.OccupiedSlots(w)
	}
	if omitted == 0 || buckets == len(s.Words()) || slots == 4*buckets {
		t.Fatalf("weak fixture: %d omitted, %d of %d buckets, %d slots", omitted, buckets, len(s.Words()), slots)
	}
	want := Stats{
		Mode: ckf.HashModeCanonical, Members: members, Contributions: contributions, UniqueBlocks: unique,
		OmittedBlocks: omitted, OccupiedBuckets: buckets, OccupiedSlots: slots, BucketCount: uint64(len(s.Words())),
		UnknownRemovals: 2, CapacityFailures: st.CapacityFailures, PhysicalTouches: st.PhysicalTouches,
		PendingEvents: 4, DirtyBuckets: st.DirtyBuckets, LaneBytes: 8 * uint64(len(s.Words())),
		// 16 bytes per edge, a key and a BlockOwnership per hash, a
		// Member and a pointer per member.
		ExactBytesEstimate: uint64(16*contributions) + uint64(unique)*(8+uint64(unsafe.Sizeof(BlockOwnership{}))) +
			uint64(members)*(uint64(unsafe.Sizeof(Member{}))+8),
	}
	if got := s.OccupiedSlots(); got != slots {
		t.Fatalf("OccupiedSlots %d, want %d", got, slots)
	}
	if st != want {
		t.Fatalf("stats\n%+v\nwant\n%+v", st, want)
	}
	if st.Members != 2 || st.Contributions != 36-12+2 || st.UniqueBlocks != 36-12 || st.CapacityFailures != uint64(omitted) {
		t.Fatalf("stats %+v", st)
	}
	wantLine := fmt.Sprintf("mode=canonical members=2 contributions=26 unique=24 omitted=%d occupied_buckets=%d occupied_slots=%d/%d "+
		"unknown_removals=2 capacity_failures=%d touches=%d distinct_touched=0 emitted=0 net_reverted=0 publications=0 pending=4 dirty=%d",
		omitted, buckets, slots, 4*len(s.Words()), st.CapacityFailures, st.PhysicalTouches, st.DirtyBuckets)
	if got := st.String(); got != wantLine {
		t.Fatalf("String:\n%s\nwant\n%s", got, wantLine)
	}
}

// TestTelemetryCountsAKnownSequence: the §6.1 counters after a store, a
// store and removal that cancel within one window, and a removal: each
// physical write is a touch, each window's dirty buckets are distinct
// touches, and those are either emitted or net-reverted; only a window
// with an image is a publication.
func TestTelemetryCountsAKnownSequence(t *testing.T) {
	cfg := verbatimConfig(1024)
	cfg.PublishEveryNEvents = 100
	s := mustState(t, cfg)
	s.ApplyEvent(storedEv(1, 0, 11, 12, 13))
	first := s.Flush()
	if len(first.Images) != 3 {
		t.Fatalf("fixture: the three hashes share buckets: %v", first.Images)
	}
	s.ApplyEvent(storedEv(1, 0, 14))
	s.ApplyEvent(removedEv(1, 0, 14, 99))
	if b := s.Flush(); !b.Empty() {
		t.Fatalf("a cancelled store published %v", b.Images)
	}
	s.ApplyEvent(removedEv(1, 0, 11))
	if b := s.Flush(); len(b.Images) != 1 {
		t.Fatalf("removal published %v", b.Images)
	}
	if b := s.Flush(); !b.Empty() {
		t.Fatalf("an empty window published %v", b.Images)
	}
	st := s.Stats()
	want := [7]uint64{1, 0, 6, 5, 4, 1, 2} // unknown, capacity, touches, distinct, emitted, reverted, publications
	got := [7]uint64{st.UnknownRemovals, st.CapacityFailures, st.PhysicalTouches, st.DistinctTouchedBuckets,
		st.EmittedImages, st.NetRevertedBuckets, st.Publications}
	if got != want {
		t.Fatalf("telemetry %v, want %v", got, want)
	}
}
