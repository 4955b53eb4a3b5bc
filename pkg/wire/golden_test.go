package wire

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// goldenDelta is testDelta's encoding, written out by hand from the layout in
// doc.go (same images as the spec's CBI1 vector, §18.8). If it changes, the
// wire format changed: bump WireVersion instead of editing this.
var goldenDelta = strings.Join([]string{
	"97",   // array of 7
	"01",   // wire version 1
	"01",   // kind delta
	"98",   // identity: array of 8
	"c410", // cache semantics digest, bin 16
	"0102030405060708090a0b0c0d0e0f10",
	"01",   // source explicit
	"c410", // routing scope digest
	"1112131415161718191a1b1c1d1e1f20",
	"00",             // source default_derived
	"07",             // dc id 7
	"02",             // producer incarnation 2
	"01",             // layout generation 1
	"95",             // format: array of 5
	"01",             // format version 1
	"cd5eed",         // seed 0x5EED (uint16)
	"cd0400",         // bucket count 1024 (uint16)
	"10",             // fingerprint bits 16
	"04",             // slots per bucket 4
	"92", "03", "a2", // lease: [epoch 3, "r1"]
	"7231",
	"04",                           // base sequence 4
	"05",                           // sequence 5
	"c418",                         // images, bin 24
	"03000000", "ddddccccbbbbaaaa", // bucket 3, 0xAAAABBBBCCCCDDDD
	"e8030000", "2a00000000000000", // bucket 1000, 42
}, "")

func TestGoldenDelta(t *testing.T) {
	want, err := hex.DecodeString(goldenDelta)
	if err != nil {
		t.Fatal(err)
	}
	d := testDelta()
	got, err := AppendDelta(nil, &d)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding drifted:\n got %x\nwant %x", got, want)
	}
	back, err := DecodeDelta(want)
	if err != nil {
		t.Fatal(err)
	}
	if back.Identity != d.Identity || back.Lease != d.Lease || len(back.Images) != 2 || back.Images[1] != d.Images[1] {
		t.Fatalf("golden decodes to %+v", back)
	}
}
