package routerevent

// DecodeRouterEventsInto is DecodeRouterEvents without the allocations: it
// decodes one RouterEvent object or a JSON array of them into dst's backing
// array, reusing the Blocks, BlockHashes and MmExtraInfo buffers of every
// element up to cap(dst), and returns the filled slice.
//
// It accepts and rejects exactly the inputs DecodeRouterEvents does and
// returns the same events, with one relaxation: the slices of the variant
// that Data.Kind does not select are empty but may be non-nil, because they
// keep their capacity for the next decode. A single-pass scanner handles the
// canonical spec §14.1 shapes; on anything it is not certain about (key
// case variants, escapes in keys or enum strings, duplicate fields, nulls
// where values are expected, syntax errors, ...) it hands the whole message
// to DecodeRouterEvents, so errors are that decoder's errors.
//
// The caller owns dst and must not keep any part of the result (slices or
// pointers inside events) past the next call with the same buffer. dst
// should be nil or a slice returned by an earlier call: the elements up to
// cap(dst) are overwritten. On error the result is dst[:0], so the buffer
// can be kept.
func DecodeRouterEventsInto(dst []RouterEvent, b []byte) ([]RouterEvent, error) {
	d := fastDecoder{b: b}
	if out, ok := d.decode(dst[:0]); ok {
		return out, nil
	}
	evs, err := DecodeRouterEvents(b)
	if err != nil {
		return dst[:0], err
	}
	if out := append(dst[:0], evs...); out != nil {
		return out, nil
	}
	return evs, nil // keep "[]" an empty, non-nil slice
}

// Comma-separated field names per struct, for shadows.
const (
	routerEventFields = "worker_id,storage_tier,event"
	kvEventFields     = "event_id,data,dp_rank"
	storeDataFields   = "parent_hash,start_position,blocks"
	storedBlockFields = "block_hash,tokens_hash,mm_extra_info"
	removeDataFields  = "block_hashes"
)

// maxSkipDepth bounds the nesting of ignored values and mm_extra_info the
// scanner walks itself; deeper input goes to the reference decoder, which
// owns the depth limit error.
const maxSkipDepth = 64

// fastDecoder scans canonical RouterEvent JSON in one pass. Every method
// returns false to mean "not certain": the caller then falls back to the
// reference decoder, so no method needs to tell invalid input from merely
// unusual input.
type fastDecoder struct {
	b []byte
	i int
}

func (d *fastDecoder) decode(dst []RouterEvent) ([]RouterEvent, bool) {
	var e *RouterEvent
	switch d.peek() {
	case '{':
		dst, e = growEvents(dst)
		if !d.routerEvent(e) {
			return nil, false
		}
	case '[':
		d.i++
		if d.eat(']') {
			if dst == nil {
				dst = []RouterEvent{} // encoding/json yields an empty, non-nil slice
			}
			break
		}
		for {
			dst, e = growEvents(dst)
			if !d.routerEvent(e) {
				return nil, false
			}
			more, ok := d.more(']')
			if !ok {
				return nil, false
			}
			if !more {
				break
			}
		}
	default:
		return nil, false
	}
	// Only JSON whitespace may follow; anything else (including the
	// Unicode spaces bytes.TrimSpace strips) is left to the reference.
	d.ws()
	return dst, d.i == len(d.b)
}

// growEvents extends dst by one element, reusing the spare element (and its
// buffers) when there is capacity.
func growEvents(dst []RouterEvent) ([]RouterEvent, *RouterEvent) {
	if len(dst) < cap(dst) {
		dst = dst[:len(dst)+1]
	} else {
		dst = append(dst, RouterEvent{})
	}
	return dst, &dst[len(dst)-1]
}

