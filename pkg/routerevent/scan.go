package routerevent

import (
	"encoding/binary"
	"strings"
)

// The fast decoder's lexical primitives: strings, keys, numbers, literals,
// skipping ignored values and whitespace. Each returns false for "not
// certain", never for "invalid" (see fastDecoder).

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

// keyOr is key, but first tries lit (a key with its quotes and colon, as
// canonical encoders write it) verbatim: one compare instead of a scan
// byte by byte, for the keys every block repeats.
func (d *fastDecoder) keyOr(lit string) ([]byte, bool) {
	d.ws()
	if n := len(lit); len(d.b)-d.i >= n && string(d.b[d.i:d.i+n]) == lit {
		k := d.b[d.i+1 : d.i+n-2]
		d.i += n
		return k, true
	}
	return d.key()
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
		// Block hashes are 19–20 digits: take the first 16 eight at a
		// time (below 10^16, so no overflow), the rest one at a time.
		for n := 0; n < 16 && len(b)-i >= 8; n += 8 {
			w := binary.LittleEndian.Uint64(b[i:])
			if !eightDigits(w) {
				break
			}
			v = v*1e8 + parseEightDigits(w)
			i += 8
		}
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

// eightDigits reports whether all 8 bytes of w (little-endian) are ASCII
// digits: each high nibble is 3, and adding 6 carries no low nibble into it.
func eightDigits(w uint64) bool {
	return (w&0xF0F0F0F0F0F0F0F0)|((w+0x0606060606060606)&0xF0F0F0F0F0F0F0F0)>>4 == 0x3333333333333333
}

// parseEightDigits is the value of 8 ASCII digits loaded little-endian (the
// first digit in the low byte): pairs, then quads, then the whole, each
// step one multiply that combines neighbours as high*10^k + low.
func parseEightDigits(w uint64) uint64 {
	w = (w & 0x0F0F0F0F0F0F0F0F) * (10<<8 + 1) >> 8
	w = (w & 0x00FF00FF00FF00FF) * (100<<16 + 1) >> 16
	return (w & 0x0000FFFF0000FFFF) * (10000<<32 + 1) >> 32
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
	// Every JSON whitespace byte is ≤ ' ': one compare settles the usual
	// case, no whitespace at all.
	for d.i < len(d.b) && d.b[d.i] <= ' ' {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}
