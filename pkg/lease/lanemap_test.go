package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
)

func TestRegisterSixteenThenNoFreeLane(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	for i := range ckf.LaneCount {
		dc := fmt.Sprintf("dc-%02d", i)
		lane, err := c.Register(ctx, domain, dc, testPool(t, dc))
		if err != nil {
			t.Fatalf("register %s: %v", dc, err)
		}
		if lane != i {
			t.Fatalf("register %s: lane %d, want %d (lowest free)", dc, lane, i)
		}
	}
	lane, err := c.Register(ctx, domain, "dc-16", testPool(t, "dc-16"))
	if lane != -1 {
		t.Fatalf("17th pool got lane %d", lane)
	}
	e := asError(t, err, lease.ErrNoFreeLane)
	if e.Domain != domain || e.Dc != "dc-16" || !strings.Contains(err.Error(), "16 lanes") {
		t.Fatalf("error lacks detail: %v", err)
	}

	m, err := c.LaneMap(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	if m.Occupied() != ckf.LaneMask {
		t.Fatalf("occupied = %016b, want all", m.Occupied())
	}
	if m.Version != ckf.LaneCount {
		t.Fatalf("version = %d, want %d", m.Version, ckf.LaneCount)
	}
	for i, e := range m.Lanes {
		if want := fmt.Sprintf("dc-%02d", i); e.DcName != want || e.Pool != testPool(t, want) {
			t.Fatalf("lane %d = %+v, want %s", i, e, want)
		}
	}
	// Another domain has its own 16 lanes.
	if lane, err := c.Register(ctx, "other", "dc-16", testPool(t, "dc-16")); err != nil || lane != 0 {
		t.Fatalf("other domain: lane %d, %v", lane, err)
	}
}

func TestRegisterIdempotent(t *testing.T) {
	ctx := testCtx(t)
	c, clk, _ := startCoordinator(t)
	if _, err := c.Register(ctx, domain, "dc-a", testPool(t, "dc-a")); err != nil {
		t.Fatal(err)
	}
	lane, err := c.Register(ctx, domain, "dc-b", testPool(t, "dc-b"))
	if err != nil || lane != 1 {
		t.Fatalf("dc-b: lane %d, %v", lane, err)
	}
	before, err := c.LaneMap(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	again, err := c.Register(ctx, domain, "dc-b", testPool(t, "dc-b"))
	if err != nil || again != 1 {
		t.Fatalf("re-register: lane %d, %v", again, err)
	}
	after, err := c.LaneMap(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision != before.Revision || after.Version != before.Version {
		t.Fatalf("re-register wrote: revision %d→%d version %d→%d", before.Revision, after.Revision, before.Version, after.Version)
	}
	if !after.Lanes[1].RegisteredAt.Equal(before.Lanes[1].RegisteredAt) {
		t.Fatal("re-register changed registered_at")
	}

	// The same name for another pool, or the same pool under another name.
	e := asError(t, func() error {
		_, err := c.Register(ctx, domain, "dc-b", testPool(t, "dc-x"))
		return err
	}(), lease.ErrLaneConflict)
	if e.Lane != 1 {
		t.Fatalf("conflict lane = %d, want 1", e.Lane)
	}
	if _, err := c.Register(ctx, domain, "dc-renamed", testPool(t, "dc-a")); !errors.Is(err, lease.ErrLaneConflict) {
		t.Fatalf("renamed pool: %v", err)
	}
}

func TestRegisterConcurrentDistinctLanes(t *testing.T) {
	ctx := testCtx(t)
	c, _, srv := startCoordinator(t)
	const n = 8
	// Each goroutine uses its own coordinator and connection, as separate
	// relay processes would.
	coords := make([]*lease.Coordinator, n)
	for i := range coords {
		coords[i], _ = newCoordinator(t, srv.JetStream(t))
	}
	lanes := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			dc := fmt.Sprintf("dc-%d", i)
			lanes[i], errs[i] = coords[i].Register(ctx, domain, dc, testPool(t, dc))
		})
	}
	close(start)
	wg.Wait()

	seen := map[int]string{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		if other, dup := seen[lanes[i]]; dup {
			t.Fatalf("lane %d given to dc-%d and %s", lanes[i], i, other)
		}
		seen[lanes[i]] = fmt.Sprintf("dc-%d", i)
		if lanes[i] < 0 || lanes[i] >= n {
			t.Fatalf("dc-%d got lane %d, want within 0..%d", i, lanes[i], n-1)
		}
	}
	m, err := c.LaneMap(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	if m.Occupied() != 1<<n-1 || m.Version != n {
		t.Fatalf("occupied %016b version %d, want %d lanes and %d writes", m.Occupied(), m.Version, n, n)
	}
	for lane, dc := range seen {
		if m.Lanes[lane].DcName != dc {
			t.Fatalf("stored lane %d = %s, registered %s", lane, m.Lanes[lane].DcName, dc)
		}
	}
}

// nextMap waits for the next lane map on ch.
func nextMap(t *testing.T, ch <-chan lease.LaneMap) lease.LaneMap {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("lane map channel closed")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no lane map within 10s")
	}
	panic("unreachable")
}

