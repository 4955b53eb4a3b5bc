package engine

import (
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
)

const (
	h1 = 0x1111111111111111
	h2 = 0xF2F2F2F2F2F2F2F2
	h3 = 0x3333333333333333
	ts = 1757500000.25
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wrap puts single events into a G5 batch envelope [ts, [evs...], 0].
func wrap(t testing.TB, evs ...string) []byte {
	t.Helper()
	out := unhex(t, "93cb41da305498100000")
	out = append(out, 0x90|byte(len(evs)))
	for _, e := range evs {
		out = append(out, unhex(t, e)...)
	}
	return append(out, 0x00)
}

// describe renders an event so nil and empty slices compare equal and
// byte views print as strings.
func describe(e Event) string {
	return fmt.Sprintf("%v hashes=%x parent=%v/%x tokens=%v bs=%d lora_id=%v/%d medium=%q lora=%q extra=%x group=%v/%d kind=%q window=%d salt=%q locality=%q",
		e.Kind, e.BlockHashes, e.HasParent, e.Parent, e.TokenIDs, e.BlockSize, e.HasLoraID, e.LoraID,
		e.Medium, e.LoraName, e.ExtraKeys, e.HasGroupIdx, e.GroupIdx, e.SpecKind, e.SlidingWindow, e.CacheSalt, e.Locality)
}

var (
	wantV1 = Event{Kind: KindStored, BlockHashes: []uint64{h1, h2}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8},
		BlockSize: 4, Medium: []byte("GPU")}
	wantV2 = Event{Kind: KindStored, BlockHashes: []uint64{h3}, HasParent: true, Parent: h2,
		TokenIDs: []uint32{9, 10, 11, 12}, BlockSize: 4, HasLoraID: true, LoraID: 7, Medium: []byte("CPU"),
		LoraName: []byte("adapter-a"), ExtraKeys: append([]byte{0x91, 0x91, 0xa9}, "adapter-a"...),
		HasGroupIdx: true, GroupIdx: 1, SpecKind: []byte("sliding_window"), SlidingWindow: 128}
	wantV3 = Event{Kind: KindStored, BlockHashes: []uint64{h1, h2}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8},
		BlockSize: 4, Medium: []byte("GPU"), ExtraKeys: []byte{0x92, 0xc0, 0xc0}, HasGroupIdx: true,
		SpecKind: []byte("full_attention")}
	wantV5 = Event{Kind: KindRemoved, BlockHashes: []uint64{h1, h2}, Medium: []byte("GPU"), HasGroupIdx: true}
	wantV6 = Event{Kind: KindCleared}
	wantV7 = Event{Kind: KindRemoved, BlockHashes: []uint64{0x18191a1b1c1d1e1f}, Medium: []byte("GPU"), HasGroupIdx: true}
	wantV8 = Event{Kind: KindStored, BlockHashes: []uint64{0xeeddef0b82167eeb}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4}
)

func TestSpecVectorsSingleEvents(t *testing.T) {
	g5V1 := "9c" + v1Hex[2:] + "c0c0c0c0c0"
	cases := []struct {
		name string
		hex  string
		want Event
	}{
		{"V1 array G2", v1Hex, wantV1},
		{"V1 array G5", g5V1, wantV1},
		{"V2 array G5", v2Hex, wantV2},
		{"V3 map G6", v3Hex, wantV3},
		{"V4 map G6", v4Hex, wantV2},
		{"V5 array", v5ArrayHex, wantV5},
		{"V5 map", v5MapHex, wantV5},
		{"V6 array", v6ArrayHex, wantV6},
		{"V6 map", v6MapHex, wantV6},
		{"V7 map bin hash", v7Hex, wantV7},
		{"V8 array G0 signed hash", v8Hex, wantV8},
	}
	var d Decoder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := d.Decode(wrap(t, c.hex))
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Events) != 1 || b.UnknownEvents != 0 || b.BadEvents != 0 || b.UnknownFields != 0 {
				t.Fatalf("events=%d unknown=%d bad=%d unknownFields=%d", len(b.Events), b.UnknownEvents, b.BadEvents, b.UnknownFields)
			}
			if got, want := describe(b.Events[0]), describe(c.want); got != want {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
			if !b.HasDPRank || b.DPRank != 0 || b.TS != ts {
				t.Fatalf("envelope ts=%v rank=%v/%d", b.TS, b.HasDPRank, b.DPRank)
			}
		})
	}
}