func (d *fastDecoder) routerEvent(e *RouterEvent) bool {
	if !d.eat('{') || d.eat('}') { // {} lacks the required fields
		return false
	}
	const (
		seenWorker = 1 << iota
		seenTier
		seenEvent
	)
	var seen uint8
	tier := TierDevice
	for {
		// Canonical order (see keyOr): worker_id, storage_tier, event.
		next := `"worker_id":`
		if seen&seenTier != 0 {
			next = `"event":`
		} else if seen&seenWorker != 0 {
			next = `"storage_tier":`
		}
		k, ok := d.keyOr(next)
		if !ok {
			return false
		}
		switch string(k) {
		case "worker_id":
			if seen&seenWorker != 0 {
				return false
			}
			seen |= seenWorker
			if e.WorkerID, ok = d.u64(); !ok {
				return false
			}
		case "storage_tier":
			if seen&seenTier != 0 {
				return false
			}
			seen |= seenTier
			if tier, ok = d.tier(); !ok {
				return false
			}
		case "event":
			if seen&seenEvent != 0 {
				return false
			}
			seen |= seenEvent
			if !d.kvEvent(&e.Event) {
				return false
			}
		default:
			if !d.ignore(k, routerEventFields) {
				return false
			}
		}
		more, ok := d.more('}')
		if !ok {
			return false
		}
		if !more {
			break
		}
	}
	e.StorageTier = tier
	return seen&(seenWorker|seenEvent) == seenWorker|seenEvent
}

func (d *fastDecoder) kvEvent(ev *KvCacheEvent) bool {
	if !d.eat('{') || d.eat('}') { // {} lacks data
		return false
	}
	const (
		seenID = 1 << iota
		seenData
		seenRank
	)
	var seen uint8
	ev.EventID, ev.DpRank = 0, 0
	for {
		// Canonical order: event_id, data, dp_rank.
		next := `"event_id":`
		if seen&seenData != 0 {
			next = `"dp_rank":`
		} else if seen&seenID != 0 {
			next = `"data":`
		}
		k, ok := d.keyOr(next)
		if !ok {
			return false
		}
		switch string(k) {
		case "event_id":
			if seen&seenID != 0 {
				return false
			}
			seen |= seenID
			if ev.EventID, ok = d.u64(); !ok {
				return false
			}
		case "data":
			if seen&seenData != 0 {
				return false
			}
			seen |= seenData
			if !d.eventData(&ev.Data) {
				return false
			}
		case "dp_rank":
			if seen&seenRank != 0 {
				return false
			}
			seen |= seenRank
			if ev.DpRank, ok = d.u32(); !ok {
				return false
			}
		default:
			if !d.ignore(k, kvEventFields) {
				return false
			}
		}
		more, ok := d.more('}')
		if !ok {
			return false
		}
		if !more {
			break
		}
	}
	return seen&seenData != 0
}

// eventData reads the externally tagged union. The tag object must hold
// exactly one key; the object form of "cleared" is left to the reference.
func (d *fastDecoder) eventData(ed *EventData) bool {
	switch d.peek() {
	case '"':
		d.i++
		if !d.rawStringIs("cleared") {
			return false
		}
		ed.Kind = EventCleared
		ed.Stored.clearKeep()
		ed.Removed.BlockHashes = ed.Removed.BlockHashes[:0]
		return true
	case '{':
		d.i++
		k, ok := d.key()
		if !ok {
			return false
		}
		switch string(k) {
		case "stored":
			ed.Kind = EventStored
			ed.Removed.BlockHashes = ed.Removed.BlockHashes[:0]
			ok = d.stored(&ed.Stored)
		case "removed":
			ed.Kind = EventRemoved
			ed.Stored.clearKeep()
			ok = d.removed(&ed.Removed)
		default:
			return false
		}
		return ok && d.eat('}')
	}
	return false
}

// clearKeep empties s but keeps the Blocks buffer for reuse.
func (s *StoreData) clearKeep() {
	s.ParentHash, s.StartPosition, s.Blocks = nil, nil, s.Blocks[:0]
}

