package ckf

// BucketImage is an absolute bucket word: after applying it, bucket holds value.
type BucketImage struct {
	Bucket uint64
	Value  uint64
}

// Snapshot is DcCkfSnapshot / GlobalCkfSnapshot: a full lane at a sequence.
type Snapshot struct {
	Identity ProducerIdentity
	Lease    LaneLease
	Sequence uint64
	Buckets  []uint64
}

// Delta is DcCkfDelta / GlobalCkfDelta: absolute images continuing
// BaseSequence to Sequence (= BaseSequence+1).
type Delta struct {
	Identity     ProducerIdentity
	Lease        LaneLease
	BaseSequence uint64
	Sequence     uint64
	Images       []BucketImage
}

// DrainMarker is ConsumerDrainMarker: the sequence the consumer must have reached.
type DrainMarker struct {
	Lease            LaneLease
	ExpectedSequence uint64
}
