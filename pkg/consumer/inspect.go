package consumer

import "github.com/ckfrelay/ckfrelay/pkg/ckf"

// LaneWords appends lane's current words, bucket by bucket, to dst[:0] and
// returns it; lanes outside 0..16 yield dst[:0]. Each word is one atomic
// load, so the copy is a consistent cut only while the lane is quiescent
// (e.g. after an acknowledged drain). Meant for diagnostics and convergence
// checks, not for queries.
func (ix *Indexer) LaneWords(lane int, dst []uint64) []uint64 {
	dst = dst[:0]
	if lane < 0 || lane >= ckf.LaneCount {
		return dst
	}
	for b := range ix.table.bucketCount {
		dst = append(dst, ix.table.LoadImage(b, lane))
	}
	return dst
}
