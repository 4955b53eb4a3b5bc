package replay

import (
	"bytes"
	"testing"
)

// FuzzReadTrace: the trace reader never panics and every accepted request
// has at least one block.
func FuzzReadTrace(f *testing.F) {
	f.Add([]byte("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0, 1]}\n"))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		reqs, err := ReadTrace(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, r := range reqs {
			if len(r.HashIDs) == 0 {
				t.Fatal("accepted a request without blocks")
			}
		}
	})
}
