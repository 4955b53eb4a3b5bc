package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Delta is one publication on ckf.<domain>.<dc>.delta: absolute bucket images
// taking the lane from BaseSequence to Sequence = BaseSequence+1.
//
// Images must be in strictly ascending bucket order (which also rules out
// duplicates) and below Identity.Format.BucketCount; NewDelta sorts them. The
// order carries no meaning, since images of distinct buckets commute, but a
// fixed order gives every delta a single encoding and lets the decoder catch
// duplicates in one pass without scratch memory. A delta with no images is
// encodable: the consumer reports it as an empty-delta lane fault, as the
// seeds do.
type Delta struct {
	Identity     ckf.ProducerIdentity
	Lease        WireLease
	BaseSequence uint64
	Sequence     uint64
	Images       []ckf.BucketImage
}

// NewDelta builds the wire form of a producer's delta under lease. It copies
// the images, sorted by bucket; d.Lease (consumer-local) is not carried.
func NewDelta(d ckf.Delta, lease WireLease) Delta {
	images := sortedImages(d.Images)
	return Delta{
		Identity:     d.Identity,
		Lease:        lease,
		BaseSequence: d.BaseSequence,
		Sequence:     d.Sequence,
		Images:       images,
	}
}

// insertionSortMax is the length up to which sortedImages sorts by
// insertion; longer deltas take a radix sort.
const insertionSortMax = 48

// sortedImages returns a copy of images sorted by bucket (stably). A relay
// cuts a delta for every few input messages, so this runs once per
// published delta: a comparison sort through a closure was a third of the
// relay's CPU in the end-to-end profile, so short deltas are sorted by
// insertion and long ones by an LSD radix sort on the bucket's significant
// 11-bit digits (a 4,194,304-bucket lane needs two passes).
func sortedImages(images []ckf.BucketImage) []ckf.BucketImage {
	n := len(images)
	sorted := true
	var maxBucket uint64
	for i, im := range images {
		if i > 0 && im.Bucket < images[i-1].Bucket {
			sorted = false
		}
		maxBucket = max(maxBucket, im.Bucket)
	}
	if sorted || n <= insertionSortMax {
		out := slices.Clone(images)
		if !sorted {
			for i := 1; i < n; i++ {
				for j := i; j > 0 && out[j].Bucket < out[j-1].Bucket; j-- {
					out[j], out[j-1] = out[j-1], out[j]
				}
			}
		}
		return out
	}
	const digitBits = 11
	const digits = 1 << digitBits
	// The caller's slice is only read: the passes alternate between two
	// fresh buffers (unsorted images have a non-zero bucket, so at least
	// one pass runs and the result is one of them).
	a, b := make([]ckf.BucketImage, n), make([]ckf.BucketImage, n)
	src, dst := images, a
	var count [digits]int
	for shift := uint(0); shift < 64 && maxBucket>>shift != 0; shift += digitBits {
		clear(count[:])
		for _, im := range src {
			count[im.Bucket>>shift&(digits-1)]++
		}
		pos := 0
		for d, c := range count {
			count[d] = pos
			pos += c
		}
		for _, im := range src {
			d := im.Bucket >> shift & (digits - 1)
			dst[count[d]] = im
			count[d]++
		}
		src = dst
		if &dst[0] == &a[0] {
			dst = b
		} else {
			dst = a
		}
	}
	return src
}

// ToCkf returns the delta as the consumer's ckf.Delta under the consumer's
// local lane lease. The result shares d.Images: reusing d for the next
// decode overwrites it.
func (d *Delta) ToCkf(lane ckf.LaneLease) ckf.Delta {
	return ckf.Delta{
		Identity:     d.Identity,
		Lease:        lane,
		BaseSequence: d.BaseSequence,
		Sequence:     d.Sequence,
		Images:       d.Images,
	}
}

func checkSequence(base, seq uint64) error {
	if base == math.MaxUint64 || seq != base+1 {
		return decodeErr(ErrSequence, "sequence", "base %d, sequence %d: want sequence = base+1", base, seq)
	}
	return nil
}

// imageOrder checks one image against the bucket count and its predecessor
// (prev is -1 before the first image).
func imageOrder(i int, bucket uint64, prev int64, bucketCount uint64) error {
	if bucket >= bucketCount {
		return decodeErr(ErrOutOfRange, "images", "image %d: bucket %d, bucket count %d", i, bucket, bucketCount)
	}
	if int64(bucket) == prev {
		return decodeErr(ErrDuplicateBucket, "images", "image %d: bucket %d repeated", i, bucket)
	}
	if int64(bucket) < prev {
		return decodeErr(ErrMalformed, "images", "image %d: bucket %d after bucket %d, want ascending order", i, bucket, prev)
	}
	return nil
}

