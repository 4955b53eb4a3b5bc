package routerevent

import "strings"

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
		k, ok := d.key()
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
		k, ok := d.key()
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
		k, kok := d.key()
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
		if !d.block(&blocks[len(blocks)-1]) {
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
		k, ok := d.key()
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
		k, ok := d.key()
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

// rawStringIs reads the rest of a string (after its opening quote) and
// reports whether it is exactly want, with no escapes.
func (d *fastDecoder) rawStringIs(want string) bool {
	s, ok := d.plainString()
	return ok && string(s) == want
}

// plainString reads the rest of a string (after its opening quote) that has
// no escapes, control or non-ASCII bytes, and returns its contents.
func (d *fastDecoder) plainString() ([]byte, bool) {
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c == '"' {
			s := d.b[start:d.i]
			d.i++
			return s, true
		}
		if c < 0x20 || c >= 0x80 || c == '\\' {
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// key reads an object key and the colon after it. Keys with escapes or
// non-ASCII bytes are refused: they may decode or case-fold (ſ, K, ...)
// onto a known field name.
func (d *fastDecoder) key() ([]byte, bool) {
	if !d.eat('"') {
		return nil, false
	}
	k, ok := d.plainString()
	return k, ok && d.eat(':')
}

// ignore skips the value of an unknown key, as encoding/json does for
// struct fields it has no match for. A key that encoding/json could match
// case-insensitively to one of fields is refused instead.
func (d *fastDecoder) ignore(k []byte, fields string) bool {
	return !shadows(k, fields) && d.skip(0)
}

// shadows reports whether key could name one of the comma-separated fields
// under encoding/json's case-insensitive matching. It errs towards yes by
// also ignoring '_' and '-', which some matching modes disregard.
func shadows(key []byte, fields string) bool {
	for fields != "" {
		var f string
		f, fields, _ = strings.Cut(fields, ",")
		if looseEqual(key, f) {
			return true
		}
	}
	return false
}

func looseEqual(k []byte, f string) bool {
	i, j := 0, 0
	for {
		for i < len(k) && (k[i] == '_' || k[i] == '-') {
			i++
		}
		for j < len(f) && (f[j] == '_' || f[j] == '-') {
			j++
		}
		if i == len(k) || j == len(f) {
			return i == len(k) && j == len(f)
		}
		if upperASCII(k[i]) != upperASCII(f[j]) {
			return false
		}
		i++
		j++
	}
}

func upperASCII(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// u64 reads a JSON number that encoding/json would store in a uint64:
// digits only, no leading zero, no sign, fraction or exponent, in range.
func (d *fastDecoder) u64() (uint64, bool) {
	d.ws()
	i, b := d.i, d.b
	if i >= len(b) {
		return 0, false
	}
	var v uint64
	switch c := b[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		for i < len(b) {
			c := b[i] - '0'
			if c > 9 {
				break
			}
			if v > (1<<64-1-uint64(c))/10 {
				return 0, false
			}
			v = v*10 + uint64(c)
			i++
		}
	default:
		return 0, false
	}
	if i < len(b) {
		switch c := b[i]; {
		case c == '.' || c == 'e' || c == 'E' || ('0' <= c && c <= '9'):
			return 0, false
		}
	}
	d.i = i
	return v, true
}

func (d *fastDecoder) u32() (uint32, bool) {
	v, ok := d.u64()
	if !ok || v > 1<<32-1 {
		return 0, false
	}
	return uint32(v), true
}

// null consumes a null literal if one comes next.
func (d *fastDecoder) null() bool {
	if d.peek() == 'n' && len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// skip validates and steps over one JSON value, as strictly as
// encoding/json's scanner (it accepts invalid UTF-8 in strings, as that
// scanner does) or more strictly.
func (d *fastDecoder) skip(depth int) bool {
	switch d.peek() {
	case '{':
		if depth == maxSkipDepth {
			return false
		}
		d.i++
		if d.eat('}') {
			return true
		}
		for {
			if !d.eat('"') || !d.skipString() || !d.eat(':') || !d.skip(depth+1) {
				return false
			}
			more, ok := d.more('}')
			if !ok || !more {
				return ok
			}
		}
	case '[':
		if depth == maxSkipDepth {
			return false
		}
		d.i++
		if d.eat(']') {
			return true
		}
		for {
			if !d.skip(depth + 1) {
				return false
			}
			more, ok := d.more(']')
			if !ok || !more {
				return ok
			}
		}
	case '"':
		d.i++
		return d.skipString()
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	}
	return d.skipNumber()
}

func (d *fastDecoder) literal(lit string) bool {
	if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
		d.i += len(lit)
		return true
	}
	return false
}

// skipString steps over the rest of a string after its opening quote.
func (d *fastDecoder) skipString() bool {
	b := d.b
	for i := d.i; i < len(b); {
		c := b[i]
		i++
		switch {
		case c == '"':
			d.i = i
			return true
		case c == '\\':
			if i >= len(b) {
				return false
			}
			e := b[i]
			i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 4 {
					return false
				}
				for _, h := range b[i : i+4] {
					if !isHex(h) {
						return false
					}
				}
				i += 4
			default:
				return false
			}
		case c < 0x20:
			return false
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipNumber steps over a number in JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *fastDecoder) skipNumber() bool {
	b, i := d.b, d.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return false
	}
	switch c := b[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i = skipDigits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	d.i = i
	return true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// more consumes the separator after a member or element: true for ',',
// false for the closing byte, not ok for anything else.
func (d *fastDecoder) more(closing byte) (more, ok bool) {
	switch d.peek() {
	case ',':
		d.i++
		return true, true
	case closing:
		d.i++
		return false, true
	}
	return false, false
}

// eat consumes c if it is the next non-whitespace byte.
func (d *fastDecoder) eat(c byte) bool {
	if d.peek() == c {
		d.i++
		return true
	}
	return false
}

// peek returns the next non-whitespace byte, or 0 at the end (a NUL byte
// is never valid where the scanner looks, so the two need no telling apart).
func (d *fastDecoder) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// ws skips JSON whitespace only.
func (d *fastDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}
