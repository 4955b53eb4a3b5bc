package producer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/zeebo/xxh3"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Checkpoint encoding, version 1. All integers are little-endian.
//
//	header (40 bytes)
//	  magic "CKC1" | version u16 | mode u8 | flags u8 (0)
//	  format_version u16 | fingerprint_bits u8 | slots_per_bucket u8 | reserved u32 (0)
//	  seed u64 | bucket_count u64 | body_len u64
//	body (body_len bytes)
//	  rng u64 | 7 telemetry counters u64
//	  lane words: bucket_count × u64
//	  owners: table of full hash → ownership (refcount | resident<<32)
//	  member_count u64, then per member in ascending order:
//	    worker_id u64 | dp_rank u32 | lineage table (external → full hash)
//	  pool_count u64 | capacity u64 × pool_count   (emptied member tables kept for reuse)
//	checksum u64: XXH3-64 of header and body
//
// A table is: flags u8 (bit 0: key 0 present) | [value of key 0] |
// capacity u64 | count u64 | count entries. An entry is key u64 and value
// u64, except in verbatim lineage tables, where the value equals the key and
// is not written (nor for key 0). Entries are the table's non-zero keys in
// slot order, cyclically from just after its lowest empty slot; inserting
// them in that order into an empty table of the same capacity puts every
// key back into its slot. The restored state therefore iterates, grows and
// reuses its tables exactly as the original would, which keeps every later
// outcome identical, and the encoding of a state is unique, so an accepted
// input re-encodes byte for byte.
const (
	checkpointMagic      = "CKC1"
	checkpointVersion    = 1
	checkpointHeaderSize = 40
	telemetryCounters    = 7

	// checkpointChunk is the encoder's write size and the decoder's
	// read-ahead: big enough for the object store's chunks, small next to
	// the tables.
	checkpointChunk = 64 << 10

	// maxCheckpointRefcount bounds a refcount in a checkpoint: while the
	// members are decoded, the owner table's spare high bits count each
	// hash's edges to check it against its refcount. A refcount that high
	// needs 2^31 edges (a checkpoint over 16 GiB).
	maxCheckpointRefcount = 1<<31 - 1
	edgeCountShift        = 33
)

// Checkpoint writes the state's exact ownership, lane, relocation RNG state
// and telemetry counters to w in the format RestoreState reads (see the
// encoding above). It streams: memory use beyond the state is a small write
// buffer and the sorted member list. The publication window (pending event
// count and dirty buckets) is not part of a checkpoint and is left as it is:
// a restored state starts with an empty window, as after Flush.
//
// A state the restore budget cannot pay for (see slotBudget) is never
// written: Checkpoint then returns CheckpointFits's ErrCheckpointOverBudget
// error before writing a byte. Other errors are w's, wrapped.
//
// It only reads the state; like every State method it must not run
// concurrently with a mutating call.
func (s *State) Checkpoint(w io.Writer) error {
	members := s.sortedMembers()
	if err := s.checkpointFits(members); err != nil {
		return err
	}
	return s.encodeCheckpoint(w, members)
}

// encodeCheckpoint writes the checkpoint of members (sorted) unchecked.
func (s *State) encodeCheckpoint(w io.Writer, members []Member) error {
	verbatim := s.cfg.Mode == ckf.HashModeVerbatim

	bodyLen := uint64(8 + 8*telemetryCounters + 8*len(s.mut.words))
	bodyLen += tableEncodedSize(&s.owners, true)
	bodyLen += 8
	for _, m := range members {
		bodyLen += 12 + tableEncodedSize(&s.members[m].lineage, !verbatim)
	}
	bodyLen += 8 + 8*uint64(len(s.freeMember))

	e := &ckptEncoder{w: w, h: xxh3.New(), buf: make([]byte, 0, checkpointChunk)}
	e.bytes([]byte(checkpointMagic))
	e.u16(checkpointVersion)
	e.u8(uint8(s.cfg.Mode))
	e.u8(0)
	e.u16(s.format.FormatVersion)
	e.u8(s.format.FingerprintBits)
	e.u8(s.format.SlotsPerBucket)
	e.u32(0)
	e.u64(s.format.Seed)
	e.u64(s.format.BucketCount)
	e.u64(bodyLen)

	e.u64(s.mut.rng)
	for _, v := range s.tel.counters() {
		e.u64(v)
	}
	for _, w := range s.mut.words {
		e.u64(w)
	}
	e.table(&s.owners, true)
	e.u64(uint64(len(members)))
	for _, m := range members {
		e.u64(m.WorkerID)
		e.u32(m.DpRank)
		e.table(&s.members[m].lineage, !verbatim)
	}
	e.u64(uint64(len(s.freeMember)))
	for _, ms := range s.freeMember {
		e.u64(ms.lineage.capacity())
	}
	e.flush()
	if e.err != nil {
		return fmt.Errorf("producer: write checkpoint: %w", e.err)
	}
	var sum [8]byte
	binary.LittleEndian.PutUint64(sum[:], e.h.Sum64())
	if _, err := w.Write(sum[:]); err != nil {
		return fmt.Errorf("producer: write checkpoint: %w", err)
	}
	return nil
}