func (d *fastDecoder) stored(sd *StoreData) bool {
	if !d.eat('{') || d.eat('}') { // without blocks the reference yields nil Blocks
		return false
	}
	const (
		seenParent = 1 << iota
		seenStart
		seenBlocks
	)
	var (
		seen          uint8
		parent        uint64
		start         uint32
		hasParent     bool
		hasStart      bool
		ok            bool
		blocksPresent bool
	)
	blocks := sd.Blocks[:0]
	for {
		// Canonical order: parent_hash, blocks (start_position is rare).
		next := `"parent_hash":`
		if seen&seenParent != 0 {
			next = `"blocks":`
		}
		k, kok := d.keyOr(next)
		if !kok {
			return false
		}
		switch string(k) {
		case "parent_hash":
			if seen&seenParent != 0 {
				return false
			}
			seen |= seenParent
			if d.null() {
				hasParent = false
			} else if parent, ok = d.u64(); !ok {
				return false
			} else {
				hasParent = true
			}
		case "start_position":
			if seen&seenStart != 0 {
				return false
			}
			seen |= seenStart
			if d.null() {
				hasStart = false
			} else if start, ok = d.u32(); !ok {
				return false
			} else {
				hasStart = true
			}
		case "blocks":
			if seen&seenBlocks != 0 {
				return false
			}
			seen |= seenBlocks
			if blocks, ok = d.blocks(blocks); !ok {
				return false
			}
			blocksPresent = true
		default:
			if !d.ignore(k, storeDataFields) {
				return false
			}
		}
		more, mok := d.more('}')
		if !mok {
			return false
		}
		if !more {
			break
		}
	}
	if !blocksPresent {
		return false
	}
	if blocks == nil {
		blocks = []StoredBlock{} // [] decodes to an empty, non-nil slice
	}
	sd.Blocks = blocks
	// Reuse the previous pointee: the caller does not keep events across
	// decodes, and this keeps steady-state decoding allocation free.
	if hasParent {
		if sd.ParentHash == nil {
			sd.ParentHash = new(uint64)
		}
		*sd.ParentHash = parent
	} else {
		sd.ParentHash = nil
	}
	if hasStart {
		if sd.StartPosition == nil {
			sd.StartPosition = new(uint32)
		}
		*sd.StartPosition = start
	} else {
		sd.StartPosition = nil
	}
	return true
}

func (d *fastDecoder) blocks(blocks []StoredBlock) ([]StoredBlock, bool) {
	if !d.eat('[') {
		return nil, false
	}
	if d.eat(']') {
		return blocks, true
	}
	for {
		if len(blocks) < cap(blocks) {
			blocks = blocks[:len(blocks)+1]
		} else {
			blocks = append(blocks, StoredBlock{})
		}
		sb := &blocks[len(blocks)-1]
		if d.compactBlock(sb) {
			// The separator too, without whitespace (more's general case).
			if d.i < len(d.b) && d.b[d.i] == ',' {
				d.i++
				continue
			}
		} else if !d.block(sb) {
			return nil, false
		}
		more, ok := d.more(']')
		if !ok {
			return nil, false
		}
		if !more {
			return blocks, true
		}
	}
}

// compactBlock reads a block as canonical encoders write it, with no
// whitespace: {"block_hash":N,"tokens_hash":N}, or the same with
// ,"mm_extra_info":null before the brace. The literals compare as a few
// word loads each, and the scan skips block's per-key dispatch and
// whitespace checks. On anything else it consumes nothing and returns false,
// and block reads the same bytes in full.
func (d *fastDecoder) compactBlock(sb *StoredBlock) bool {
	const (
		blockKey  = `{"block_hash":`
		tokensKey = `,"tokens_hash":`
		mmNull    = `,"mm_extra_info":null}`
	)
	b, i := d.b, d.i
	if len(b)-i < len(blockKey) || string(b[i:i+len(blockKey)]) != blockKey {
		return false
	}
	bh, i, ok := parseU64(b, i+len(blockKey))
	if !ok || len(b)-i < len(tokensKey) || string(b[i:i+len(tokensKey)]) != tokensKey {
		return false
	}
	th, i, ok := parseU64(b, i+len(tokensKey))
	switch {
	case !ok || i >= len(b):
		return false
	case b[i] == '}':
		i++
		sb.MmExtraInfo = nil
	case len(b)-i >= len(mmNull) && string(b[i:i+len(mmNull)]) == mmNull:
		i += len(mmNull)
		// As block stores it: the raw value, copied.
		sb.MmExtraInfo = append(sb.MmExtraInfo[:0], "null"...)
	default:
		return false
	}
	sb.BlockHash, sb.TokensHash = bh, th
	d.i = i
	return true
}

