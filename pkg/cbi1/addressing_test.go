package cbi1_test

import (
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// The addressing vectors of §8.3 (§5.4), checked against pkg/ckf: a consumer
// probes the words a cbi1.Assembler rebuilt with exactly this addressing, so
// the codec and the addressing must agree on the format they share.
func TestAddressingVectors(t *testing.T) {
	cases := []struct {
		h, seed, buckets uint64
		fp               uint16
		a, b             uint32
	}{
		{0x0123456789ABCDEF, 0x5DEECE66D1B54A33, 1024, 0x7d61, 903, 693},
		{99, 42, 1024, 0x5222, 718, 962},
		{0, 0x5EED, 16, 0x498e, 2, 8},
	}
	for _, c := range cases {
		f := mustFormat(t, c.seed, c.buckets)
		addr, err := ckf.NewAddressing(f.BucketCount(), f.Seed())
		if err != nil {
			t.Fatal(err)
		}
		p := addr.Prepare(c.h)
		if p.Fingerprint != c.fp || p.BucketA != c.a || p.BucketB != c.b {
			t.Errorf("h=%#x seed=%#x: %+v, want fp %#x a %d b %d", c.h, c.seed, p, c.fp, c.a, c.b)
		}
	}

	// End to end: a delta carrying the fingerprint in bucket_a, decoded and
	// applied, makes the hash present.
	f := mustFormat(t, 0x5DEECE66D1B54A33, 1024)
	addr, _ := ckf.NewAddressing(f.BucketCount(), f.Seed())
	p := addr.Prepare(0x0123456789ABCDEF)
	frame, err := cbi1.AppendDelta(nil, f, 1, 0, 1, []cbi1.Image{{Bucket: p.BucketA, Word: ckf.WithSlot(0, 2, p.Fingerprint)}})
	if err != nil {
		t.Fatal(err)
	}
	fr, err := cbi1.Decode(f, frame)
	if err != nil {
		t.Fatal(err)
	}
	lane := make([]uint64, f.BucketCount())
	if err := fr.Delta.ApplyTo(lane); err != nil {
		t.Fatal(err)
	}
	if !ckf.Contains(lane[p.BucketA], p.Fingerprint) || ckf.Contains(lane[p.BucketB], p.Fingerprint) {
		t.Fatal("applied image does not hold the fingerprint where addressing says")
	}
}
