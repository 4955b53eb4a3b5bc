package engine

import (
	"bytes"
	"math"
	"strconv"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// TierOf maps an event's medium to a storage tier (docs/engine-kv-events.md §2.8).
// ok is false for a value the table does not know: the caller counts it
// instead of assuming GPU.
func TierOf(medium []byte) (tier routerevent.StorageTier, ok bool) {
	switch {
	case len(medium) == 0, eq(medium, "GPU"), eq(medium, "DEVICE"):
		return routerevent.TierDevice, true
	case eq(medium, "CPU"), eq(medium, "CPU_PINNED"), eq(medium, "CPU_TIER1"):
		return routerevent.TierHostPinned, true
	case eq(medium, "CPU_TIER2"), eq(medium, "DISK"), eq(medium, "NVME"), eq(medium, "STORAGE"):
		return routerevent.TierDisk, true
	case eq(medium, "EXTERNAL"), eq(medium, "NETWORK"), eq(medium, "REMOTE"), eq(medium, "SHARED"):
		return routerevent.TierExternal, true
	}
	return routerevent.TierDevice, false
}

func eq(b []byte, s string) bool { return bytes.EqualFold(b, []byte(s)) }

// isMainAttention reports whether a KV-cache group kind may be indexed as
// prefixes (Dynamo's is_main_attention; nil = pre-G5 producer = full).
func isMainAttention(kind []byte) bool {
	if kind == nil {
		return true
	}
	s := string(kind) // compared, not stored: no allocation
	return s == "full_attention" || s == "mla_attention" || s == "sink_full_attention"
}

// Options configure a Converter for one engine.
type Options struct {
	WorkerID uint64
	// DPRank is used when a batch carries no data_parallel_rank.
	DPRank uint32
	// BlockSize is the router's kv_block_size; an event with another
	// block_size is not converted. 0 accepts every event's own size.
	BlockSize int
	// IndexHostPinned publishes host-pinned (CPU) blocks as device blocks
	// so the relay, which indexes the device tier only, indexes them too.
	IndexHostPinned bool
}

// maxBlockSize bounds an event's block_size when Options.BlockSize is 0.
const maxBlockSize = 1 << 16

// Stats count what a conversion emitted and why events were dropped.
// Converter.Convert adds to it; the caller owns and resets it.
type Stats struct {
	Stored, Removed, Cleared uint64
	Blocks                   uint64
	// TierFiltered: events on a tier the bridge does not index.
	TierFiltered uint64
	// UnknownMedium: events whose medium §2.8 does not list (not indexed).
	UnknownMedium uint64
	// BlockSizeMismatch: stores whose block_size differs from the router's.
	BlockSizeMismatch uint64
	// NonMainGroup: stores/removes of non-prefix KV-cache groups.
	NonMainGroup uint64
	// RemoteLocality: events with locality other than LOCAL.
	RemoteLocality uint64
	// DuplicateHashes: stores repeating a hash (or the parent) inside one
	// event, dropped as Dynamo does.
	DuplicateHashes uint64
	// ShortTokens: stores with fewer tokens than hashes × block_size; the
	// blocks that have their tokens are still converted.
	ShortTokens uint64
	// EmptyStores: stores with no convertible block.
	EmptyStores uint64
}

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	s.Stored += o.Stored
	s.Removed += o.Removed
	s.Cleared += o.Cleared
	s.Blocks += o.Blocks
	s.TierFiltered += o.TierFiltered
	s.UnknownMedium += o.UnknownMedium
	s.BlockSizeMismatch += o.BlockSizeMismatch
	s.NonMainGroup += o.NonMainGroup
	s.RemoteLocality += o.RemoteLocality
	s.DuplicateHashes += o.DuplicateHashes
	s.ShortTokens += o.ShortTokens
	s.EmptyStores += o.EmptyStores
}

// Converter turns decoded batches into RouterEvent JSON for one engine.
// It keeps scratch buffers, the last LoRA/salt seed and which KV-cache
// groups are not main attention, so steady-state conversion does not
// allocate.
type Converter struct {
	o      Options
	locals []ckf.LocalBlockHash
	dups   map[uint64]struct{}

	seedLora, seedSalt string
	seed               uint64

	// nonMain[g] is set once a store showed group g is not prefix-indexable.
	nonMain map[uint64]bool
}

