package wire

// WireVersion is the first element of every message. A decoder refuses any
// other value (ErrVersion): a format change gets a new version, never a
// reinterpretation of version 1.
const WireVersion = 1

// Size limits. Decoders check every length read from the input against these
// before allocating.
const (
	// MaxMessageBytes bounds one encoded NATS message. It is the upstream relay
	// transport's default max message size (spec §15.2, 8 MiB). Note that a
	// NATS server's default max_payload is 1 MiB: servers carrying full-size
	// deltas need max_payload raised to this value.
	MaxMessageBytes = 8 << 20

	// MaxDeltaImages is the spec's max_delta_images (§15.3):
	// (IMAGES_MAX_FRAME_BYTES − 48 − 12) / 12 with IMAGES_MAX_FRAME_BYTES =
	// 48 + 16 + 524288·8. A publication with more images goes out as a snapshot.
	MaxDeltaImages = 349525

	// ImageBytes is the size of one packed delta image: bucket u32 LE, value u64 LE.
	ImageBytes = 12

	// MinBucketCount and MaxBucketCount bound the format's bucket count, which
	// must also be a power of two (MAX_BUCKET_COUNT = 2^24, spec §15.3).
	MinBucketCount = 2
	MaxBucketCount = 1 << 24

	// MaxInstanceBytes bounds a relay instance id (the upstream transport's
	// bound on subscriber ids, spec §15.2).
	MaxInstanceBytes = 128

	// MaxObjectNameBytes bounds the Object Store object name in a snapshot marker.
	MaxObjectNameBytes = 255

	// MaxBucketNameBytes bounds the Object Store bucket name in a snapshot marker.
	MaxBucketNameBytes = 64

	// MaxTokenBytes bounds a domain or DC name used as a subject token.
	MaxTokenBytes = 64
)

// digestBytes is the size of a SHA-256 digest.
const digestBytes = 32 // sha256.Size
