// Package enginetest plays the part of a vLLM engine for tests, benchmarks
// and the trace replayer: it encodes event batches byte-identically to
// vLLM's msgspec encoder (either encoding, any schema generation) and
// serves them on a ZMQ PUB socket with a replay ROUTER socket, with
// restarts and dropped messages on demand.
package enginetest

import (
	"encoding/binary"
	"math"

	"github.com/ckfrelay/ckfrelay/internal/engine"
)

// Format selects the producer's encoding.
type Format struct {
	// Map writes events as tagged maps (vLLM G6, current); otherwise as
	// arrays.
	Map bool
	// StoredLen is the BlockStored array length of the emulated schema
	// generation (6: G0/G1, 7: G2, 8: G3, 10: G4, 12: G5; 0 means 12).
	// BlockRemoved's length follows it (2, 3, 3, 4, 4).
	StoredLen int
	// SignedHashes writes hashes ≥ 2^63 as negative ints (vLLM builtin
	// hash, SGLang).
	SignedHashes bool
	// BinHashes writes hashes as 8-byte bins
	// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 style).
	BinHashes bool
	// NoRank writes the 2-element v0.9.0 envelope.
	NoRank bool
}

func (f Format) storedLen() int {
	switch f.StoredLen {
	case 6, 7, 8, 10, 12:
		return f.StoredLen
	}
	return 12
}

func (f Format) removedLen() int {
	switch n := f.storedLen(); {
	case n == 6:
		return 2
	case n < 10:
		return 3
	}
	return 4
}

// AppendBatch appends one EventBatch [ts, events, rank] in format f.
func AppendBatch(dst []byte, ts float64, rank int64, events []engine.Event, f Format) []byte {
	if f.NoRank {
		dst = appendArray(dst, 2)
	} else {
		dst = appendArray(dst, 3)
	}
	dst = append(dst, 0xcb)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(ts))
	dst = appendArray(dst, len(events))
	for i := range events {
		dst = AppendEvent(dst, &events[i], f)
	}
	if !f.NoRank {
		dst = appendInt(dst, rank)
	}
	return dst
}

// AppendEvent appends one event in format f. ExtraKeys is written
// verbatim (it is raw msgpack).
func AppendEvent(dst []byte, ev *engine.Event, f Format) []byte {
	if f.Map {
		return appendMapEvent(dst, ev, f)
	}
	switch ev.Kind {
	case engine.KindStored:
		n := f.storedLen()
		dst = appendArray(dst, n)
		dst = appendStr(dst, "BlockStored")
		dst = appendHashes(dst, ev.BlockHashes, f)
		dst = appendParent(dst, ev, f)
		dst = appendTokens(dst, ev.TokenIDs)
		dst = appendUint(dst, ev.BlockSize)
		dst = appendLoraID(dst, ev)
		if n >= 7 {
			dst = appendStrOrNil(dst, ev.Medium)
		}
		if n >= 8 {
			dst = appendStrOrNil(dst, ev.LoraName)
		}
		if n >= 10 {
			dst = appendRawOrNil(dst, ev.ExtraKeys)
			dst = appendGroup(dst, ev)
		}
		if n >= 12 {
			dst = appendStrOrNil(dst, ev.SpecKind)
			dst = appendWindow(dst, ev)
		}
	case engine.KindRemoved:
		n := f.removedLen()
		dst = appendArray(dst, n)
		dst = appendStr(dst, "BlockRemoved")
		dst = appendHashes(dst, ev.BlockHashes, f)
		if n >= 3 {
			dst = appendStrOrNil(dst, ev.Medium)
		}
		if n >= 4 {
			dst = appendGroup(dst, ev)
		}
	default:
		dst = appendArray(dst, 1)
		dst = appendStr(dst, "AllBlocksCleared")
	}
	return dst
}

