package producer

// eventDedup answers, while a canonical stored event is validated, which
// earlier block of the event has the same external hash and which earlier
// candidate the same canonical hash. Duplicates within an event are rare,
// so a bit filter of the hashes seen so far settles almost every query with
// one load: a clear bit proves the hash new. On a set bit a short event scans
// its earlier blocks; a long one looks in a hash table, filled only then,
// with the entries since the last fill, so a long event of distinct hashes
// builds no table and one full of duplicates stays linear.
type eventDedup struct {
	blocks     int // in the event
	long       bool
	extBits    bitFilter
	canonBits  bitFilter
	tables     bool     // ext and canon were reset for this event
	ext        u64Table // external hash → index of its new block
	canon      u64Table // canonical hash → candidate index
	extBuilt   int      // ext holds the new blocks of blocks[:extBuilt]
	canonBuilt int      // canon holds cands[:canonBuilt]
}

// linearScanLimit bounds the per-event duplicate scans; longer events use
// the hash tables so validation stays linear.
const linearScanLimit = 32

func (d *eventDedup) reset(blocks int) {
	d.blocks, d.long = blocks, blocks > linearScanLimit
	d.extBits.reset(blocks)
	d.canonBits.reset(blocks)
	d.tables, d.extBuilt, d.canonBuilt = false, 0, 0
}

// resetTables empties the tables, sized for the event, on first use.
func (d *eventDedup) resetTables() {
	if !d.tables {
		d.ext.resetFor(d.blocks)
		d.canon.resetFor(d.blocks)
		d.tables = true
	}
}

// findExt returns the index of the earlier block with external hash ext, or
// -1; blocks are the event's blocks before the one asked about, all
// validated, and every one of them was noted with noteBlock. A block that
// was a re-offer of the member's lineage is not looked for: a later block
// with its hash finds it in the lineage first.
func (d *eventDedup) findExt(blocks []eventBlock, ext uint64) int {
	if !d.extBits.mayHave(ext) {
		return -1
	}
	if !d.long {
		for j := range blocks {
			if blocks[j].ext == ext {
				return j
			}
		}
		return -1
	}
	d.resetTables()
	for ; d.extBuilt < len(blocks); d.extBuilt++ {
		if b := &blocks[d.extBuilt]; b.kind == blockNew {
			d.ext.put(b.ext, uint64(d.extBuilt))
		}
	}
	if j, ok := d.ext.get(ext); ok {
		return int(j)
	}
	return -1
}

// findCand returns the index of the candidate with canonical hash canon,
// or -1; every candidate was noted with noteCand.
func (d *eventDedup) findCand(cands []candidate, canon uint64) int {
	if !d.canonBits.mayHave(canon) {
		return -1
	}
	if !d.long {
		for j := range cands {
			if cands[j].canon == canon {
				return j
			}
		}
		return -1
	}
	d.resetTables()
	for ; d.canonBuilt < len(cands); d.canonBuilt++ {
		d.canon.put(cands[d.canonBuilt].canon, uint64(d.canonBuilt))
	}
	if j, ok := d.canon.get(canon); ok {
		return int(j)
	}
	return -1
}

func (d *eventDedup) noteBlock(ext uint64)  { d.extBits.add(ext) }
func (d *eventDedup) noteCand(canon uint64) { d.canonBits.add(canon) }

// bitFilter is a set of hashes that may answer yes for a hash not in it
// (about one query in ten or fewer at the sizes reset picks), never no for
// one that is.
type bitFilter struct {
	words []uint64
	shift uint8
}

// Filter sizes: at least 16 bits per entry, between 256 bits and 64 Ki bits.
const (
	filterMinWords = 4
	filterMaxWords = 1 << 10
)

// reset empties the filter and sizes it for n entries, keeping its words.
func (f *bitFilter) reset(n int) {
	w, shift := filterMinWords, uint8(64-8) // 256 bits: an 8-bit index
	for w < filterMaxWords && w*64 < 16*n {
		w <<= 1
		shift--
	}
	if cap(f.words) < w {
		f.words = make([]uint64, w)
	} else {
		f.words = f.words[:w]
		clear(f.words)
	}
	f.shift = shift
}

// bit is Fibonacci hashing onto the filter's bits.
func (f *bitFilter) bit(h uint64) (word int, mask uint64) {
	i := (h * 0x9E3779B97F4A7C15) >> f.shift
	return int(i >> 6), 1 << (i & 63)
}

func (f *bitFilter) add(h uint64) {
	w, m := f.bit(h)
	f.words[w] |= m
}

func (f *bitFilter) mayHave(h uint64) bool {
	w, m := f.bit(h)
	return f.words[w]&m != 0
}
