package ckf

// SplitMix64 constants (spec §5.3, §9.1).
const (
	splitMixGamma uint64 = 0x9E37_79B9_7F4A_7C15
	splitMixMul1  uint64 = 0xBF58_476D_1CE4_E5B9
	splitMixMul2  uint64 = 0x94D0_49BB_1331_11EB
)

// NextRandom advances a SplitMix64 state and returns the next output.
func NextRandom(state *uint64) uint64 {
	*state += splitMixGamma
	return mix64(*state)
}

func mix64(v uint64) uint64 {
	v = (v ^ (v >> 30)) * splitMixMul1
	v = (v ^ (v >> 27)) * splitMixMul2
	return v ^ (v >> 31)
}

// LaneRNGSeed derives the initial relocation RNG state of a lane.
func LaneRNGSeed(seed uint64, lane uint64) uint64 {
	state := seed ^ ((lane + 1) * splitMixGamma)
	return NextRandom(&state)
}

// StickyWorker routes a consumer lane to one of workers ingestion workers.
func StickyWorker(consumer uint64, lane uint8, workers int) int {
	v := mix64(consumer ^ (uint64(lane) * splitMixGamma))
	return int(v % uint64(workers))
}
