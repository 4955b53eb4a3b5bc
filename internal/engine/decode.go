// Package engine decodes the KV-cache event batches vLLM and SGLang publish
// over ZMQ (msgpack, both the array and the tagged-map encodings of every
// schema generation in docs/engine-kv-events.md) and converts them into Dynamo
// RouterEvent JSON with the canonical tokens_hash the relay consumes.
//
// Concurrency: a Decoder or Converter is owned by one goroutine; the Batch
// a Decoder fills is valid until its next Decode call and its strings are
// views into the payload, which must stay unmodified while they are used.
package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every decode error.
var ErrMalformed = errors.New("engine: malformed event batch")

// DecodeError locates a malformed batch.
type DecodeError struct {
	Offset int
	What   string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%v: %s at byte %d", ErrMalformed, e.What, e.Offset)
}

// Unwrap makes errors.Is(err, ErrMalformed) hold.
func (e *DecodeError) Unwrap() error { return ErrMalformed }

// Kind is an event's type tag.
type Kind uint8

const (
	KindStored Kind = iota + 1
	KindRemoved
	KindCleared
)

func (k Kind) String() string {
	switch k {
	case KindStored:
		return "BlockStored"
	case KindRemoved:
		return "BlockRemoved"
	case KindCleared:
		return "AllBlocksCleared"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Event is one decoded event. Optional scalars come with a Has flag (0 is
// a legal hash and group index); byte-slice fields are nil when absent or
// nil on the wire and are views into the payload.
type Event struct {
	Kind Kind
	// BlockHashes are the engine hashes normalised to u64 (spec §2.7).
	BlockHashes []uint64
	Parent      uint64
	HasParent   bool
	TokenIDs    []uint32
	BlockSize   uint64
	LoraID      int64
	HasLoraID   bool
	Medium      []byte
	LoraName    []byte
	// ExtraKeys is the raw msgpack of extra_keys (nil when absent or nil).
	ExtraKeys   []byte
	GroupIdx    uint64
	HasGroupIdx bool
	SpecKind    []byte
	// SlidingWindow is kv_cache_spec_sliding_window (0 when absent).
	SlidingWindow uint64
	// CacheSalt is SGLang's cache_salt (array index 7 map or map key).
	CacheSalt []byte
	// Locality is LOCAL/REMOTE when the producer sends it.
	Locality []byte
}

// Batch is one decoded EventBatch.
type Batch struct {
	TS        float64
	DPRank    int64
	HasDPRank bool
	Events    []Event
	// UnknownFields counts map keys and trailing array elements skipped.
	UnknownFields int
	// UnknownEvents counts events with an unknown tag (skipped).
	UnknownEvents int
	// BadEvents counts events that were well-formed msgpack but not a
	// valid event (wrong field types, missing required fields); skipped.
	BadEvents int
}

// Decoder decodes batches, reusing the Batch's storage between calls so
// steady-state decoding does not allocate.
type Decoder struct {
	b Batch
	r reader
}

// Decode decodes one payload. A malformed envelope fails the whole batch;
// a bad or unknown event inside a well-formed envelope is counted and
// skipped. The returned Batch is reused by the next call.
func (d *Decoder) Decode(payload []byte) (*Batch, error) {
	b := &d.b
	b.TS, b.DPRank, b.HasDPRank = 0, 0, false
	b.Events = b.Events[:0]
	b.UnknownFields, b.UnknownEvents, b.BadEvents = 0, 0, 0
	d.r = reader{b: payload}
	r := &d.r
	var err error
	switch {
	case r.isArray():
		err = d.arrayEnvelope()
	case r.isMap():
		err = d.mapEnvelope()
	default:
		err = d.fail("envelope is neither array nor map")
	}
	if err != nil {
		return nil, err
	}
	if r.remaining() != 0 {
		return nil, d.fail("trailing bytes after batch")
	}
	return b, nil
}

func (d *Decoder) fail(what string) error { return &DecodeError{Offset: d.r.off, What: what} }

func (d *Decoder) arrayEnvelope() error {
	r := &d.r
	n, _ := r.arrayLen()
	if n < 2 {
		return d.fail("envelope array shorter than [ts, events]")
	}
	ts, ok := r.float()
	if !ok {
		return d.fail("ts is not a number")
	}
	d.b.TS = ts
	if err := d.events(); err != nil {
		return err
	}
	if n >= 3 {
		if err := d.rank(); err != nil {
			return err
		}
	}
	for range n - 3 {
		d.b.UnknownFields++
		if !r.skip() {
			return d.fail("bad trailing envelope element")
		}
	}
	return nil
}

func (d *Decoder) rank() error {
	r := &d.r
	if r.isNil() {
		return nil
	}
	v, ok := r.int()
	if !ok {
		return d.fail("data_parallel_rank is not an int")
	}
	d.b.DPRank, d.b.HasDPRank = v, true
	return nil
}

func (d *Decoder) mapEnvelope() error {
	r := &d.r
	n, _ := r.mapLen()
	sawEvents := false
	for range n {
		k, ok := r.str()
		if !ok {
			return d.fail("envelope key is not a string")
		}
		switch string(k) {
		case "ts":
			ts, ok := r.float()
			if !ok {
				return d.fail("ts is not a number")
			}
			d.b.TS = ts
		case "events":
			if err := d.events(); err != nil {
				return err
			}
			sawEvents = true
		case "data_parallel_rank", "dp_rank":
			if err := d.rank(); err != nil {
				return err
			}
		default:
			d.b.UnknownFields++
			if !r.skip() {
				return d.fail("bad envelope value")
			}
		}
	}
	if !sawEvents {
		return d.fail("envelope map without events")
	}
	return nil
}

func (d *Decoder) events() error {
	r := &d.r
	n, ok := r.arrayLen()
	if !ok {
		return d.fail("events is not an array")
	}
	for range n {
		start := r.off
		ev := d.next()
		res := d.event(ev)
		switch res {
		case evOK:
			continue
		case evUnknown:
			d.b.UnknownEvents++
		case evBad:
			d.b.BadEvents++
		}
		// Drop the slot and resynchronise on the event's boundary.
		d.b.Events = d.b.Events[:len(d.b.Events)-1]
		r.off = start
		if !r.skip() {
			return d.fail("event is not valid msgpack")
		}
	}
	return nil
}

// next appends a reset event slot, keeping its slices' capacity.
func (d *Decoder) next() *Event {
	evs := d.b.Events
	if len(evs) < cap(evs) {
		evs = evs[:len(evs)+1]
	} else {
		evs = append(evs, Event{})
	}
	ev := &evs[len(evs)-1]
	*ev = Event{BlockHashes: ev.BlockHashes[:0], TokenIDs: ev.TokenIDs[:0]}
	d.b.Events = evs
	return ev
}

type evResult uint8

const (
	evOK evResult = iota
	evUnknown
	evBad
)

func tagKind(tag []byte) Kind {
	switch string(tag) {
	case "BlockStored":
		return KindStored
	case "BlockRemoved":
		return KindRemoved
	case "AllBlocksCleared":
		return KindCleared
	}
	return 0
}

func (d *Decoder) event(ev *Event) evResult {
	r := &d.r
	switch {
	case r.isArray():
		return d.arrayEvent(ev)
	case r.isMap():
		return d.mapEvent(ev)
	}
	return evBad
}

func (d *Decoder) arrayEvent(ev *Event) evResult {
	r := &d.r
	n, _ := r.arrayLen()
	if n < 1 {
		return evBad
	}
	tag, ok := r.str()
	if !ok {
		return evBad
	}
	ev.Kind = tagKind(tag)
	// fields lists the positional decoders of elements 1.. for the kind;
	// required is how many must be present.
	var required int
	var fields []fieldFn
	switch ev.Kind {
	case KindStored:
		required, fields = 4, storedFields[:]
	case KindRemoved:
		required, fields = 1, removedFields[:]
	case KindCleared:
		required, fields = 0, nil
	default:
		return evUnknown
	}
	if n-1 < required {
		return evBad
	}
	for i := 1; i < n; i++ {
		if i-1 < len(fields) {
			if !fields[i-1](d, ev) {
				return evBad
			}
			continue
		}
		d.b.UnknownFields++
		if !r.skip() {
			return evBad
		}
	}
	return evOK
}

type fieldFn func(d *Decoder, ev *Event) bool

// storedFields are BlockStored's array elements 1..11 (spec §2.4).
var storedFields = [...]fieldFn{
	(*Decoder).blockHashes,
	(*Decoder).parent,
	(*Decoder).tokenIDs,
	(*Decoder).blockSize,
	(*Decoder).loraID,
	(*Decoder).medium,
	(*Decoder).loraNameOrSalt,
	(*Decoder).extraKeys,
	(*Decoder).groupIdx,
	(*Decoder).specKind,
	(*Decoder).slidingWindow,
}

// removedFields are BlockRemoved's array elements 1..3 (spec §2.5).
var removedFields = [...]fieldFn{
	(*Decoder).blockHashes,
	(*Decoder).medium,
	(*Decoder).groupIdx,
}

func (d *Decoder) mapEvent(ev *Event) evResult {
	r := &d.r
	n, _ := r.mapLen()
	var have uint16
	const (
		hHashes = 1 << iota
		hTokens
		hSize
	)
	// Keys may come in any order; the tag decides which are required, so
	// remember the type and validate at the end.
	for range n {
		k, ok := r.str()
		if !ok {
			return evBad
		}
		ok = true
		switch string(k) {
		case "type":
			tag, tok := r.str()
			if !tok {
				return evBad
			}
			ev.Kind = tagKind(tag)
			if ev.Kind == 0 {
				return evUnknown
			}
		case "block_hashes":
			ok = d.blockHashes(ev)
			have |= hHashes
		case "parent_block_hash":
			ok = d.parent(ev)
		case "token_ids":
			ok = d.tokenIDs(ev)
			have |= hTokens
		case "block_size":
			ok = d.blockSize(ev)
			have |= hSize
		case "lora_id":
			ok = d.loraID(ev)
		case "medium":
			ok = d.medium(ev)
		case "lora_name":
			ev.LoraName, _, ok = r.strOrNil()
		case "extra_keys":
			ok = d.extraKeys(ev)
		case "group_idx":
			ok = d.groupIdx(ev)
		case "kv_cache_spec_kind":
			ok = d.specKind(ev)
		case "kv_cache_spec_sliding_window":
			ok = d.slidingWindow(ev)
		case "cache_salt":
			ev.CacheSalt, _, ok = r.strOrNil()
		case "locality":
			ev.Locality, _, ok = r.strOrNil()
		default:
			d.b.UnknownFields++
			ok = r.skip()
		}
		if !ok {
			return evBad
		}
	}
	switch ev.Kind {
	case KindStored:
		if have&(hHashes|hTokens|hSize) != hHashes|hTokens|hSize {
			return evBad
		}
	case KindRemoved:
		if have&hHashes == 0 {
			return evBad
		}
	case KindCleared:
	default:
		return evBad // no type key
	}
	return evOK
}

func (d *Decoder) blockHashes(ev *Event) bool {
	r := &d.r
	n, ok := r.arrayLen()
	if !ok {
		return false
	}
	hs := ev.BlockHashes[:0]
	for range n {
		h, ok := r.hash()
		if !ok {
			return false
		}
		hs = append(hs, h)
	}
	ev.BlockHashes = hs
	return true
}

func (d *Decoder) parent(ev *Event) bool {
	if d.r.isNil() {
		return true
	}
	h, ok := d.r.hash()
	ev.Parent, ev.HasParent = h, ok
	return ok
}

// tokenIDs reads u32 tokens. SGLang's EAGLE bigram form (arrays of pairs)
// is not supported and makes the event bad.
func (d *Decoder) tokenIDs(ev *Event) bool {
	r := &d.r
	n, ok := r.arrayLen()
	if !ok {
		return false
	}
	ts := ev.TokenIDs[:0]
	b, off := r.b, r.off
	for range n {
		// Fast path for msgspec's forms of a u32 (fixint, cc, cd, ce);
		// anything else goes through the width-agnostic reader.
		if off < len(b) {
			switch c := b[off]; {
			case c <= 0x7f:
				ts = append(ts, uint32(c))
				off++
				continue
			case c == 0xcd && off+3 <= len(b):
				ts = append(ts, uint32(b[off+1])<<8|uint32(b[off+2]))
				off += 3
				continue
			case c == 0xce && off+5 <= len(b):
				ts = append(ts, binary.BigEndian.Uint32(b[off+1:]))
				off += 5
				continue
			case c == 0xcc && off+2 <= len(b):
				ts = append(ts, uint32(b[off+1]))
				off += 2
				continue
			}
		}
		r.off = off
		v, ok := r.uint()
		if !ok || v > 0xffffffff {
			return false
		}
		ts = append(ts, uint32(v))
		off = r.off
	}
	r.off = off
	ev.TokenIDs = ts
	return true
}

func (d *Decoder) blockSize(ev *Event) bool {
	v, ok := d.r.uint()
	ev.BlockSize = v
	return ok
}

func (d *Decoder) loraID(ev *Event) bool {
	if d.r.isNil() {
		return true
	}
	v, ok := d.r.int()
	ev.LoraID, ev.HasLoraID = v, ok
	return ok
}

func (d *Decoder) medium(ev *Event) bool {
	var ok bool
	ev.Medium, _, ok = d.r.strOrNil()
	return ok
}

// loraNameOrSalt is array index 7: vLLM's lora_name, or SGLang's
// {"cache_salt", "session_id"} map.
func (d *Decoder) loraNameOrSalt(ev *Event) bool {
	r := &d.r
	if !r.isMap() {
		var ok bool
		ev.LoraName, _, ok = r.strOrNil()
		return ok
	}
	n, _ := r.mapLen()
	for range n {
		k, ok := r.str()
		if !ok {
			return false
		}
		if string(k) == "cache_salt" {
			if ev.CacheSalt, _, ok = r.strOrNil(); !ok {
				return false
			}
			continue
		}
		d.b.UnknownFields++
		if !r.skip() {
			return false
		}
	}
	return true
}

func (d *Decoder) extraKeys(ev *Event) bool {
	r := &d.r
	if r.isNil() {
		return true
	}
	if !r.isArray() {
		return false
	}
	start := r.off
	if !r.skip() {
		return false
	}
	ev.ExtraKeys = r.b[start:r.off]
	return true
}

func (d *Decoder) groupIdx(ev *Event) bool {
	if d.r.isNil() {
		return true
	}
	v, ok := d.r.uint()
	ev.GroupIdx, ev.HasGroupIdx = v, ok
	return ok
}

func (d *Decoder) specKind(ev *Event) bool {
	var ok bool
	ev.SpecKind, _, ok = d.r.strOrNil()
	return ok
}

func (d *Decoder) slidingWindow(ev *Event) bool {
	if d.r.isNil() {
		return true
	}
	v, ok := d.r.uint()
	ev.SlidingWindow = v
	return ok
}
