package routerevent

import (
	"encoding/binary"
	"math/bits"
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
	v, next, ok := parseU64(d.b, d.i)
	if ok {
		d.i = next
	}
	return v, ok
}

// parseU64 is u64 at b[i:] with no whitespace before the number: it returns
// the value and the index just past the number.
func parseU64(b []byte, i int) (v uint64, next int, ok bool) {
	if i >= len(b) {
		return 0, 0, false
	}
	switch c := b[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		if n, ok := parseDigitsSWAR(b[i:], &v); ok {
			i += n
			break
		}
		// Near the end of the input: one digit at a time.
		v = 0
		for i < len(b) {
			c := b[i] - '0'
			if c > 9 {
				break
			}
			if v > (1<<64-1-uint64(c))/10 {
				return 0, 0, false
			}
			v = v*10 + uint64(c)
			i++
		}
	default:
		return 0, 0, false
	}
	if i < len(b) {
		switch c := b[i]; {
		case c == '.' || c == 'e' || c == 'E' || ('0' <= c && c <= '9'):
			return 0, 0, false
		}
	}
	return v, i, true
}

// pow10 holds 10^n for n < 16 (indexed with n&15 to drop the bounds check).
var pow10 = [16]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// parseDigitsSWAR reads the run of ASCII digits at the start of b (whose
// first byte is a digit) into *v, eight bytes per load with no loop: block
// hashes are 19–20 digits, so the whole run is two full words and the head
// of a third. It returns the run's length, or false when b is too short for
// the words it needs (the caller then reads byte by byte) or when the run
// does not fit a uint64 (the caller's byte loop reports that). *v is
// unspecified when it returns false.
func parseDigitsSWAR(b []byte, v *uint64) (int, bool) {
	if len(b) < 8 {
		return 0, false
	}
	w0 := binary.LittleEndian.Uint64(b)
	if n := digitRun(w0); n < 8 {
		*v = parseEightDigits(w0 << (64 - 8*n))
		return n, true
	}
	if len(b) < 16 {
		return 0, false
	}
	w1 := binary.LittleEndian.Uint64(b[8:])
	if n := digitRun(w1); n < 8 {
		*v = parseEightDigits(w0)*pow10[n&15] + parseEightDigits(w1<<(64-8*n))
		return 8 + n, true
	}
	if len(b) < 24 {
		return 0, false
	}
	w2 := binary.LittleEndian.Uint64(b[16:])
	n := digitRun(w2)
	if n > 4 {
		return 0, false // 21 digits or more: above 2^64-1
	}
	// Below 10^16 times at most 10^4, plus the tail: only a 20-digit run can
	// overflow, and the carry-out shows it.
	hi, lo := bits.Mul64(parseEightDigits(w0)*1e8+parseEightDigits(w1), pow10[n&15])
	sum, carry := bits.Add64(lo, parseEightDigits(w2<<(64-8*n)), 0)
	if hi|carry != 0 {
		return 0, false
	}
	*v = sum
	return 16 + n, true
}

// digitRun is how many of w's bytes (loaded little-endian, the first byte
// low) are ASCII digits before the first one that is not, 0–8. Per byte, the
// high nibble must be 3 and the low nibble plus 6 must not reach 16; the
// nibbles are added apart, so no carry crosses a byte.
func digitRun(w uint64) int {
	const nib = 0x0F0F0F0F0F0F0F0F
	bad := (w &^ nib) ^ 0x3030303030303030 | ((w&nib)+0x0606060606060606)&^nib
	return bits.TrailingZeros64(bad) >> 3
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
