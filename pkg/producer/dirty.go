package producer

// dirtyWindow is the publication window (spec §6.5): which buckets changed
// since the last cut, in first-touch order, with the value each had before
// its first touch. Every slice is reused across windows.
type dirtyWindow struct {
	bits      []uint64
	order     []uint64
	originals []uint64
}

func newDirtyWindow(bucketCount uint64) dirtyWindow {
	return dirtyWindow{bits: make([]uint64, (bucketCount+63)/64)}
}

// mark records bucket with its original value the first time it is touched
// in the window; later touches are ignored.
func (d *dirtyWindow) mark(bucket, original uint64) {
	word, bit := bucket>>6, uint64(1)<<(bucket&63)
	if d.bits[word]&bit != 0 {
		return
	}
	d.bits[word] |= bit
	d.order = append(d.order, bucket)
	d.originals = append(d.originals, original)
}

func (d *dirtyWindow) isDirty(bucket uint64) bool {
	return d.bits[bucket>>6]&(uint64(1)<<(bucket&63)) != 0
}

func (d *dirtyWindow) len() int { return len(d.order) }

// reset clears only the bits that are set, so a small window costs little
// on a large lane.
func (d *dirtyWindow) reset() {
	for _, b := range d.order {
		d.bits[b>>6] = 0
	}
	d.order = d.order[:0]
	d.originals = d.originals[:0]
}
