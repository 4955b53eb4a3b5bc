package wire

import (
	"encoding/binary"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The msgpack subset used here, written by hand: positional arrays, unsigned
// integers, bins and strings, each in its smallest encoding. The appenders
// produce the same bytes as msgpack.Encoder's EncodeArrayLen, EncodeUint,
// EncodeBytes and EncodeString (checked in msgpack_compat_test.go); the reader
// refuses every other encoding, which keeps encodings unique and lets the hot
// path run without reflection, interfaces or allocations. msgpack.Decoder's
// DecodeUint64 would accept nil, negative and non-minimal integers, and its
// DecodeBytes copies, hence the reader below.

func appendArrayLen(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, msgpcode.FixedArrayLow|byte(n))
	case n <= 0xffff:
		return append(dst, msgpcode.Array16, byte(n>>8), byte(n))
	default:
		return binary.BigEndian.AppendUint32(append(dst, msgpcode.Array32), uint32(n))
	}
}

func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v <= uint64(msgpcode.PosFixedNumHigh):
		return append(dst, byte(v))
	case v <= 0xff:
		return append(dst, msgpcode.Uint8, byte(v))
	case v <= 0xffff:
		return append(dst, msgpcode.Uint16, byte(v>>8), byte(v))
	case v <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(dst, msgpcode.Uint32), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(dst, msgpcode.Uint64), v)
	}
}

func appendBinLen(dst []byte, n int) []byte {
	switch {
	case n <= 0xff:
		return append(dst, msgpcode.Bin8, byte(n))
	case n <= 0xffff:
		return append(dst, msgpcode.Bin16, byte(n>>8), byte(n))
	default:
		return binary.BigEndian.AppendUint32(append(dst, msgpcode.Bin32), uint32(n))
	}
}

func appendBin(dst, b []byte) []byte {
	return append(appendBinLen(dst, len(b)), b...)
}

func appendStr(dst []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		dst = append(dst, msgpcode.FixedStrLow|byte(n))
	case n <= 0xff:
		dst = append(dst, msgpcode.Str8, byte(n))
	case n <= 0xffff:
		dst = append(dst, msgpcode.Str16, byte(n>>8), byte(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, msgpcode.Str32), uint32(n))
	}
	return append(dst, s...)
}

// reader walks one input buffer. Methods take the field path used in errors;
// callers pass constants so the success path does not allocate.
type reader struct {
	b   []byte
	off int
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) code(field string) (byte, error) {
	if r.off >= len(r.b) {
		return 0, decodeErr(ErrTruncated, field, "input ends at byte %d", r.off)
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// take returns the next n bytes without copying. n comes from the input, so
// it is compared with what is left before anything else uses it.
func (r *reader) take(n uint64, field string) ([]byte, error) {
	if n > uint64(r.remaining()) {
		return nil, decodeErr(ErrTruncated, field, "need %d bytes at byte %d, %d left", n, r.off, r.remaining())
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p, nil
}

// be reads an n-byte big-endian unsigned number (n ∈ {1,2,4,8}).
func (r *reader) be(n uint64, field string) (uint64, error) {
	p, err := r.take(n, field)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), nil
	default:
		return binary.BigEndian.Uint64(p), nil
	}
}

// sized reads the payload of a sized code and refuses it unless it is larger
// than min, i.e. unless the smaller encoding could not have held it.
func (r *reader) sized(width, min uint64, field, what string) (uint64, error) {
	v, err := r.be(width, field)
	if err != nil {
		return 0, err
	}
	if v <= min {
		return 0, decodeErr(ErrMalformed, field, "non-minimal %s encoding of %d", what, v)
	}
	return v, nil
}

func (r *reader) uint(field string) (uint64, error) {
	c, err := r.code(field)
	if err != nil {
		return 0, err
	}
	switch {
	case c <= msgpcode.PosFixedNumHigh:
		return uint64(c), nil
	case c == msgpcode.Uint8:
		return r.sized(1, uint64(msgpcode.PosFixedNumHigh), field, "integer")
	case c == msgpcode.Uint16:
		return r.sized(2, 0xff, field, "integer")
	case c == msgpcode.Uint32:
		return r.sized(4, 0xffff, field, "integer")
	case c == msgpcode.Uint64:
		return r.sized(8, 0xffffffff, field, "integer")
	}
	return 0, decodeErr(ErrMalformed, field, "want unsigned integer, got msgpack code 0x%02x", c)
}

func (r *reader) arrayLen(field string) (uint64, error) {
	c, err := r.code(field)
	if err != nil {
		return 0, err
	}
	switch {
	case c >= msgpcode.FixedArrayLow && c <= msgpcode.FixedArrayHigh:
		return uint64(c & 0x0f), nil
	case c == msgpcode.Array16:
		return r.sized(2, 15, field, "array length")
	case c == msgpcode.Array32:
		return r.sized(4, 0xffff, field, "array length")
	}
	return 0, decodeErr(ErrMalformed, field, "want array, got msgpack code 0x%02x", c)
}

// array reads an array header that must announce exactly n elements.
func (r *reader) array(n uint64, field string) error {
	got, err := r.arrayLen(field)
	if err != nil {
		return err
	}
	if got != n {
		return decodeErr(ErrMalformed, field, "array of %d elements, want %d", got, n)
	}
	return nil
}

// bin reads a bin of at most max bytes, aliasing the input.
func (r *reader) bin(max uint64, field string) ([]byte, error) {
	c, err := r.code(field)
	if err != nil {
		return nil, err
	}
	var n uint64
	switch c {
	case msgpcode.Bin8:
		n, err = r.be(1, field)
	case msgpcode.Bin16:
		n, err = r.sized(2, 0xff, field, "bin length")
	case msgpcode.Bin32:
		n, err = r.sized(4, 0xffff, field, "bin length")
	default:
		return nil, decodeErr(ErrMalformed, field, "want bin, got msgpack code 0x%02x", c)
	}
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, decodeErr(ErrTooLarge, field, "bin of %d bytes, limit %d", n, max)
	}
	return r.take(n, field)
}