// AppendDelta appends the encoding of d to dst. On error it returns dst
// unchanged (same length) and an *EncodeError: invalid identity or lease,
// ErrSequence, ErrTooLarge (more than MaxDeltaImages images), ErrOutOfRange,
// ErrDuplicateBucket, or ErrMalformed (images not in ascending order).
func AppendDelta(dst []byte, d *Delta) ([]byte, error) {
	if err := checkIdentity(&d.Identity); err != nil {
		return dst, asEncodeError(err)
	}
	if err := checkLease(&d.Lease); err != nil {
		return dst, asEncodeError(err)
	}
	if err := checkSequence(d.BaseSequence, d.Sequence); err != nil {
		return dst, asEncodeError(err)
	}
	n := len(d.Images)
	if n > MaxDeltaImages {
		return dst, &EncodeError{Kind: ErrTooLarge, Field: "images", Detail: fmt.Sprintf("%d images, limit %d", n, MaxDeltaImages)}
	}
	start := len(dst)
	// Fixed part: header ≤ 3, identity ≤ 98, lease ≤ 13+MaxInstanceBytes,
	// sequences ≤ 18, bin header ≤ 5.
	dst = slices.Grow(dst, 264+n*ImageBytes)
	dst = appendPreamble(dst, KindDelta, deltaFields, &d.Identity, &d.Lease)
	dst = appendUint(dst, d.BaseSequence)
	dst = appendUint(dst, d.Sequence)
	dst = appendBinLen(dst, n*ImageBytes)
	off := len(dst)
	dst = dst[:off+n*ImageBytes]
	out := dst[off:]
	bucketCount := d.Identity.Format.BucketCount
	prev := int64(-1)
	for i, im := range d.Images {
		if im.Bucket >= bucketCount || int64(im.Bucket) <= prev {
			return dst[:start], asEncodeError(imageOrder(i, im.Bucket, prev, bucketCount))
		}
		prev = int64(im.Bucket)
		p := out[i*ImageBytes : i*ImageBytes+ImageBytes]
		binary.LittleEndian.PutUint32(p[0:4], uint32(im.Bucket))
		binary.LittleEndian.PutUint64(p[4:12], im.Value)
	}
	return dst, nil
}

// DecodeDelta decodes one delta message. See DecodeDeltaInto.
func DecodeDelta(b []byte) (Delta, error) {
	var d Delta
	err := DecodeDeltaInto(b, &d)
	return d, err
}

// DecodeDeltaInto decodes one delta message into d, reusing the capacity of
// d.Images and, when unchanged, the lease instance string, so a consumer that
// keeps one Delta per lane decodes without allocating. The images are copied
// out of b. On error it returns a *DecodeError and d's contents are
// unspecified.
func DecodeDeltaInto(b []byte, d *Delta) error {
	r := reader{b: b}
	if err := r.preamble(KindDelta, deltaFields, &d.Identity, &d.Lease); err != nil {
		return err
	}
	var err error
	if d.BaseSequence, err = r.uint("base_sequence"); err != nil {
		return err
	}
	if d.Sequence, err = r.uint("sequence"); err != nil {
		return err
	}
	if err := checkSequence(d.BaseSequence, d.Sequence); err != nil {
		return err
	}
	// The bin length is checked against the limit and the input before the
	// images slice may grow to it.
	raw, err := r.bin(MaxDeltaImages*ImageBytes, "images")
	if err != nil {
		return err
	}
	if len(raw)%ImageBytes != 0 {
		return decodeErr(ErrMalformed, "images", "%d bytes is not a multiple of %d", len(raw), ImageBytes)
	}
	n := len(raw) / ImageBytes
	images := d.Images[:0]
	if cap(images) < n {
		images = make([]ckf.BucketImage, 0, n)
	}
	images = images[:n]
	d.Images = images
	bucketCount := d.Identity.Format.BucketCount
	prev := int64(-1)
	for i := range images {
		p := raw[i*ImageBytes : i*ImageBytes+ImageBytes]
		bucket := uint64(binary.LittleEndian.Uint32(p[0:4]))
		if bucket >= bucketCount || int64(bucket) <= prev {
			return imageOrder(i, bucket, prev, bucketCount)
		}
		prev = int64(bucket)
		images[i] = ckf.BucketImage{Bucket: bucket, Value: binary.LittleEndian.Uint64(p[4:12])}
	}
	return r.end()
}
