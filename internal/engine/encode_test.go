package engine_test

import (
	"encoding/hex"
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/engine"
	"github.com/ckfrelay/ckfrelay/internal/engine/enginetest"
)

const (
	h1 = 0x1111111111111111
	h2 = 0xF2F2F2F2F2F2F2F2
	h3 = 0x3333333333333333
	ts = 1757500000.25
)

var (
	v1 = engine.Event{Kind: engine.KindStored, BlockHashes: []uint64{h1, h2}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8},
		BlockSize: 4, Medium: []byte("GPU")}
	v2 = engine.Event{Kind: engine.KindStored, BlockHashes: []uint64{h3}, HasParent: true, Parent: h2,
		TokenIDs: []uint32{9, 10, 11, 12}, BlockSize: 4, HasLoraID: true, LoraID: 7, Medium: []byte("CPU"),
		LoraName: []byte("adapter-a"), ExtraKeys: append([]byte{0x91, 0x91, 0xa9}, "adapter-a"...),
		HasGroupIdx: true, GroupIdx: 1, SpecKind: []byte("sliding_window"), SlidingWindow: 128}
	v3 = engine.Event{Kind: engine.KindStored, BlockHashes: []uint64{h1, h2}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8},
		BlockSize: 4, Medium: []byte("GPU"), ExtraKeys: []byte{0x92, 0xc0, 0xc0}, HasGroupIdx: true,
		SpecKind: []byte("full_attention")}
	v5 = engine.Event{Kind: engine.KindRemoved, BlockHashes: []uint64{h1, h2}, Medium: []byte("GPU"), HasGroupIdx: true}
	v6 = engine.Event{Kind: engine.KindCleared}
	v8 = engine.Event{Kind: engine.KindStored, BlockHashes: []uint64{0xeeddef0b82167eeb}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4}
)

// TestEncoderIsByteExact checks the fake engine's encoder reproduces every
// §7 vector msgspec produced (V7's 32-byte digest has no u64 form to
// re-encode from and is covered by the decoder tests).
func TestEncoderIsByteExact(t *testing.T) {
	arr := enginetest.Format{}
	m := enginetest.Format{Map: true}
	cases := []struct {
		name string
		got  []byte
	}{
		{"V1", enginetest.AppendEvent(nil, &v1, enginetest.Format{StoredLen: 7})},
		{"V2", enginetest.AppendEvent(nil, &v2, arr)},
		{"V3", enginetest.AppendEvent(nil, &v3, m)},
		{"V4", enginetest.AppendEvent(nil, &v2, m)},
		{"V5a", enginetest.AppendEvent(nil, &v5, arr)},
		{"V5m", enginetest.AppendEvent(nil, &v5, m)},
		{"V6a", enginetest.AppendEvent(nil, &v6, arr)},
		{"V6m", enginetest.AppendEvent(nil, &v6, m)},
		{"V8", enginetest.AppendEvent(nil, &v8, enginetest.Format{StoredLen: 6, SignedHashes: true})},
		{"B0", enginetest.AppendBatch(nil, ts, 0, []engine.Event{v8}, enginetest.Format{StoredLen: 6, SignedHashes: true, NoRank: true})},
		{"B1", enginetest.AppendBatch(nil, ts, 0, []engine.Event{v2, v5, v6}, arr)},
		{"B2", enginetest.AppendBatch(nil, ts, 0, []engine.Event{v2, v5, v6}, m)},
	}
	for _, c := range cases {
		if got, want := hex.EncodeToString(c.got), engine.SpecVectors[c.name]; got != want {
			t.Errorf("%s:\ngot  %s\nwant %s", c.name, got, want)
		}
	}
}

// TestEncoderRoundTrip decodes what the encoder writes in every format.
func TestEncoderRoundTrip(t *testing.T) {
	formats := []enginetest.Format{
		{}, {Map: true}, {StoredLen: 6, NoRank: true}, {StoredLen: 8, BinHashes: true}, {StoredLen: 10, SignedHashes: true},
	}
	var d engine.Decoder
	for _, f := range formats {
		raw := enginetest.AppendBatch(nil, ts, 3, []engine.Event{v1, v5, v6, v8}, f)
		b, err := d.Decode(raw)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		if len(b.Events) != 4 || b.BadEvents+b.UnknownEvents+b.UnknownFields != 0 {
			t.Fatalf("%+v: %d events, bad=%d", f, len(b.Events), b.BadEvents)
		}
		if b.Events[3].BlockHashes[0] != v8.BlockHashes[0] || b.Events[0].BlockHashes[1] != h2 {
			t.Fatalf("%+v: hashes %x %x", f, b.Events[3].BlockHashes, b.Events[0].BlockHashes)
		}
		if b.HasDPRank == f.NoRank || (!f.NoRank && b.DPRank != 3) {
			t.Fatalf("%+v: rank %v/%d", f, b.HasDPRank, b.DPRank)
		}
	}
}
