package routerevent

import (
	"strconv"
	"testing"
)

// TestNumbersNearTheEndOfTheInputAreReadByteByByte: a number too close to
// the end of the input for parseDigitsSWAR's word loads is read one digit at
// a time; the scanner must still read it exactly, every digit (9 included)
// and up to 2^64-1, and leave only a number that overflows to the reference.
func TestNumbersNearTheEndOfTheInputAreReadByteByByte(t *testing.T) {
	for _, n := range []uint64{
		0, 9, 19, 90, 1234567, 99999999, 123456789, 999999999999999, 1234567890123456,
		9999999999999999999, 18446744073709551609, 18446744073709551614, 18446744073709551615,
	} {
		// worker_id last: only the closing brace follows the number, so
		// every length is read by the byte loop.
		in := []byte(`{"event":{"data":"cleared"},"worker_id":` + strconv.FormatUint(n, 10) + `}`)
		in = in[:len(in):len(in)]
		if _, tail, ok := parseU64(in, len(in)-len(strconv.FormatUint(n, 10))-1); !ok || tail != len(in)-1 {
			t.Fatalf("%d: parseU64 = (%d, %v), want the number up to the brace", n, tail, ok)
		}
		got, ok := fastOnly(nil, in)
		if !ok {
			t.Fatalf("%s: left to the reference decoder", in)
		}
		if len(got) != 1 || got[0].WorkerID != n || got[0].Event.Data.Kind != EventCleared {
			t.Fatalf("%s: %+v", in, got)
		}
		checkAgainstReference(t, in)
	}
	for _, over := range []string{"18446744073709551616", "18446744073709551620", "18446744073709551700", "99999999999999999999"} {
		in := []byte(`{"event":{"data":"cleared"},"worker_id":` + over + `}`)
		in = in[:len(in):len(in)]
		if _, ok := fastOnly(nil, in); ok {
			t.Fatalf("%s: the scanner accepted a worker_id above 2^64-1", in)
		}
		if _, err := checkAgainstReference(t, in); err == nil {
			t.Fatalf("%s: accepted", in)
		}
	}
}

// TestCompactBlocksCutAtEveryByte: a stored event in the compact form, cut
// after every byte, is never read past its end (the input has no spare
// capacity) and decodes or fails as the reference does; the whole event is
// the scanner's.
func TestCompactBlocksCutAtEveryByte(t *testing.T) {
	const h = "12124091508212882195"
	for _, blocks := range []string{
		`{"block_hash":1,"tokens_hash":2}`,
		`{"block_hash":` + h + `,"tokens_hash":` + h + `,"mm_extra_info":null},{"block_hash":3,"tokens_hash":4}`,
	} {
		full := `{"worker_id":1,"event":{"data":{"stored":{"blocks":[` + blocks + `]}}}}`
		if _, ok := fastOnly(nil, []byte(full)); !ok {
			t.Fatalf("%s: left to the reference decoder", full)
		}
		for n := range len(full) {
			checkAgainstReference(t, []byte(full[:n]))
		}
	}
}
