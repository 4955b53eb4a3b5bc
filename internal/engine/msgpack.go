package engine

import (
	"encoding/binary"
	"math"
)

// reader is a bounds-checked msgpack cursor over one payload. Every method
// returns ok=false instead of panicking on short or ill-typed input; the
// caller turns that into a DecodeError carrying r.off. Strings and binaries
// are returned as views into the payload (no copies).
type reader struct {
	b   []byte
	off int
}

// maxSkipDepth bounds nesting when skipping values we do not interpret, so
// a hostile payload of nested arrays cannot exhaust the stack.
const maxSkipDepth = 32

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) peek() (byte, bool) {
	if r.off >= len(r.b) {
		return 0, false
	}
	return r.b[r.off], true
}

func (r *reader) take(n int) ([]byte, bool) {
	if n < 0 || n > r.remaining() {
		return nil, false
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, true
}

func (r *reader) be(n int) (uint64, bool) {
	s, ok := r.take(n)
	if !ok {
		return 0, false
	}
	switch n {
	case 1:
		return uint64(s[0]), true
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), true
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), true
	default:
		return binary.BigEndian.Uint64(s), true
	}
}

// isNil consumes a nil if one is next.
func (r *reader) isNil() bool {
	if c, ok := r.peek(); ok && c == 0xc0 {
		r.off++
		return true
	}
	return false
}

// arrayLen reads an array header. The count is checked against the bytes
// left (each element takes at least one), so callers may size buffers by it.
func (r *reader) arrayLen() (int, bool) { return r.containerLen(0x90, 0xdc, 0xdd, 1) }

// mapLen reads a map header; the count is checked like arrayLen's (two
// bytes per entry at least).
func (r *reader) mapLen() (int, bool) { return r.containerLen(0x80, 0xde, 0xdf, 2) }

// containerLen reads an array or map header: fix is the fix-size family's
// first byte (16 of them), w16 and w32 the 16- and 32-bit length markers,
// and minBytes what one entry takes at least.
func (r *reader) containerLen(fix, w16, w32 byte, minBytes uint64) (int, bool) {
	c, ok := r.peek()
	if !ok {
		return 0, false
	}
	var n uint64
	switch {
	case c >= fix && c <= fix+0x0f:
		r.off++
		n = uint64(c & 0x0f)
	case c == w16:
		r.off++
		n, ok = r.be(2)
	case c == w32:
		r.off++
		n, ok = r.be(4)
	default:
		return 0, false
	}
	if !ok || minBytes*n > uint64(r.remaining()) {
		return 0, false
	}
	return int(n), true
}

func (r *reader) isArray() bool {
	c, ok := r.peek()
	return ok && (c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd)
}

func (r *reader) isMap() bool {
	c, ok := r.peek()
	return ok && (c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf)
}

// str reads a str value as a view.
func (r *reader) str() ([]byte, bool) {
	c, ok := r.peek()
	if !ok {
		return nil, false
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		r.off++
		n = uint64(c & 0x1f)
	case c == 0xd9:
		r.off++
		n, ok = r.be(1)
	case c == 0xda:
		r.off++
		n, ok = r.be(2)
	case c == 0xdb:
		r.off++
		n, ok = r.be(4)
	default:
		return nil, false
	}
	if !ok || n > uint64(r.remaining()) {
		return nil, false
	}
	return r.take(int(n))
}

// strOrNil reads a str or nil (nil → nil slice, present=false).
func (r *reader) strOrNil() (s []byte, present, ok bool) {
	if r.isNil() {
		return nil, false, true
	}
	s, ok = r.str()
	return s, true, ok
}

// bin reads a bin value as a view.
func (r *reader) bin() ([]byte, bool) {
	c, ok := r.peek()
	if !ok {
		return nil, false
	}
	var n uint64
	switch c {
	case 0xc4:
		r.off++
		n, ok = r.be(1)
	case 0xc5:
		r.off++
		n, ok = r.be(2)
	case 0xc6:
		r.off++
		n, ok = r.be(4)
	default:
		return nil, false
	}
	if !ok || n > uint64(r.remaining()) {
		return nil, false
	}
	return r.take(int(n))
}