func (t *telemetry) counters() [telemetryCounters]uint64 {
	return [telemetryCounters]uint64{t.unknownRemovals, t.capacityFailures, t.physicalTouches, t.distinctTouched,
		t.emittedImages, t.netReverted, t.publications}
}

func (t *telemetry) setCounters(c [telemetryCounters]uint64) {
	t.unknownRemovals, t.capacityFailures, t.physicalTouches, t.distinctTouched = c[0], c[1], c[2], c[3]
	t.emittedImages, t.netReverted, t.publications = c[4], c[5], c[6]
}

// tableEncodedSize is the encoded size of t; withValues is false for
// verbatim lineage tables, whose values equal their keys.
func tableEncodedSize(t *u64Table, withValues bool) uint64 {
	entry := uint64(8)
	if withValues {
		entry = 16
	}
	n := 1 + 8 + 8 + entry*uint64(t.n)
	if t.hasZero && withValues {
		n += 8
	}
	return n
}

// ckptEncoder buffers writes into chunks that feed both w and the checksum.
type ckptEncoder struct {
	w   io.Writer
	h   *xxh3.Hasher
	buf []byte
	err error
}

func (e *ckptEncoder) room(n int) {
	if len(e.buf)+n > cap(e.buf) {
		e.flush()
	}
}

func (e *ckptEncoder) flush() {
	if len(e.buf) == 0 {
		return
	}
	if e.err == nil {
		_, _ = e.h.Write(e.buf)
		_, e.err = e.w.Write(e.buf)
	}
	e.buf = e.buf[:0]
}

func (e *ckptEncoder) bytes(b []byte) { e.room(len(b)); e.buf = append(e.buf, b...) }
func (e *ckptEncoder) u8(v uint8)     { e.room(1); e.buf = append(e.buf, v) }
func (e *ckptEncoder) u16(v uint16)   { e.room(2); e.buf = binary.LittleEndian.AppendUint16(e.buf, v) }
func (e *ckptEncoder) u32(v uint32)   { e.room(4); e.buf = binary.LittleEndian.AppendUint32(e.buf, v) }
func (e *ckptEncoder) u64(v uint64)   { e.room(8); e.buf = binary.LittleEndian.AppendUint64(e.buf, v) }

func (e *ckptEncoder) table(t *u64Table, withValues bool) {
	var flags uint8
	if t.hasZero {
		flags = 1
	}
	e.u8(flags)
	if t.hasZero && withValues {
		e.u64(t.zeroVal)
	}
	e.u64(t.capacity())
	e.u64(uint64(t.n))
	for k, v := range t.layoutOrder() {
		e.u64(k)
		if withValues {
			e.u64(v)
		}
	}
}