func TestSpecVectorsBatches(t *testing.T) {
	cases := []struct {
		name     string
		hex      string
		hasRank  bool
		want     []Event
		byteSize int
	}{
		{"B0 v0.9.0 two-element envelope", b0Hex, false, []Event{wantV8}, 42},
		{"B1 array events", b1Hex, true, []Event{wantV2, wantV5, wantV6}, 151},
		{"B2 map events", b2Hex, true, []Event{wantV2, wantV5, wantV6}, 342},
		{"B3 map envelope", b3Hex, true, []Event{wantV6}, 64},
		{"empty batch nil rank", "93cb41da30549810000090c0", false, nil, 12},
	}
	var d Decoder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := unhex(t, c.hex)
			if len(raw) != c.byteSize {
				t.Fatalf("vector is %d bytes, spec says %d", len(raw), c.byteSize)
			}
			b, err := d.Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			if b.TS != ts || b.HasDPRank != c.hasRank || b.DPRank != 0 {
				t.Fatalf("envelope ts=%v rank=%v/%d", b.TS, b.HasDPRank, b.DPRank)
			}
			if len(b.Events) != len(c.want) {
				t.Fatalf("got %d events, want %d", len(b.Events), len(c.want))
			}
			for i := range c.want {
				if got, want := describe(b.Events[i]), describe(c.want[i]); got != want {
					t.Fatalf("event %d\ngot  %s\nwant %s", i, got, want)
				}
			}
		})
	}
}

func TestUnknownEventsAndFieldsAreCountedNotFatal(t *testing.T) {
	// ["Mystery", 1], then V1 with two extra trailing elements, then a map
	// event with an unknown key and a G7 locality, then V6.
	mystery := "92a74d79737465727901"
	v1Extra := "99" + v1Hex[2:] + "c0c0"
	mapUnknown := "83a474797065b0416c6c426c6f636b73436c6561726564a3666f6f01a86c6f63616c697479a54c4f43414c"
	var d Decoder
	b, err := d.Decode(wrap(t, mystery, v1Extra, mapUnknown, v6ArrayHex))
	if err != nil {
		t.Fatal(err)
	}
	if b.UnknownEvents != 1 || b.UnknownFields != 1 || b.BadEvents != 0 {
		t.Fatalf("unknownEvents=%d unknownFields=%d bad=%d", b.UnknownEvents, b.UnknownFields, b.BadEvents)
	}
	if len(b.Events) != 3 {
		t.Fatalf("got %d events, want 3", len(b.Events))
	}
	if string(b.Events[1].Locality) != "LOCAL" || b.Events[1].Kind != KindCleared {
		t.Fatalf("map event decoded as %s", describe(b.Events[1]))
	}
	// Trailing elements past kv_cache_spec_sliding_window are counted too.
	if b2, err := d.Decode(wrap(t, "9d"+v1Hex[2:]+"c0c0c0c0c0c0")); err != nil || b2.UnknownFields != 1 {
		t.Fatalf("13-element store: err=%v unknownFields=%v", err, b2)
	}
}

func TestBadEventSkippedBatchKept(t *testing.T) {
	// A store whose token_ids is a string, between two good events.
	bad := "95ab426c6f636b53746f72656490c0a17804"
	var d Decoder
	b, err := d.Decode(wrap(t, v6ArrayHex, bad, v8Hex))
	if err != nil {
		t.Fatal(err)
	}
	if b.BadEvents != 1 || len(b.Events) != 2 || b.Events[1].Kind != KindStored {
		t.Fatalf("bad=%d events=%d", b.BadEvents, len(b.Events))
	}
	if got, want := describe(b.Events[1]), describe(wantV8); got != want {
		t.Fatalf("event after the bad one\ngot  %s\nwant %s", got, want)
	}
}

func TestHashEncodings(t *testing.T) {
	cases := []struct {
		hex  string
		want uint64
	}{
		{"ff", 0xffffffffffffffff},                       // negative fixint -1
		{"d0ff", 0xffffffffffffffff},                     // int8 -1
		{"d3eeddef0b82167eeb", 0xeeddef0b82167eeb},       // int64 negative
		{"cff2f2f2f2f2f2f2f2", 0xf2f2f2f2f2f2f2f2},       // uint64
		{"d30000000000000005", 5},                        // wide encoding of a small value
		{"c4020102", 0x0102},                             // short bin: left-padded
		{"c40a00000102030405060708", 0x0102030405060708}, // long bin: last 8
	}
	for _, c := range cases {
		r := reader{b: unhex(t, c.hex)}
		got, ok := r.hash()
		if !ok || got != c.want || r.remaining() != 0 {
			t.Errorf("%s: got %x ok=%v rest=%d, want %x", c.hex, got, ok, r.remaining(), c.want)
		}
	}
}

func TestMalformedBatches(t *testing.T) {
	cases := map[string]string{
		"empty":              "",
		"scalar envelope":    "01",
		"short array":        "91cb41da305498100000",
		"ts not number":      "93a090c0",
		"events not array":   "93cb41da30549810000001c0",
		"truncated":          "93cb41da30549810000091",
		"huge count":         "93cb41da305498100000ddffffffff",
		"trailing bytes":     "93cb41da30549810000090c000",
		"map without events": "81a27473cb41da305498100000",
		"rank not int":       "93cb41da30549810000090a0",
		"reserved c1":        "93cb41da30549810000091c1c0",
	}
	var d Decoder
	for name, h := range cases {
		if _, err := d.Decode(unhex(t, h)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err=%v, want ErrMalformed", name, err)
		}
	}
}