// NewConverter returns a converter for one engine.
func NewConverter(o Options) *Converter {
	return &Converter{o: o, seed: ckf.XXH3Seed, nonMain: make(map[uint64]bool)}
}

// Options returns the converter's options.
func (c *Converter) Options() Options { return c.o }

// Convert appends the batch's RouterEvents, as one JSON array, to dst and
// returns it with how many events it holds (0: nothing to publish, dst
// unchanged). eventID is stamped on every event (the engine sequence).
func (c *Converter) Convert(dst []byte, b *Batch, eventID uint64, st *Stats) ([]byte, int) {
	rank := c.o.DPRank
	if b.HasDPRank && b.DPRank >= 0 && b.DPRank <= math.MaxUint32 {
		rank = uint32(b.DPRank)
	}
	start := len(dst)
	dst = append(dst, '[')
	n := 0
	for i := range b.Events {
		ev := &b.Events[i]
		mark := len(dst)
		if n > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		dst, ok = c.event(dst, ev, rank, eventID, st)
		if ok {
			n++
		} else {
			dst = dst[:mark]
		}
	}
	if n == 0 {
		return dst[:start], 0
	}
	return append(dst, ']'), n
}

// AppendCleared appends one AllBlocksCleared RouterEvent (as a one-element
// JSON array) for the engine's worker and rank: the bridge's way to drop a
// worker's blocks on an engine restart or an unrecoverable gap.
func (c *Converter) AppendCleared(dst []byte, rank uint32, eventID uint64) []byte {
	dst = append(dst, '[')
	dst = c.header(dst, routerevent.TierDevice, eventID)
	dst = append(dst, `"cleared"`...)
	dst = c.trailer(dst, rank)
	return append(dst, ']')
}

func (c *Converter) header(dst []byte, tier routerevent.StorageTier, eventID uint64) []byte {
	dst = append(dst, `{"worker_id":`...)
	dst = strconv.AppendUint(dst, c.o.WorkerID, 10)
	dst = append(dst, `,"storage_tier":"`...)
	dst = append(dst, tier.String()...)
	dst = append(dst, `","event":{"event_id":`...)
	dst = strconv.AppendUint(dst, eventID, 10)
	return append(dst, `,"data":`...)
}

func (c *Converter) trailer(dst []byte, rank uint32) []byte {
	dst = append(dst, `,"dp_rank":`...)
	dst = strconv.AppendUint(dst, uint64(rank), 10)
	return append(dst, "}}"...)
}

// indexTier decides the tier an event is published on; ok=false drops it.
func (c *Converter) indexTier(ev *Event, st *Stats) (routerevent.StorageTier, bool) {
	if ev.Locality != nil && string(ev.Locality) != "LOCAL" {
		st.RemoteLocality++
		return 0, false
	}
	tier, known := TierOf(ev.Medium)
	switch {
	case !known:
		st.UnknownMedium++
		return 0, false
	case tier == routerevent.TierDevice:
		return tier, true
	case tier == routerevent.TierHostPinned && c.o.IndexHostPinned:
		return routerevent.TierDevice, true
	}
	st.TierFiltered++
	return 0, false
}

func (c *Converter) event(dst []byte, ev *Event, rank uint32, eventID uint64, st *Stats) ([]byte, bool) {
	switch ev.Kind {
	case KindCleared:
		if ev.Locality != nil && string(ev.Locality) != "LOCAL" {
			st.RemoteLocality++
			return dst, false
		}
		dst = c.header(dst, routerevent.TierDevice, eventID)
		dst = append(dst, `"cleared"`...)
		st.Cleared++
		return c.trailer(dst, rank), true
	case KindRemoved:
		if ev.HasGroupIdx && c.nonMain[ev.GroupIdx] {
			st.NonMainGroup++
			return dst, false
		}
		tier, ok := c.indexTier(ev, st)
		if !ok || len(ev.BlockHashes) == 0 {
			return dst, false
		}
		dst = c.header(dst, tier, eventID)
		dst = append(dst, `{"removed":{"block_hashes":[`...)
		for i, h := range ev.BlockHashes {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, h, 10)
		}
		dst = append(dst, "]}}"...)
		st.Removed++
		return c.trailer(dst, rank), true
	case KindStored:
		return c.stored(dst, ev, rank, eventID, st)
	}
	return dst, false
}

