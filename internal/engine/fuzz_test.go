package engine

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzDecode checks the batch decoder never panics, and that whatever it
// accepts is well-formed msgpack by an independent decoder and yields
// events whose slices fit in the payload.
func FuzzDecode(f *testing.F) {
	for _, h := range []string{b0Hex, b1Hex, b2Hex, b3Hex, "93cb41da30549810000090c0"} {
		f.Add(unhex(f, h))
	}
	for _, h := range []string{v1Hex, v2Hex, v3Hex, v4Hex, v5ArrayHex, v5MapHex, v6ArrayHex, v6MapHex, v7Hex, v8Hex} {
		f.Add(wrap(f, h))
	}
	var d Decoder
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := d.Decode(payload)
		if err != nil {
			return
		}
		if err := msgpack.NewDecoder(bytes.NewReader(payload)).Skip(); err != nil {
			t.Fatalf("accepted a payload msgpack rejects: %v", err)
		}
		if len(b.Events) > len(payload) {
			t.Fatalf("%d events from %d bytes", len(b.Events), len(payload))
		}
		for _, ev := range b.Events {
			if ev.Kind < KindStored || ev.Kind > KindCleared {
				t.Fatalf("event with kind %v accepted", ev.Kind)
			}
			if len(ev.BlockHashes)+len(ev.TokenIDs) > len(payload) {
				t.Fatalf("event larger than its payload")
			}
		}
	})
}
