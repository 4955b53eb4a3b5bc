package wire

import (
	"cmp"
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
	images := slices.Clone(d.Images)
	slices.SortFunc(images, func(a, b ckf.BucketImage) int { return cmp.Compare(a.Bucket, b.Bucket) })
	return Delta{
		Identity:     d.Identity,
		Lease:        lease,
		BaseSequence: d.BaseSequence,
		Sequence:     d.Sequence,
		Images:       images,
	}
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