func TestWatchLaneMapSeesNewDC(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	wctx, cancel := context.WithCancel(ctx)
	ch, err := c.WatchLaneMap(wctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	initial := nextMap(t, ch)
	if initial.Occupied() != 0 || initial.Revision != 0 || initial.Domain != domain {
		t.Fatalf("initial map = %+v, want empty", initial)
	}

	if _, err := c.Register(ctx, domain, "dc-a", testPool(t, "dc-a")); err != nil {
		t.Fatal(err)
	}
	m := nextMap(t, ch)
	if lane, ok := m.LaneOf("dc-a"); !ok || lane != 0 {
		t.Fatalf("watch map = %+v, want dc-a on lane 0", m)
	}
	if _, err := c.Register(ctx, domain, "dc-b", testPool(t, "dc-b")); err != nil {
		t.Fatal(err)
	}
	m = nextMap(t, ch)
	if lane, ok := m.Lookup(testPool(t, "dc-b")); !ok || lane != 1 || m.Version != 2 {
		t.Fatalf("watch map = %+v, want dc-b on lane 1 at version 2", m)
	}

	// A second watcher on an existing map starts from it.
	ch2, err := c.WatchLaneMap(wctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	if m2 := nextMap(t, ch2); m2.Occupied() != 0b11 || m2.Revision != m.Revision {
		t.Fatalf("second watcher initial = %016b rev %d, want 11 rev %d", m2.Occupied(), m2.Revision, m.Revision)
	}

	cancel()
	for _, c := range []<-chan lease.LaneMap{ch, ch2} {
		select {
		case _, ok := <-c:
			if ok {
				// At most one stale value may be buffered; then it closes.
				if _, ok := <-c; ok {
					t.Fatal("watch channel still delivering after cancel")
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatal("watch channel not closed after cancel")
		}
	}
}

func TestLaneMapJSON(t *testing.T) {
	var m lease.LaneMap
	m.Version = 7
	at := time.Unix(0, 1_700_000_000_123_456_789)
	m.Lanes[3] = &lease.LaneEntry{DcName: "dc-a", Pool: testPool(t, "dc-a"), RegisteredAt: at}
	m.Lanes[15] = &lease.LaneEntry{DcName: "dc-b", Pool: testPool(t, "dc-b"), RegisteredAt: at}
	b, err := json.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), fmt.Sprintf(`"dc_id":%d`, uint64(ckf.DcIDFromName("dc-b")))) || !strings.Contains(string(b), `"lanes":[null,null,null,{`) {
		t.Fatalf("stored form = %s", b)
	}
	var back lease.LaneMap
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Version != 7 || back.Occupied() != 1<<3|1<<15 {
		t.Fatalf("round trip = %+v", back)
	}
	for _, i := range []int{3, 15} {
		if back.Lanes[i].Pool != m.Lanes[i].Pool || back.Lanes[i].DcName != m.Lanes[i].DcName || !back.Lanes[i].RegisteredAt.Equal(at) {
			t.Fatalf("lane %d: %+v != %+v", i, back.Lanes[i], m.Lanes[i])
		}
	}

	for name, bad := range map[string]string{
		"15 lanes":     `{"version":1,"format":1,"lanes":[` + strings.Repeat("null,", 14) + `null]}`,
		"format 2":     `{"version":1,"format":2,"lanes":[` + strings.Repeat("null,", 15) + `null]}`,
		"short digest": `{"version":1,"format":1,"lanes":[{"dc":"x","cache_semantics":"00","cache_semantics_source":"explicit","routing_scope":"00","routing_scope_source":"explicit"}` + strings.Repeat(",null", 15) + `]}`,
		"bad source":   `{"version":1,"format":1,"lanes":[{"dc":"x","cache_semantics":"` + strings.Repeat("00", 16) + `","cache_semantics_source":"guess","routing_scope":"` + strings.Repeat("00", 16) + `","routing_scope_source":"explicit"}` + strings.Repeat(",null", 15) + `]}`,
	} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLaneMapLookupsOfAbsentEntries(t *testing.T) {
	var m lease.LaneMap
	if lane, ok := m.Lookup(testPool(t, "dc-a")); ok || lane != -1 {
		t.Errorf("Lookup in an empty map = %d, %v; want -1, false", lane, ok)
	}
	if lane, ok := m.LaneOf("dc-a"); ok || lane != -1 {
		t.Errorf("LaneOf in an empty map = %d, %v; want -1, false", lane, ok)
	}
	for i := range m.Lanes {
		m.Lanes[i] = &lease.LaneEntry{DcName: fmt.Sprintf("dc-%d", i), Pool: testPool(t, fmt.Sprintf("dc-%d", i))}
	}
	if lane, ok := m.FreeLane(); ok || lane != -1 {
		t.Errorf("FreeLane in a full map = %d, %v; want -1, false", lane, ok)
	}
	if lane, ok := m.LaneOf("dc-15"); !ok || lane != 15 {
		t.Errorf("LaneOf(dc-15) = %d, %v", lane, ok)
	}
}

func TestRegisterInvalidNameReturnsNoLane(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	if lane, err := c.Register(ctx, domain, "dc.a", testPool(t, "dc.a")); lane != -1 || !errors.Is(err, lease.ErrInvalidName) {
		t.Fatalf("Register(dc.a) = %d, %v; want -1, ErrInvalidName", lane, err)
	}
}

// UpdateLaneMap returns the map as stored: its new version and revision,
// which a later compare-and-set must name.
func TestUpdateLaneMapReturnsTheStoredMap(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	if _, err := c.Register(ctx, domain, "dc-a", testPool(t, "dc-a")); err != nil {
		t.Fatal(err)
	}
	got, err := c.UpdateLaneMap(ctx, domain, func(m *lease.LaneMap) (bool, error) {
		m.Lanes[5] = &lease.LaneEntry{DcName: "dc-b", Pool: testPool(t, "dc-b")}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := c.LaneMap(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	if got.Domain != domain || got.Version != 2 || got.Revision != stored.Revision || got.Occupied() != 1|1<<5 {
		t.Fatalf("returned map %+v, stored %+v", got, stored)
	}
	// Unchanged: the map as read, nothing written.
	same, err := c.UpdateLaneMap(ctx, domain, func(*lease.LaneMap) (bool, error) { return false, nil })
	if err != nil || same.Revision != stored.Revision || same.Version != 2 || same.Occupied() != 1|1<<5 {
		t.Fatalf("unchanged update = %+v, %v", same, err)
	}
	// fn's error is returned as is.
	refused := errors.New("refused")
	if _, err := c.UpdateLaneMap(ctx, domain, func(*lease.LaneMap) (bool, error) { return true, refused }); err != refused {
		t.Fatalf("fn error returned as %v", err)
	}
}

// A rejected entry's report quotes a name of up to 32 bytes whole and cuts
// a longer one.
func TestRejectedNamesAreQuotedWholeUpTo32Bytes(t *testing.T) {
	var m lease.LaneMap
	m.Lanes[0] = &lease.LaneEntry{DcName: "dc-a", Pool: testPool(t, "dc-a")}
	b, err := json.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	name32 := strings.Repeat("x", 31) + "."
	name33 := strings.Repeat("y", 32) + "."
	stored := string(b)
	good := stored[strings.Index(stored, "{\"dc\"") : strings.Index(stored, "}")+1]
	lanes := []string{
		strings.Replace(good, `"dc":"dc-a"`, `"dc":"`+name32+`"`, 1),
		strings.Replace(good, `"dc":"dc-a"`, `"dc":"`+name33+`"`, 1),
	}
	for range 14 {
		lanes = append(lanes, "null")
	}
	var got lease.LaneMap
	if err := json.Unmarshal([]byte(`{"version":1,"format":1,"lanes":[`+strings.Join(lanes, ",")+`]}`), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Rejected) != 2 {
		t.Fatalf("rejected %v", got.Rejected)
	}
	if r := got.Rejected[0]; !strings.Contains(r, `"`+name32+`" (32 bytes)`) {
		t.Errorf("32-byte name report %q, want it quoted whole", r)
	}
	if r := got.Rejected[1]; !strings.Contains(r, `"`+name33[:32]+`…" (33 bytes)`) {
		t.Errorf("33-byte name report %q, want it cut at 32 bytes", r)
	}
}

// WatchDomains names each domain with a lane map once: those registered
// before the watch, then a later one; a second DC of a known domain adds
// nothing.
func TestWatchDomainsNamesEachDomainOnce(t *testing.T) {
	ctx := testCtx(t)
	c, _, _ := startCoordinator(t)
	for _, d := range []string{"llama", "qwen"} {
		if _, err := c.Register(ctx, d, "dc-a", testPool(t, "dc-a")); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := c.WatchDomains(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		select {
		case d := <-ch:
			return d
		case <-time.After(10 * time.Second):
			t.Fatal("no domain delivered")
			return ""
		}
	}
	got := map[string]bool{next(): true, next(): true}
	if !got["llama"] || !got["qwen"] {
		t.Fatalf("initial domains %v, want llama and qwen", got)
	}
	if _, err := c.Register(ctx, "llama", "dc-b", testPool(t, "dc-b")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(ctx, "mistral", "dc-a", testPool(t, "dc-a")); err != nil {
		t.Fatal(err)
	}
	if d := next(); d != "mistral" {
		t.Fatalf("next domain %q, want mistral (llama already named)", d)
	}
}

// A retired lane says so in the stored map, keeps its pool's place, is
// retired once, and comes back live when the same pool registers again; a
// retirement naming another pool is refused.
func TestRetireMarksTheLaneAndRegisterRevivesIt(t *testing.T) {
	ctx := testCtx(t)
	c, clk, _ := startCoordinator(t)
	if _, err := c.Register(ctx, domain, "dc-a", testPool(t, "dc-a")); err != nil {
		t.Fatal(err)
	}
	if lane, err := c.Register(ctx, domain, "dc-b", testPool(t, "dc-b")); err != nil || lane != 1 {
		t.Fatalf("dc-b: lane %d, %v", lane, err)
	}
	if lane, err := c.Retire(ctx, domain, "dc-none", testPool(t, "dc-none")); err != nil || lane != -1 {
		t.Fatalf("retire of an unregistered dc: lane %d, %v", lane, err)
	}
	_, err := c.Retire(ctx, domain, "dc-b", testPool(t, "dc-a"))
	asError(t, err, lease.ErrLaneConflict)

	clk.Advance(time.Minute)
	if lane, err := c.Retire(ctx, domain, "dc-b", testPool(t, "dc-b")); err != nil || lane != 1 {
		t.Fatalf("retire dc-b: lane %d, %v", lane, err)
	}
	m, err := c.LaneMap(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Lanes[1].Retired() || m.Lanes[0].Retired() || m.Occupied() != 0b11 {
		t.Fatalf("after retiring dc-b: %+v %+v", m.Lanes[0], m.Lanes[1])
	}
	if lane, err := c.Retire(ctx, domain, "dc-b", testPool(t, "dc-b")); err != nil || lane != 1 {
		t.Fatalf("retire again: lane %d, %v", lane, err)
	}
	again, err := c.LaneMap(ctx, domain)
	if err != nil || again.Version != m.Version {
		t.Fatalf("a second retirement wrote: version %d -> %d, %v", m.Version, again.Version, err)
	}
	// The lane is not free: a new DC takes the next one.
	if lane, err := c.Register(ctx, domain, "dc-c", testPool(t, "dc-c")); err != nil || lane != 2 {
		t.Fatalf("dc-c: lane %d, %v", lane, err)
	}
	if lane, err := c.Register(ctx, domain, "dc-b", testPool(t, "dc-b")); err != nil || lane != 1 {
		t.Fatalf("dc-b back: lane %d, %v", lane, err)
	}
	m, err = c.LaneMap(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	if m.Lanes[1].Retired() {
		t.Fatalf("dc-b still retired after registering again: %+v", m.Lanes[1])
	}
}

func TestLaneMapJSONRetired(t *testing.T) {
	var m lease.LaneMap
	at := time.Unix(0, 1_700_000_000_123_456_789)
	m.Lanes[0] = &lease.LaneEntry{DcName: "dc-a", Pool: testPool(t, "dc-a"), RegisteredAt: at}
	m.Lanes[1] = &lease.LaneEntry{DcName: "dc-b", Pool: testPool(t, "dc-b"), RegisteredAt: at, RetiredAt: at.Add(time.Second)}
	b, err := json.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), `"retired_at"`) != 1 {
		t.Fatalf("stored form = %s, want retired_at on dc-b only", b)
	}
	var back lease.LaneMap
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Lanes[0].Retired() || !back.Lanes[1].RetiredAt.Equal(at.Add(time.Second)) {
		t.Fatalf("round trip: %+v %+v", back.Lanes[0], back.Lanes[1])
	}
}