// RestoreState decodes a checkpoint written by Checkpoint for a state of
// cfg. The checkpoint's format identity and hash mode must equal cfg's
// (ErrCheckpointFormat otherwise); cfg's other fields (MaxKicks, cadence)
// apply from now on. Decoding is strict: every count is checked against the
// declared body and a limit derived from cfg before anything is allocated
// for it, invariants are verified, and the checksum must match. Table slots
// are allocated only as the restore budget allows (see slotBudget): beyond
// a fixed allowance, as the entries paying for them arrive. Any refusal
// is a *CheckpointError (errors.Is ErrCheckpoint and its kind); a
// checkpoint beyond the budget is read to its end without allocating
// anything more and is reported as ErrCheckpointOverBudget only if its
// checksum matches (a corrupt one is reported as such). An invalid cfg
// returns its validation error; a failing reader returns its error,
// wrapped. The restored state equals the checkpointed one in words, RNG
// state, ownership, table layouts and telemetry; its publication window is
// empty.
func RestoreState(r io.Reader, cfg ckf.Config) (*State, error) {
	format, addr, err := stateFormat(cfg)
	if err != nil {
		return nil, err
	}
	d := &ckptDecoder{hr: hashingReader{r: r, h: xxh3.New(), left: checkpointHeaderSize}}
	d.br = bufio.NewReaderSize(&d.hr, checkpointChunk)
	d.left = checkpointHeaderSize
	bodyLen, err := d.header(cfg, format)
	if err != nil {
		return nil, err
	}
	d.hr.left, d.left = bodyLen, bodyLen
	s, err := d.body(cfg, format, addr)
	if errors.Is(err, ErrCheckpointOverBudget) {
		// Only an intact checkpoint is called over budget: the rest is
		// hashed, not decoded, so it costs no memory.
		if derr := d.skipBody(); derr != nil {
			return nil, derr
		}
		if terr := d.trailer(); terr != nil {
			return nil, terr
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	if err := d.trailer(); err != nil {
		return nil, err
	}
	return s, nil
}

// ckptDecoder reads fields through a buffered reader over a hashingReader.
// left is what the declared header or body still holds; every read is
// first charged against it, so the reader never runs past the body.
type ckptDecoder struct {
	hr   hashingReader
	br   *bufio.Reader
	left uint64
	// deferred is the first invariant violation that left the input
	// readable; it is reported only if the checksum matches, so a corrupt
	// checkpoint is reported as such.
	deferred error
	// scratch holds the entries of a table the budget cannot pay for
	// before they arrive (see table); reused table after table.
	scratch []tableEntry
}

// hashingReader feeds the checksum every byte it hands out and stops after
// left bytes (the header, then the body), leaving the trailer unread.
type hashingReader struct {
	r    io.Reader
	h    *xxh3.Hasher
	left uint64
}

func (h *hashingReader) Read(p []byte) (int, error) {
	if h.left == 0 {
		return 0, io.EOF
	}
	if uint64(len(p)) > h.left {
		p = p[:h.left]
	}
	n, err := h.r.Read(p)
	_, _ = h.h.Write(p[:n])
	h.left -= uint64(n)
	return n, err
}

func (d *ckptDecoder) readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return checkpointErr(ErrCheckpointTruncated, "input ended before the declared end")
	}
	return fmt.Errorf("producer: read checkpoint: %w", err)
}

// take charges n bytes against the declared remainder.
func (d *ckptDecoder) take(n uint64, what string) error {
	if n > d.left {
		return checkpointErr(ErrCheckpointMalformed, "%s needs %d bytes, %d left in the declared body", what, n, d.left)
	}
	d.left -= n
	return nil
}

// fixed reads n ≤ checkpointChunk bytes already charged by take; the slice
// is valid until the next read.
func (d *ckptDecoder) fixed(n int) ([]byte, error) {
	b, err := d.br.Peek(n)
	if err != nil {
		return nil, d.readErr(err)
	}
	_, _ = d.br.Discard(n)
	return b, nil
}

// skipBody reads (and so hashes) what is left of the declared body.
func (d *ckptDecoder) skipBody() error {
	for d.left > 0 {
		n := int(min(d.left, 1<<30))
		if _, err := d.br.Discard(n); err != nil {
			return d.readErr(err)
		}
		d.left -= uint64(n)
	}
	return nil
}