// str reads a valid UTF-8 string of 1..max bytes, aliasing the input.
func (r *reader) str(max uint64, field string) ([]byte, error) {
	c, err := r.code(field)
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c >= msgpcode.FixedStrLow && c <= msgpcode.FixedStrHigh:
		n = uint64(c & 0x1f)
	case c == msgpcode.Str8:
		n, err = r.sized(1, 31, field, "string length")
	case c == msgpcode.Str16:
		n, err = r.sized(2, 0xff, field, "string length")
	case c == msgpcode.Str32:
		n, err = r.sized(4, 0xffff, field, "string length")
	default:
		return nil, decodeErr(ErrMalformed, field, "want string, got msgpack code 0x%02x", c)
	}
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, decodeErr(ErrTooLarge, field, "string of %d bytes, limit %d", n, max)
	}
	p, err := r.take(n, field)
	if err != nil {
		return nil, err
	}
	if err := checkTextBytes(p, field); err != nil {
		return nil, err
	}
	return p, nil
}

// checkText accepts non-empty valid UTF-8 without control characters: the
// strings carried here are ids and names that end up in logs.
func checkText(s string, field string) error {
	if s == "" {
		return decodeErr(ErrMalformed, field, "empty string")
	}
	if !utf8.ValidString(s) {
		return decodeErr(ErrMalformed, field, "invalid UTF-8")
	}
	return checkControl(s, field)
}

// checkTextBytes is checkText for a slice of the input.
func checkTextBytes(p []byte, field string) error {
	if len(p) == 0 {
		return decodeErr(ErrMalformed, field, "empty string")
	}
	if !utf8.Valid(p) {
		return decodeErr(ErrMalformed, field, "invalid UTF-8")
	}
	return checkControl(p, field)
}

// checkControl refuses C0 controls, DEL and C1 controls (U+0080..U+009F,
// which valid UTF-8 spells 0xC2 0x80..0x9F). The input is valid UTF-8.
func checkControl[T string | []byte](s T, field string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f || (c == 0xc2 && i+1 < len(s) && s[i+1] < 0xa0) {
			return decodeErr(ErrMalformed, field, "control character at byte %d", i)
		}
	}
	return nil
}

// setString stores p in *s, reusing the current string when equal (the
// comparison does not allocate) so repeated decodes of one relay's traffic
// stay allocation-free.
func setString(s *string, p []byte) {
	if string(p) != *s {
		*s = string(p)
	}
}

// end refuses trailing bytes.
func (r *reader) end() error {
	if r.off != len(r.b) {
		return decodeErr(ErrTrailingBytes, "message", "%d bytes after the message end at byte %d", len(r.b)-r.off, r.off)
	}
	return nil
}
