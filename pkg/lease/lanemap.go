package lease

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// LaneMapVersion is the format version of the stored lane map.
const LaneMapVersion = 1

// LaneEntry is one occupied lane: the DC pool that owns it.
type LaneEntry struct {
	DcName       string
	Pool         ckf.PoolID
	RegisteredAt time.Time
	// RetiredAt is when the pool's active relay retired the lane on
	// purpose (the pool was removed from its relay); zero while it is live.
	// A lane that merely went silent (a crash: its lease lapsed) is never
	// marked. A retired lane keeps its pool's place, since lanes are never
	// re-pointed, and Register of the same pool revives it.
	RetiredAt time.Time
}

// Retired reports whether the lane was retired on purpose (Retire).
func (e *LaneEntry) Retired() bool { return !e.RetiredAt.IsZero() }

// LaneMap is a domain's assignment of DC pools to the ckf.LaneCount physical
// lanes. A nil entry is a free lane. Values returned by the package are the
// caller's own copies.
type LaneMap struct {
	Domain string
	// Version counts successful writes of this domain's map.
	Version uint64
	Lanes   [ckf.LaneCount]*LaneEntry
	// Revision is the KV revision the map was read at (0: never written).
	Revision uint64
	// Rejected lists the stored entries that failed validation on read
	// (bad DC name, DC id not derived from the name, duplicate name); they
	// are left out of Lanes, so they are neither obeyed nor written back.
	Rejected []string
	// Err is set by WatchLaneMap when the stored value does not decode at
	// all; Lanes is then empty and the map must not be obeyed.
	Err error
}

// Lookup returns the lane owned by pool; -1 and false when none is.
func (m *LaneMap) Lookup(pool ckf.PoolID) (lane int, ok bool) {
	for i, e := range m.Lanes {
		if e != nil && e.Pool == pool {
			return i, true
		}
	}
	return -1, false
}

// LaneOf returns the lane registered under a DC name; -1 and false when
// none is.
func (m *LaneMap) LaneOf(dcName string) (lane int, ok bool) {
	for i, e := range m.Lanes {
		if e != nil && e.DcName == dcName {
			return i, true
		}
	}
	return -1, false
}

// FreeLane returns the lowest free lane; -1 and false when all are taken.
func (m *LaneMap) FreeLane() (lane int, ok bool) {
	for i, e := range m.Lanes {
		if e == nil {
			return i, true
		}
	}
	return -1, false
}

// Occupied returns a bit per occupied lane (bit i = lane i).
func (m *LaneMap) Occupied() uint16 {
	var mask uint16
	for i, e := range m.Lanes {
		if e != nil {
			mask |= 1 << i
		}
	}
	return mask
}

// Stored form. Digests are hex, the DC id a number, times unix nanoseconds.
type laneMapJSON struct {
	Version uint64           `json:"version"`
	Format  int              `json:"format"`
	Lanes   []*laneEntryJSON `json:"lanes"`
}

type laneEntryJSON struct {
	DcName               string `json:"dc"`
	DcID                 uint64 `json:"dc_id"`
	CacheSemantics       string `json:"cache_semantics"`
	CacheSemanticsSource string `json:"cache_semantics_source"`
	RoutingScope         string `json:"routing_scope"`
	RoutingScopeSource   string `json:"routing_scope_source"`
	RegisteredAt         int64  `json:"registered_at"`
	// RetiredAt is absent while the lane is live (and in maps written
	// before retirement existed, which readers take as live).
	RetiredAt int64 `json:"retired_at,omitempty"`
}