func (d *ckptDecoder) u64(what string) (uint64, error) {
	if err := d.take(8, what); err != nil {
		return 0, err
	}
	b, err := d.fixed(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (d *ckptDecoder) u8(what string) (uint8, error) {
	if err := d.take(1, what); err != nil {
		return 0, err
	}
	b, err := d.fixed(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (d *ckptDecoder) violation(format string, a ...any) {
	if d.deferred == nil {
		d.deferred = checkpointErr(ErrCheckpointMalformed, format, a...)
	}
}

func (d *ckptDecoder) header(cfg ckf.Config, format ckf.FormatIdentity) (uint64, error) {
	if err := d.take(checkpointHeaderSize, "header"); err != nil {
		return 0, err
	}
	b, err := d.fixed(checkpointHeaderSize)
	if err != nil {
		return 0, err
	}
	le := binary.LittleEndian
	if string(b[:4]) != checkpointMagic {
		return 0, checkpointErr(ErrCheckpointMagic, "got %q", b[:4])
	}
	if v := le.Uint16(b[4:]); v != checkpointVersion {
		return 0, checkpointErr(ErrCheckpointVersion, "version %d, this build reads %d", v, checkpointVersion)
	}
	mode := ckf.HashMode(b[6])
	if b[7] != 0 || le.Uint32(b[12:]) != 0 {
		return 0, checkpointErr(ErrCheckpointMalformed, "reserved header bits set")
	}
	got := ckf.FormatIdentity{FormatVersion: le.Uint16(b[8:]), FingerprintBits: b[10], SlotsPerBucket: b[11],
		Seed: le.Uint64(b[16:]), BucketCount: le.Uint64(b[24:])}
	if got != format || mode != cfg.Mode {
		return 0, checkpointErr(ErrCheckpointFormat, "checkpoint has %+v mode %s, config wants %+v mode %s", got, mode, format, cfg.Mode)
	}
	return le.Uint64(b[32:]), nil
}

func (d *ckptDecoder) body(cfg ckf.Config, format ckf.FormatIdentity, addr ckf.Addressing) (*State, error) {
	verbatim := cfg.Mode == ckf.HashModeVerbatim
	rng, err := d.u64("rng state")
	if err != nil {
		return nil, err
	}
	var tel [telemetryCounters]uint64
	for i := range tel {
		if tel[i], err = d.u64("telemetry"); err != nil {
			return nil, err
		}
	}
	// The lane's size comes from cfg, not from the input.
	if err := d.take(8*format.BucketCount, "lane words"); err != nil {
		return nil, err
	}
	words := make([]uint64, format.BucketCount)
	for i := 0; i < len(words); {
		n := min(len(words)-i, checkpointChunk/8)
		b, err := d.fixed(8 * n)
		if err != nil {
			return nil, err
		}
		for j := range n {
			words[i+j] = binary.LittleEndian.Uint64(b[8*j:])
		}
		i += n
	}

	budget := newSlotBudget(format.BucketCount)
	owners, err := d.table("owners", true, &budget, func(_, v uint64) {
		o := unpackOwnership(v)
		switch {
		case v>>edgeCountShift != 0 || o.Refcount == 0:
			d.violation("ownership value %#x", v)
		case o.Refcount > maxCheckpointRefcount:
			d.violation("refcount %d beyond the checkpoint limit %d", o.Refcount, maxCheckpointRefcount)
		case verbatim && !o.Resident:
			d.violation("non-resident block in verbatim mode")
		}
	})
	if err != nil {
		return nil, err
	}
	s, err := newStateFrom(cfg, format, addr, words, rng, owners)
	if err != nil {
		return nil, err
	}
	s.tel.setCounters(tel)
	if err := d.members(s, &budget); err != nil {
		return nil, err
	}
	if err := d.pool(s); err != nil {
		return nil, err
	}
	if d.left != 0 {
		return nil, checkpointErr(ErrCheckpointMalformed, "%d declared body bytes left after the last section", d.left)
	}
	d.verifyOwnership(s)
	return s, nil
}

// members decodes the member tables, counting each full hash's edges in
// the owner values' spare high bits.
func (d *ckptDecoder) members(s *State, budget *slotBudget) error {
	verbatim := s.cfg.Mode == ckf.HashModeVerbatim
	count, err := d.u64("member count")
	if err != nil {
		return err
	}
	// The smallest member: its ids (8 + 4 bytes) and a table header
	// (flags 1, capacity 8, count 8).
	const minMember = 29
	if count > d.left/minMember {
		return checkpointErr(ErrCheckpointMalformed, "%d members cannot fit in %d bytes", count, d.left)
	}
	s.members = make(map[Member]*memberState, min(count, 1<<12))
	var prev Member
	for i := range count {
		worker, err := d.u64("member")
		if err != nil {
			return err
		}
		if err := d.take(4, "member"); err != nil {
			return err
		}
		b, err := d.fixed(4)
		if err != nil {
			return err
		}
		m := Member{WorkerID: worker, DpRank: binary.LittleEndian.Uint32(b)}
		if i > 0 && prev.Compare(m) >= 0 {
			d.violation("members out of order: %+v after %+v", m, prev)
		}
		prev = m
		lineage, err := d.table("lineage", !verbatim, budget, func(_, h uint64) {
			p := s.owners.entry(h)
			if p == nil {
				d.violation("edge to untracked hash %#x", h)
				return
			}
			if (*p)>>edgeCountShift >= uint64(uint32(*p)) {
				d.violation("hash %#x has more edges than its refcount", h)
				return
			}
			*p += 1 << edgeCountShift
		})
		if err != nil {
			return err
		}
		if lineage.len() == 0 {
			d.violation("member %+v owns nothing", m)
			continue
		}
		if _, dup := s.members[m]; dup {
			continue // already reported as out of order
		}
		lineage.sparse = true // as newMember's
		s.members[m] = &memberState{lineage: lineage}
	}
	return nil
}

// pool decodes the capacities of the emptied member tables kept for reuse;
// they are allocated when reused.
func (d *ckptDecoder) pool(s *State) error {
	count, err := d.u64("pool count")
	if err != nil {
		return err
	}
	if count > freeMemberCap {
		return checkpointErr(ErrCheckpointMalformed, "%d pooled member tables, at most %d", count, freeMemberCap)
	}
	for range count {
		c, err := d.u64("pool capacity")
		if err != nil {
			return err
		}
		if c < tableMinSlots || c > maxPooledMemberSlots || c&(c-1) != 0 {
			return checkpointErr(ErrCheckpointMalformed, "pooled table capacity %d", c)
		}
		s.freeMember = append(s.freeMember, &memberState{lineage: u64Table{mask: c - 1}})
	}
	return nil
}

// verifyOwnership checks that every hash had exactly refcount edges (and
// clears the count bits), that every resident hash has a fingerprint copy
// of its own in one of its buckets and that the lane holds one fingerprint
// per resident hash.
//
// Copies are claimed from a scratch copy of the lane, not looked up: two
// resident hashes with the same fingerprint and bucket pair need two
// copies, and a lane with one would lose the second hash at the first
// removal. Claiming greedily is exact because the alternate bucket is an
// involution: two hashes with one fingerprint have the same bucket pair or
// disjoint ones, so any copy in the pair belongs to the pair's hashes.
func (d *ckptDecoder) verifyOwnership(s *State) {
	resident := 0
	claim := Mutator{words: slices.Clone(s.mut.words), addr: s.mut.addr}
	check := func(k uint64, v *uint64) {
		if o := unpackOwnership(*v); (*v)>>edgeCountShift != uint64(o.Refcount) {
			d.violation("hash %#x has refcount %d but %d edges", k, o.Refcount, (*v)>>edgeCountShift)
		} else if o.Resident {
			resident++
			if _, err := claim.Remove(k); err != nil {
				d.violation("resident hash %#x has no fingerprint copy of its own in the lane", k)
			}
		}
		*v &= 1<<edgeCountShift - 1
	}
	if s.owners.hasZero {
		check(0, &s.owners.zeroVal)
	}
	for i := range s.owners.slots {
		if e := &s.owners.slots[i]; e.key != 0 {
			check(e.key, &e.val)
		}
	}
	slots := 0
	for _, w := range s.mut.words {
		slots += ckf.OccupiedSlots(w)
	}
	if slots != resident {
		d.violation("lane holds %d fingerprints for %d resident hashes", slots, resident)
	}
}

// table decodes one table into its original layout (see the encoding),
// paying for its slots from budget. check sees every (key, value) and
// reports violations through d.
func (d *ckptDecoder) table(what string, withValues bool, budget *slotBudget, check func(k, v uint64)) (u64Table, error) {
	flags, err := d.u8(what)
	if err != nil {
		return u64Table{}, err
	}
	if flags&^1 != 0 {
		return u64Table{}, checkpointErr(ErrCheckpointMalformed, "%s flags %#x", what, flags)
	}
	var zeroVal uint64
	if flags&1 != 0 && withValues {
		if zeroVal, err = d.u64(what); err != nil {
			return u64Table{}, err
		}
	}
	capacity, err := d.u64(what + " capacity")
	if err != nil {
		return u64Table{}, err
	}
	count, err := d.u64(what + " count")
	if err != nil {
		return u64Table{}, err
	}
	// capacity is a power of two of at least 8, so capacity/4*3 is exact
	// and cannot overflow.
	if capacity < tableMinSlots || capacity&(capacity-1) != 0 || count > capacity/4*3 {
		return u64Table{}, checkpointErr(ErrCheckpointMalformed, "%s of %d entries in %d slots", what, count, capacity)
	}
	entry := uint64(8)
	if withValues {
		entry = 16
	}
	if count > d.left/entry {
		return u64Table{}, checkpointErr(ErrCheckpointMalformed, "%s entries need %d × %d bytes, %d left in the declared body", what, count, entry, d.left)
	}
	d.left -= count * entry

	// Allocate now if the account already covers the table; otherwise its
	// entries are collected first (memory grows only as they arrive) and
	// the table is allocated once they have paid for it.
	var t u64Table
	direct := capacity <= budget.left
	if direct {
		t = makeU64Table(capacity)
	}
	var order layoutCheck
	pending := d.scratch[:0]
	for range count {
		b, err := d.fixed(int(entry))
		if err != nil {
			return u64Table{}, err
		}
		k, v := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b)
		if withValues {
			v = binary.LittleEndian.Uint64(b[8:])
		}
		if direct {
			order.place(d, what, &t, k, v)
		} else {
			pending = append(pending, tableEntry{key: k, val: v})
		}
	}
	d.scratch = pending[:0]
	budget.credit(count)
	if !budget.charge(capacity) {
		return u64Table{}, checkpointErr(ErrCheckpointOverBudget, "%s: %d slots for %d entries, the restore budget has %d left after crediting them",
			what, capacity, count, budget.left)
	}
	if !direct {
		t = makeU64Table(capacity)
		for _, e := range pending {
			order.place(d, what, &t, e.key, e.val)
		}
	}
	if flags&1 != 0 {
		t.hasZero, t.zeroVal = true, zeroVal
	}
	if t.n > 0 {
		e := t.lowestEmpty()
		j := (e + 1) & t.mask
		for t.slots[j].key == 0 {
			j = (j + 1) & t.mask
		}
		if j != order.first {
			d.violation("%s entries do not start after the lowest empty slot", what)
		}
	}
	if t.hasZero {
		check(0, t.zeroVal)
	}
	for i := range t.slots {
		if e := &t.slots[i]; e.key != 0 {
			check(e.key, e.val)
		}
	}
	return t, nil
}

// layoutCheck places a table's listed entries in order and verifies that
// they come in layout order: cyclically ascending slots from the first.
type layoutCheck struct {
	placed         int
	first, prevOff uint64
}

func (c *layoutCheck) place(d *ckptDecoder, what string, t *u64Table, k, v uint64) {
	if k == 0 {
		d.violation("%s lists key 0 as an entry", what)
		return
	}
	slot, dup := t.place(k, v)
	if dup {
		d.violation("%s lists %#x twice", what, k)
		return
	}
	if c.placed == 0 {
		c.first = slot
	}
	off := (slot - c.first) & t.mask
	if c.placed > 0 && off <= c.prevOff {
		d.violation("%s entries out of layout order", what)
	}
	c.prevOff = off
	c.placed++
}

func (d *ckptDecoder) trailer() error {
	var sum [8]byte
	if _, err := io.ReadFull(d.hr.r, sum[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return checkpointErr(ErrCheckpointTruncated, "checksum missing")
		}
		return fmt.Errorf("producer: read checkpoint: %w", err)
	}
	if got, want := binary.LittleEndian.Uint64(sum[:]), d.hr.h.Sum64(); got != want {
		return checkpointErr(ErrCheckpointChecksum, "stored %#016x, computed %#016x", got, want)
	}
	if d.deferred != nil {
		return d.deferred
	}
	var one [1]byte
	n, err := io.ReadFull(d.hr.r, one[:])
	if n > 0 {
		return checkpointErr(ErrCheckpointMalformed, "trailing bytes after the checksum")
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("producer: read checkpoint: %w", err)
	}
	return nil
}
