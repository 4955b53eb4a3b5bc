package kvrelay_test

import (
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// The consumer runs CheckFilterUpdate on every frame; for a delta of 1 000
// images it validates the envelope and key and decodes every image.
func BenchmarkCheckFilterUpdateDelta1000(b *testing.B) {
	key, f := frameFixture(b)
	images := make([]cbi1.Image, 1000)
	for i := range images {
		images[i] = cbi1.Image{Bucket: uint32(i % 64), Word: uint64(i)}
	}
	payload, err := cbi1.AppendDelta(nil, f, key.DcID, 4, 5, images)
	if err != nil {
		b.Fatal(err)
	}
	u := update(kindDelta, 4, 5, payload)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := kvrelay.CheckFilterUpdate(key, u); err != nil {
			b.Fatal(err)
		}
	}
}