// appendMapEvent writes msgspec's omit_defaults map form: fields without a
// default always, defaulted ones (extra_keys, group_idx, kind, window)
// only when set.
func appendMapEvent(dst []byte, ev *engine.Event, f Format) []byte {
	switch ev.Kind {
	case engine.KindStored:
		n := 8
		for _, set := range []bool{ev.ExtraKeys != nil, ev.HasGroupIdx, ev.SpecKind != nil, ev.SlidingWindow != 0} {
			if set {
				n++
			}
		}
		dst = appendMap(dst, n)
		dst = appendStr(dst, "type")
		dst = appendStr(dst, "BlockStored")
		dst = appendStr(dst, "block_hashes")
		dst = appendHashes(dst, ev.BlockHashes, f)
		dst = appendStr(dst, "parent_block_hash")
		dst = appendParent(dst, ev, f)
		dst = appendStr(dst, "token_ids")
		dst = appendTokens(dst, ev.TokenIDs)
		dst = appendStr(dst, "block_size")
		dst = appendUint(dst, ev.BlockSize)
		dst = appendStr(dst, "lora_id")
		dst = appendLoraID(dst, ev)
		dst = appendStr(dst, "medium")
		dst = appendStrOrNil(dst, ev.Medium)
		dst = appendStr(dst, "lora_name")
		dst = appendStrOrNil(dst, ev.LoraName)
		if ev.ExtraKeys != nil {
			dst = appendStr(dst, "extra_keys")
			dst = append(dst, ev.ExtraKeys...)
		}
		if ev.HasGroupIdx {
			dst = appendStr(dst, "group_idx")
			dst = appendUint(dst, ev.GroupIdx)
		}
		if ev.SpecKind != nil {
			dst = appendStr(dst, "kv_cache_spec_kind")
			dst = appendStrOrNil(dst, ev.SpecKind)
		}
		if ev.SlidingWindow != 0 {
			dst = appendStr(dst, "kv_cache_spec_sliding_window")
			dst = appendUint(dst, ev.SlidingWindow)
		}
	case engine.KindRemoved:
		n := 3
		if ev.HasGroupIdx {
			n++
		}
		dst = appendMap(dst, n)
		dst = appendStr(dst, "type")
		dst = appendStr(dst, "BlockRemoved")
		dst = appendStr(dst, "block_hashes")
		dst = appendHashes(dst, ev.BlockHashes, f)
		dst = appendStr(dst, "medium")
		dst = appendStrOrNil(dst, ev.Medium)
		if ev.HasGroupIdx {
			dst = appendStr(dst, "group_idx")
			dst = appendUint(dst, ev.GroupIdx)
		}
	default:
		dst = appendMap(dst, 1)
		dst = appendStr(dst, "type")
		dst = appendStr(dst, "AllBlocksCleared")
	}
	return dst
}

func appendHashes(dst []byte, hs []uint64, f Format) []byte {
	dst = appendArray(dst, len(hs))
	for _, h := range hs {
		dst = appendHash(dst, h, f)
	}
	return dst
}

func appendHash(dst []byte, h uint64, f Format) []byte {
	switch {
	case f.BinHashes:
		dst = append(dst, 0xc4, 8)
		return binary.BigEndian.AppendUint64(dst, h)
	case f.SignedHashes:
		return appendInt(dst, int64(h))
	}
	return appendUint(dst, h)
}

func appendParent(dst []byte, ev *engine.Event, f Format) []byte {
	if !ev.HasParent {
		return append(dst, 0xc0)
	}
	return appendHash(dst, ev.Parent, f)
}

func appendTokens(dst []byte, ts []uint32) []byte {
	dst = appendArray(dst, len(ts))
	for _, t := range ts {
		dst = appendUint(dst, uint64(t))
	}
	return dst
}

func appendLoraID(dst []byte, ev *engine.Event) []byte {
	if !ev.HasLoraID {
		return append(dst, 0xc0)
	}
	return appendInt(dst, ev.LoraID)
}

func appendGroup(dst []byte, ev *engine.Event) []byte {
	if !ev.HasGroupIdx {
		return append(dst, 0xc0)
	}
	return appendUint(dst, ev.GroupIdx)
}

func appendWindow(dst []byte, ev *engine.Event) []byte {
	if ev.SlidingWindow == 0 {
		return append(dst, 0xc0)
	}
	return appendUint(dst, ev.SlidingWindow)
}

func appendRawOrNil(dst, raw []byte) []byte {
	if raw == nil {
		return append(dst, 0xc0)
	}
	return append(dst, raw...)
}

func appendStrOrNil(dst, s []byte) []byte {
	if s == nil {
		return append(dst, 0xc0)
	}
	return appendStr(dst, string(s))
}

// The helpers below use msgspec's smallest forms.

func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= 0xff:
		return append(dst, 0xcc, byte(v))
	case v <= 0xffff:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(v))
	case v <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
}

func appendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
}

func appendStr(dst []byte, s string) []byte {
	switch n := len(s); {
	case n <= 31:
		dst = append(dst, 0xa0|byte(n))
	case n <= 0xff:
		dst = append(dst, 0xd9, byte(n))
	case n <= 0xffff:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}

func appendArray(dst []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(dst, 0x90|byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
}

func appendMap(dst []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(dst, 0x80|byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(dst, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdf), uint32(n))
}