func (d *fastDecoder) block(sb *StoredBlock) bool {
	if !d.eat('{') {
		return false // [null] decodes to a zero block in the reference: leave it there
	}
	sb.BlockHash, sb.TokensHash = 0, 0
	if d.eat('}') {
		sb.MmExtraInfo = nil
		return true
	}
	const (
		seenBlock = 1 << iota
		seenTokens
		seenMm
	)
	var seen uint8
	for {
		// Canonical encoders write block_hash, tokens_hash, mm_extra_info.
		next := `"block_hash":`
		if seen&seenTokens != 0 {
			next = `"mm_extra_info":`
		} else if seen&seenBlock != 0 {
			next = `"tokens_hash":`
		}
		k, ok := d.keyOr(next)
		if !ok {
			return false
		}
		switch string(k) {
		case "block_hash":
			if seen&seenBlock != 0 {
				return false
			}
			seen |= seenBlock
			if sb.BlockHash, ok = d.u64(); !ok {
				return false
			}
		case "tokens_hash":
			if seen&seenTokens != 0 {
				return false
			}
			seen |= seenTokens
			if sb.TokensHash, ok = d.u64(); !ok {
				return false
			}
		case "mm_extra_info":
			if seen&seenMm != 0 {
				return false
			}
			seen |= seenMm
			// json.RawMessage keeps the value's bytes verbatim, null
			// included; copy them so the event never aliases the input.
			d.ws()
			start := d.i
			if !d.skip(0) {
				return false
			}
			sb.MmExtraInfo = append(sb.MmExtraInfo[:0], d.b[start:d.i]...)
		default:
			if !d.ignore(k, storedBlockFields) {
				return false
			}
		}
		more, ok := d.more('}')
		if !ok {
			return false
		}
		if !more {
			break
		}
	}
	if seen&seenMm == 0 {
		sb.MmExtraInfo = nil
	}
	return true
}

func (d *fastDecoder) removed(rd *RemoveData) bool {
	if !d.eat('{') || d.eat('}') { // without block_hashes the reference yields nil
		return false
	}
	var (
		seen   bool
		hashes []uint64
	)
	for {
		k, ok := d.keyOr(`"block_hashes":`)
		if !ok {
			return false
		}
		switch string(k) {
		case "block_hashes":
			if seen {
				return false
			}
			seen = true
			if hashes, ok = d.hashes(rd.BlockHashes[:0]); !ok {
				return false
			}
		default:
			if !d.ignore(k, removeDataFields) {
				return false
			}
		}
		more, ok := d.more('}')
		if !ok {
			return false
		}
		if !more {
			break
		}
	}
	if !seen {
		return false
	}
	if hashes == nil {
		hashes = []uint64{} // [] decodes to an empty, non-nil slice
	}
	rd.BlockHashes = hashes
	return true
}

func (d *fastDecoder) hashes(hs []uint64) ([]uint64, bool) {
	if !d.eat('[') {
		return nil, false
	}
	if d.eat(']') {
		return hs, true
	}
	for {
		// Compact input first: the number and its separator, no whitespace.
		if h, next, ok := parseU64(d.b, d.i); ok && next < len(d.b) {
			switch d.b[next] {
			case ',':
				hs = append(hs, h)
				d.i = next + 1
				continue
			case ']':
				d.i = next + 1
				return append(hs, h), true
			}
		}
		h, ok := d.u64()
		if !ok {
			return nil, false
		}
		hs = append(hs, h)
		more, ok := d.more(']')
		if !ok {
			return nil, false
		}
		if !more {
			return hs, true
		}
	}
}

// tier reads a storage tier name written without escapes.
func (d *fastDecoder) tier() (StorageTier, bool) {
	if !d.eat('"') {
		return 0, false
	}
	s, ok := d.plainString()
	if !ok {
		return 0, false
	}
	switch string(s) {
	case "device":
		return TierDevice, true
	case "host_pinned":
		return TierHostPinned, true
	case "disk":
		return TierDisk, true
	case "external":
		return TierExternal, true
	}
	return 0, false
}