func (c *Converter) stored(dst []byte, ev *Event, rank uint32, eventID uint64, st *Stats) ([]byte, bool) {
	if !isMainAttention(ev.SpecKind) {
		if ev.HasGroupIdx {
			c.nonMain[ev.GroupIdx] = true
		}
		st.NonMainGroup++
		return dst, false
	}
	if ev.HasGroupIdx && c.nonMain[ev.GroupIdx] {
		delete(c.nonMain, ev.GroupIdx) // the group's kind changed: trust the newest store
	}
	bs := c.o.BlockSize
	if bs == 0 {
		if ev.BlockSize == 0 || ev.BlockSize > maxBlockSize {
			st.BlockSizeMismatch++
			return dst, false
		}
		bs = int(ev.BlockSize)
	} else if ev.BlockSize != uint64(bs) {
		st.BlockSizeMismatch++
		return dst, false
	}
	tier, ok := c.indexTier(ev, st)
	if !ok {
		return dst, false
	}
	if c.hasDuplicates(ev) {
		st.DuplicateHashes++
		return dst, false
	}
	c.locals = ckf.LocalBlockHashesWith(c.locals[:0], ev.TokenIDs, bs, ckf.BlockOptions{Seed: c.seedFor(ev)})
	n := min(len(c.locals), len(ev.BlockHashes))
	if n < len(ev.BlockHashes) {
		st.ShortTokens++
	}
	if n == 0 {
		st.EmptyStores++
		return dst, false
	}
	dst = c.header(dst, tier, eventID)
	dst = append(dst, `{"stored":{"parent_hash":`...)
	if ev.HasParent {
		dst = strconv.AppendUint(dst, ev.Parent, 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"blocks":[`...)
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"block_hash":`...)
		dst = strconv.AppendUint(dst, ev.BlockHashes[i], 10)
		dst = append(dst, `,"tokens_hash":`...)
		dst = strconv.AppendUint(dst, uint64(c.locals[i]), 10)
		dst = append(dst, '}')
	}
	dst = append(dst, "]}}"...)
	st.Stored++
	st.Blocks += uint64(n)
	return c.trailer(dst, rank), true
}

// seedFor returns the token-hash seed for the event's LoRA name and cache
// salt (docs/ckf-spec.md §2.1 via ckf.SaltedSeed), recomputing only when they
// differ from the previous event's.
func (c *Converter) seedFor(ev *Event) uint64 {
	if string(ev.LoraName) != c.seedLora || string(ev.CacheSalt) != c.seedSalt {
		c.seedLora, c.seedSalt = string(ev.LoraName), string(ev.CacheSalt)
		c.seed = ckf.SaltedSeed(c.seedLora, c.seedSalt)
	}
	return c.seed
}

// linearDupLimit bounds the quadratic duplicate scan; longer stores use a
// reused map.
const linearDupLimit = 32

func (c *Converter) hasDuplicates(ev *Event) bool {
	hs := ev.BlockHashes
	if len(hs) <= linearDupLimit {
		for i, h := range hs {
			if ev.HasParent && h == ev.Parent {
				return true
			}
			for _, g := range hs[:i] {
				if g == h {
					return true
				}
			}
		}
		return false
	}
	if c.dups == nil {
		c.dups = make(map[uint64]struct{}, len(hs))
	}
	clear(c.dups)
	if ev.HasParent {
		c.dups[ev.Parent] = struct{}{}
	}
	for _, h := range hs {
		if _, ok := c.dups[h]; ok {
			return true
		}
		c.dups[h] = struct{}{}
	}
	return false
}
