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

// TestSortedImagesCopiesOnceWhenItCan: input already in order (repeated
// buckets included) and short deltas in any order cost one allocation, the
// copy; only long unsorted deltas take the radix sort's two buffers.
func TestSortedImagesCopiesOnceWhenItCan(t *testing.T) {
	images := func(n int, bucket func(i int) uint64) []ckf.BucketImage {
		in := make([]ckf.BucketImage, n)
		for i := range in {
			in[i] = ckf.BucketImage{Bucket: bucket(i), Value: uint64(i)}
		}
		return in
	}
	tests := []struct {
		name   string
		in     []ckf.BucketImage
		allocs float64
	}{
		{"sorted with repeats", images(4*insertionSortMax, func(i int) uint64 { return uint64(i / 3) }), 1},
		{"short reversed", images(2, func(i int) uint64 { return uint64(2 - i) }), 1},
		{"longest insertion sort", images(insertionSortMax, func(i int) uint64 { return uint64(insertionSortMax - i) }), 1},
		{"radix sort", images(insertionSortMax+1, func(i int) uint64 { return uint64(insertionSortMax + 1 - i) }), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := slices.Clone(tt.in)
			slices.SortStableFunc(want, func(a, b ckf.BucketImage) int { return cmp.Compare(a.Bucket, b.Bucket) })
			if got := sortedImages(tt.in); !slices.Equal(got, want) {
				t.Fatalf("sorted %v, want %v", got, want)
			}
			if a := testing.AllocsPerRun(20, func() { sortedImages(tt.in) }); a != tt.allocs {
				t.Fatalf("%v allocations, want %v", a, tt.allocs)
			}
		})
	}
}
