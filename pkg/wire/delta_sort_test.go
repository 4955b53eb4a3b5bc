package wire

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// TestSortedImagesEqualsAStableSort: for every length around the
// insertion/radix switch, bucket ranges needing one to six radix passes,
// repeated buckets and already sorted input, sortedImages returns what a
// stable comparison sort returns and never touches the caller's slice.
func TestSortedImagesEqualsAStableSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 3000 {
		n := rng.IntN(3 * insertionSortMax)
		if iter%10 == 0 {
			n = rng.IntN(5000)
		}
		span := uint64(1) << (1 + rng.IntN(63))
		in := make([]ckf.BucketImage, n)
		for i := range in {
			in[i] = ckf.BucketImage{Bucket: rng.Uint64N(span), Value: uint64(i)}
		}
		if iter%7 == 0 {
			slices.SortStableFunc(in, func(a, b ckf.BucketImage) int { return cmp.Compare(a.Bucket, b.Bucket) })
		}
		orig := slices.Clone(in)
		want := slices.Clone(in)
		slices.SortStableFunc(want, func(a, b ckf.BucketImage) int { return cmp.Compare(a.Bucket, b.Bucket) })
		got := sortedImages(in)
		if !slices.Equal(got, want) {
			t.Fatalf("iter %d (n=%d span=%d): sorted %v, want %v", iter, n, span, got, want)
		}
		if !slices.Equal(in, orig) {
			t.Fatalf("iter %d: the caller's images were reordered", iter)
		}
		if n > 0 && &got[0] == &in[0] {
			t.Fatalf("iter %d: result aliases the caller's slice", iter)
		}
	}
}

// BenchmarkNewDelta: one relay delta of 1,000 images in touch (random)
// order over a 4,194,304-bucket lane.
func BenchmarkNewDelta(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	d := ckf.Delta{BaseSequence: 1, Sequence: 2, Images: make([]ckf.BucketImage, 1000)}
	for i := range d.Images {
		d.Images[i] = ckf.BucketImage{Bucket: rng.Uint64N(1 << 22), Value: rng.Uint64()}
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = NewDelta(d, WireLease{})
	}
}