// intBits reads any msgpack integer, width-agnostic, and returns its 64
// bits (two's complement for negatives) and whether it was negative.
func (r *reader) intBits() (v uint64, neg, ok bool) {
	c, ok := r.peek()
	if !ok {
		return 0, false, false
	}
	switch {
	case c <= 0x7f:
		r.off++
		return uint64(c), false, true
	case c >= 0xe0:
		r.off++
		return uint64(int64(int8(c))), true, true
	}
	r.off++
	switch c {
	case 0xcc:
		v, ok = r.be(1)
	case 0xcd:
		v, ok = r.be(2)
	case 0xce:
		v, ok = r.be(4)
	case 0xcf:
		v, ok = r.be(8)
	case 0xd0:
		v, ok = r.be(1)
		v = uint64(int64(int8(v)))
	case 0xd1:
		v, ok = r.be(2)
		v = uint64(int64(int16(v)))
	case 0xd2:
		v, ok = r.be(4)
		v = uint64(int64(int32(v)))
	case 0xd3:
		v, ok = r.be(8)
	default:
		r.off--
		return 0, false, false
	}
	return v, c >= 0xd0 && int64(v) < 0, ok
}

// uint reads a non-negative integer.
func (r *reader) uint() (uint64, bool) {
	v, neg, ok := r.intBits()
	return v, ok && !neg
}

// int reads a signed integer that fits int64.
func (r *reader) int() (int64, bool) {
	c, _ := r.peek()
	v, neg, ok := r.intBits()
	if !ok || (c == 0xcf && !neg && v > math.MaxInt64) {
		return 0, false
	}
	return int64(v), true
}

// float reads a float64 or float32 (and, tolerantly, an integer).
func (r *reader) float() (float64, bool) {
	c, ok := r.peek()
	if !ok {
		return 0, false
	}
	switch c {
	case 0xcb:
		r.off++
		v, ok := r.be(8)
		return math.Float64frombits(v), ok
	case 0xca:
		r.off++
		v, ok := r.be(4)
		return float64(math.Float32frombits(uint32(v))), ok
	}
	v, neg, ok := r.intBits()
	if neg {
		return float64(int64(v)), ok
	}
	return float64(v), ok
}

// hash reads an engine hash (spec §2.7) normalised to u64: ints by two's
// complement, bins by their last 8 bytes big-endian (left-padded when
// shorter).
func (r *reader) hash() (uint64, bool) {
	c, ok := r.peek()
	if !ok {
		return 0, false
	}
	if c == 0xc4 || c == 0xc5 || c == 0xc6 {
		b, ok := r.bin()
		if !ok {
			return 0, false
		}
		if len(b) > 8 {
			b = b[len(b)-8:]
		}
		var v uint64
		for _, x := range b {
			v = v<<8 | uint64(x)
		}
		return v, true
	}
	v, _, ok := r.intBits()
	return v, ok
}

// skip consumes one value of any type.
func (r *reader) skip() bool { return r.skipDepth(0) }

func (r *reader) skipDepth(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	c, ok := r.peek()
	if !ok {
		return false
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		r.off++
		return true
	case c >= 0xa0 && c <= 0xbf, c == 0xd9, c == 0xda, c == 0xdb:
		_, ok = r.str()
		return ok
	case c == 0xc4 || c == 0xc5 || c == 0xc6:
		_, ok = r.bin()
		return ok
	case c >= 0x90 && c <= 0x9f, c == 0xdc, c == 0xdd:
		n, ok := r.arrayLen()
		if !ok {
			return false
		}
		for range n {
			if !r.skipDepth(depth + 1) {
				return false
			}
		}
		return true
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		n, ok := r.mapLen()
		if !ok {
			return false
		}
		for range 2 * n {
			if !r.skipDepth(depth + 1) {
				return false
			}
		}
		return true
	}
	r.off++
	var n uint64
	switch c {
	case 0xcc, 0xd0:
		n = 1
	case 0xcd, 0xd1:
		n = 2
	case 0xce, 0xd2, 0xca:
		n = 4
	case 0xcf, 0xd3, 0xcb:
		n = 8
	case 0xd4:
		n = 2
	case 0xd5:
		n = 3
	case 0xd6:
		n = 5
	case 0xd7:
		n = 9
	case 0xd8:
		n = 17
	case 0xc7:
		l, ok := r.be(1)
		if !ok {
			return false
		}
		n = l + 1
	case 0xc8:
		l, ok := r.be(2)
		if !ok {
			return false
		}
		n = l + 1
	case 0xc9:
		l, ok := r.be(4)
		if !ok {
			return false
		}
		n = l + 1
	default: // 0xc1 is never used
		return false
	}
	if n > uint64(r.remaining()) {
		return false
	}
	r.off += int(n)
	return true
}