// MarshalJSON writes the stored form: a 16-element array with null for free
// lanes.
func (m *LaneMap) MarshalJSON() ([]byte, error) {
	out := laneMapJSON{Version: m.Version, Format: LaneMapVersion, Lanes: make([]*laneEntryJSON, ckf.LaneCount)}
	for i, e := range m.Lanes {
		if e == nil {
			continue
		}
		d := e.Pool.Domain
		out.Lanes[i] = &laneEntryJSON{
			DcName:               e.DcName,
			DcID:                 uint64(e.Pool.Dc),
			CacheSemantics:       d.CacheSemantics.Digest.String(),
			CacheSemanticsSource: d.CacheSemantics.Source.String(),
			RoutingScope:         d.RoutingScope.Digest.String(),
			RoutingScopeSource:   d.RoutingScope.Source.String(),
			RegisteredAt:         e.RegisteredAt.UnixNano(),
		}
		if e.Retired() {
			out.Lanes[i].RetiredAt = e.RetiredAt.UnixNano()
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON strictly reads the stored form.
func (m *LaneMap) UnmarshalJSON(b []byte) error {
	var in laneMapJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if in.Format != LaneMapVersion {
		return fmt.Errorf("lane map format %d, want %d", in.Format, LaneMapVersion)
	}
	if len(in.Lanes) != ckf.LaneCount {
		return fmt.Errorf("lane map has %d lanes, want %d", len(in.Lanes), ckf.LaneCount)
	}
	m.Version = in.Version
	m.Lanes = [ckf.LaneCount]*LaneEntry{}
	m.Rejected = nil
	seen := make(map[string]bool, ckf.LaneCount)
	for i, e := range in.Lanes {
		if e == nil {
			continue
		}
		cs, err := parseDigest(e.CacheSemantics)
		if err != nil {
			return fmt.Errorf("lane %d cache_semantics: %w", i, err)
		}
		csSrc, err := parseSource(e.CacheSemanticsSource)
		if err != nil {
			return fmt.Errorf("lane %d cache_semantics_source: %w", i, err)
		}
		rs, err := parseDigest(e.RoutingScope)
		if err != nil {
			return fmt.Errorf("lane %d routing_scope: %w", i, err)
		}
		rsSrc, err := parseSource(e.RoutingScopeSource)
		if err != nil {
			return fmt.Errorf("lane %d routing_scope_source: %w", i, err)
		}
		// Anyone who can write the bucket can write this map: an entry is
		// checked before it can name a lane, a subject or a metric label.
		if reason := entryProblem(e, seen); reason != "" {
			m.Rejected = append(m.Rejected, fmt.Sprintf("lane %d: %s", i, reason))
			continue
		}
		seen[e.DcName] = true
		m.Lanes[i] = &LaneEntry{
			DcName: e.DcName,
			Pool: ckf.PoolID{
				Domain: ckf.IndexerDomainID{
					CacheSemantics: ckf.CacheSemanticsID{Digest: cs, Source: csSrc},
					RoutingScope:   ckf.RoutingScopeID{Digest: rs, Source: rsSrc},
				},
				Dc: ckf.DcID(e.DcID),
			},
			RegisteredAt: time.Unix(0, e.RegisteredAt),
		}
		if e.RetiredAt > 0 {
			m.Lanes[i].RetiredAt = time.Unix(0, e.RetiredAt)
		}
	}
	return nil
}

// maxRejectedName bounds how much of a rejected DC name a report quotes.
const maxRejectedName = 32

// entryProblem says why a stored lane entry must not be obeyed, "" when it
// is valid. seen holds the names of the valid entries before it.
func entryProblem(e *laneEntryJSON, seen map[string]bool) string {
	if err := ValidateName(e.DcName); err != nil {
		name := e.DcName
		if len(name) > maxRejectedName {
			name = name[:maxRejectedName] + "…"
		}
		return fmt.Sprintf("dc name %q (%d bytes) is not 1..%d characters of [A-Za-z0-9_-]", name, len(e.DcName), MaxNameLen)
	}
	if seen[e.DcName] {
		return fmt.Sprintf("dc %s is registered twice", e.DcName)
	}
	if ckf.DcID(e.DcID) != ckf.DcIDFromName(e.DcName) {
		return fmt.Sprintf("dc %s: dc_id %d is not derived from its name", e.DcName, e.DcID)
	}
	return ""
}

func parseDigest(s string) (ckf.Digest16, error) {
	var d ckf.Digest16
	b, err := hex.DecodeString(s)
	if err != nil {
		return d, err
	}
	if len(b) != len(d) {
		return d, fmt.Errorf("digest has %d bytes, want %d", len(b), len(d))
	}
	copy(d[:], b)
	return d, nil
}

func parseSource(s string) (ckf.IdentitySource, error) {
	switch s {
	case ckf.SourceExplicit.String():
		return ckf.SourceExplicit, nil
	case ckf.SourceDefaultDerived.String():
		return ckf.SourceDefaultDerived, nil
	}
	return 0, fmt.Errorf("unknown identity source %q", s)
}

func lanesKey(domain string) string { return fmt.Sprintf(lanesKeyT, domain) }

// readLaneMap reads a domain's lane map; a missing key is an empty map.
func (c *Coordinator) readLaneMap(ctx context.Context, domain string) (LaneMap, error) {
	key := lanesKey(domain)
	data, rev, present, err := c.latest(ctx, key)
	if err != nil {
		return LaneMap{}, err
	}
	m := LaneMap{Domain: domain, Revision: rev}
	if present {
		if err := json.Unmarshal(data, &m); err != nil {
			return LaneMap{}, corrupt(domain, "", key, err)
		}
	}
	return m, nil
}

// LaneMap returns the domain's current lane map; an unregistered domain has
// an empty map. Fails with ErrInvalidName or ErrCorruptRecord.
func (c *Coordinator) LaneMap(ctx context.Context, domain string) (LaneMap, error) {
	if err := ValidateName(domain); err != nil {
		return LaneMap{}, err
	}
	return c.readLaneMap(ctx, domain)
}

// UpdateLaneMap applies fn to the domain's latest lane map and writes the
// result by compare-and-set, rereading and rerunning fn on conflict up to the
// configured attempts (then ErrContention). fn may therefore run several
// times and must have no side effects; it returns changed=false to skip the
// write, or an error to abort with it. Returns the map as finally stored (or
// as read, when unchanged).
func (c *Coordinator) UpdateLaneMap(ctx context.Context, domain string, fn func(m *LaneMap) (changed bool, err error)) (LaneMap, error) {
	if err := ValidateName(domain); err != nil {
		return LaneMap{}, err
	}
	for range c.set.casAttempts {
		m, err := c.readLaneMap(ctx, domain)
		if err != nil {
			return LaneMap{}, err
		}
		changed, err := fn(&m)
		if err != nil || !changed {
			return m, err
		}
		readRev := m.Revision
		m.Version++
		rev, err := c.casPut(ctx, lanesKey(domain), &m, readRev)
		if isConflict(err) {
			continue
		}
		if err != nil {
			return LaneMap{}, err
		}
		m.Revision = rev
		return m, nil
	}
	return LaneMap{}, contention(domain, "", "lane map update", c.set.casAttempts)
}

// Register assigns pool, named dcName, a lane in domain's lane map and
// returns it (-1 on failure). Registering a pool already present returns its
// lane, without a write unless the lane was retired, which it revives. A new pool takes the lowest free lane. Fails with ErrInvalidName,
// ErrLaneConflict (the name or the pool is already registered with another
// partner), ErrNoFreeLane (all ckf.LaneCount lanes taken) or ErrContention.
func (c *Coordinator) Register(ctx context.Context, domain, dcName string, pool ckf.PoolID) (lane int, err error) {
	if err := validatePool(domain, dcName); err != nil {
		return -1, err
	}
	_, err = c.UpdateLaneMap(ctx, domain, func(m *LaneMap) (bool, error) {
		if i, ok := m.Lookup(pool); ok {
			if m.Lanes[i].DcName != dcName {
				e := newError(ErrLaneConflict, domain, dcName, fmt.Sprintf("pool %s is registered as dc %s", pool, m.Lanes[i].DcName))
				e.Lane = i
				return false, e
			}
			lane = i
			if m.Lanes[i].Retired() {
				m.Lanes[i].RetiredAt = time.Time{}
				return true, nil
			}
			return false, nil
		}
		if i, ok := m.LaneOf(dcName); ok {
			e := newError(ErrLaneConflict, domain, dcName, fmt.Sprintf("name is registered for pool %s, not %s", m.Lanes[i].Pool, pool))
			e.Lane = i
			return false, e
		}
		i, ok := m.FreeLane()
		if !ok {
			return false, newError(ErrNoFreeLane, domain, dcName, fmt.Sprintf("all %d lanes are taken; pool %s cannot register", ckf.LaneCount, pool))
		}
		m.Lanes[i] = &LaneEntry{DcName: dcName, Pool: pool, RegisteredAt: c.now()}
		lane = i
		return true, nil
	})
	if err != nil {
		return -1, err
	}
	return lane, nil
}

// Retire marks pool's lane, registered as dcName, retired on purpose (its
// relay removed the pool): indexers stop following it and drop it from
// their answers, where a crashed relay's lane would only go stale. The
// active relay calls it while it still holds the pool's lease, so a standby
// that takes the lease over afterwards revives the lane (Register). It
// returns the lane, or -1 without a write when dcName holds no lane; a lane
// already retired is not written again. Fails with ErrInvalidName,
// ErrLaneConflict (dcName's lane is another pool's) or ErrContention.
func (c *Coordinator) Retire(ctx context.Context, domain, dcName string, pool ckf.PoolID) (lane int, err error) {
	if err := validatePool(domain, dcName); err != nil {
		return -1, err
	}
	lane = -1
	_, err = c.UpdateLaneMap(ctx, domain, func(m *LaneMap) (bool, error) {
		i, ok := m.LaneOf(dcName)
		if !ok {
			return false, nil
		}
		if m.Lanes[i].Pool != pool {
			e := newError(ErrLaneConflict, domain, dcName, fmt.Sprintf("name is registered for pool %s, not %s", m.Lanes[i].Pool, pool))
			e.Lane = i
			return false, e
		}
		lane = i
		if m.Lanes[i].Retired() {
			return false, nil
		}
		m.Lanes[i].RetiredAt = c.now()
		return true, nil
	})
	if err != nil {
		return -1, err
	}
	return lane, nil
}

// WatchLaneMap delivers the domain's lane map: first the current one (empty
// when unregistered), then every change. The channel holds at most one map
// and a slow reader gets the newest one, never a stale backlog. The watch
// goroutine stops and the channel closes when ctx ends. A stored value that
// does not decode is delivered as a map with Err set (and no lanes); entries
// that fail validation are left out and listed in Rejected. Fails with ErrInvalidName or a watch error.
func (c *Coordinator) WatchLaneMap(ctx context.Context, domain string) (<-chan LaneMap, error) {
	if err := ValidateName(domain); err != nil {
		return nil, err
	}
	w, err := c.kv.Watch(ctx, lanesKey(domain))
	if err != nil {
		return nil, fmt.Errorf("lease: watch lane map of %s: %w", domain, err)
	}
	out := make(chan LaneMap, 1)
	go func() {
		defer close(out)
		defer stopWatcher(w)
		sawValue := false
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				m := LaneMap{Domain: domain}
				switch {
				case e == nil:
					// End of initial values: an absent key still yields its
					// (empty) initial map.
					if sawValue {
						continue
					}
				case e.Operation() == jetstream.KeyValuePut:
					if err := json.Unmarshal(e.Value(), &m); err != nil {
						// Reported, not obeyed: the reader keeps its lanes.
						m = LaneMap{Domain: domain, Err: corrupt(domain, "", lanesKey(domain), err)}
					}
					m.Revision = e.Revision()
				default:
					m.Revision = e.Revision()
				}
				sawValue = true
				sendLatest(out, m)
			}
		}
	}()
	return out, nil
}

// sendLatest puts v in a 1-slot channel, replacing an unread older value.
// Only the single producing goroutine may call it, so after the drain the
// send cannot block.
func sendLatest[T any](ch chan T, v T) {
	select {
	case <-ch:
	default:
	}
	ch <- v
}

// watcherDrainQuiet bounds stopWatcher: once no update has arrived for this
// long after Stop, the delivery goroutine is not blocked on the channel.
const watcherDrainQuiet = 200 * time.Millisecond

// stopWatcher stops w and drains its channel, so the subscription's delivery
// goroutine is never left blocked on a full channel. It returns when nats.go
// closes the channel or after watcherDrainQuiet without an update: nats.go
// closes it from a handler KeyValue.Watch installs only after subscribing,
// and a watch context that ends in between closes the subscription before
// that handler exists, so the channel is never closed (an indexer shutdown
// hung on it under load; TestWatchesEndWhenTheirContextEndsAtAnyMoment).
func stopWatcher(w jetstream.KeyWatcher) {
	_ = w.Stop()
	quiet := time.NewTimer(watcherDrainQuiet)
	defer quiet.Stop()
	for {
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return
			}
			quiet.Reset(watcherDrainQuiet)
		case <-quiet.C:
			return
		}
	}
}

// WatchDomains delivers the name of every domain that has a lane map in the
// bucket, each once: first those present, then each one a relay registers
// later. An indexer serving every domain it finds (pkg/domains) follows
// it. The channel closes when ctx ends or the watch ends; the caller
// watches again to resume (names already seen come again).
func (c *Coordinator) WatchDomains(ctx context.Context) (<-chan string, error) {
	w, err := c.kv.Watch(ctx, lanesKey("*"), jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("lease: watch lane maps: %w", err)
	}
	out := make(chan string, 16)
	go func() {
		defer close(out)
		defer stopWatcher(w)
		seen := map[string]bool{}
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				d, ok := strings.CutPrefix(e.Key(), lanesKey(""))
				if !ok || seen[d] || ValidateName(d) != nil {
					continue
				}
				seen[d] = true
				select {
				case out <- d:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
