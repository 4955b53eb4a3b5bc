package cbi1

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"
)

// Seed corpus: the byte vectors V1–V5 of docs/kvrelay-v1.md §8.3 (V4 shortened to a
// 2-bucket lane keeps the corpus small; it is otherwise the same shape).
var fuzzVectors = []string{
	"434249310100020010040100ed5e0000000000000004000000000000070000000000000005000000000000004ef6466104000000000000000200000003000000ddddccccbbbbaaaae80300002a00000000000000",
	"434249310100020010040100ed5e000000000000000400000000000007000000000000000100000000000000f0a4c269000000000000000000000000",
	"434249310100010010040100ed5e0000000000000200000000000000070000000000000006000000000000009dc0f2370000000001000000000000000000000034120000cdab01000000000000000000",
	"4342493101000200100401002a0000000000000000040000000000000700000000000000020000000000000098893935010000000000000001000000000000000000000000000000",
}

func seedFrames(f *testing.F) [][]byte {
	f.Helper()
	var out [][]byte
	for _, s := range fuzzVectors {
		b, err := hex.DecodeString(s)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	v4 := Format{seed: 42, bucketCount: 1024}
	b, err := AppendSnapshotChunk(nil, v4, 7, 1, make([]uint64, 1024), 0)
	if err != nil {
		f.Fatal(err)
	}
	return append(out, b)
}

// expectedFor picks the format a consumer would expect for data: the one its
// header declares when that is a valid format (so fuzzing reaches the body
// checks), otherwise a fixed one.
func expectedFor(data []byte) Format {
	if len(data) >= HeaderLen {
		seed := binary.LittleEndian.Uint64(data[12:20])
		n := binary.LittleEndian.Uint64(data[20:28])
		if f, err := NewFormat(seed, n); err == nil {
			return f
		}
	}
	return Format{seed: 0x5EED, bucketCount: 1024}
}

// checkFrame asserts what every successful decode guarantees and that the
// encoders reproduce the input exactly.
func checkFrame(t *testing.T, f Format, data []byte, fr Frame) {
	t.Helper()
	h := fr.Header
	if h.Seed != f.seed || h.BucketCount != f.bucketCount {
		t.Fatalf("decoded header %+v disagrees with expected %v", h, f)
	}
	switch h.Kind {
	case KindDelta:
		d := fr.Delta
		if DeltaFrameLen(d.Len()) != len(data) || d.Len() > MaxDeltaImages {
			t.Fatalf("delta of %d images in %d bytes", d.Len(), len(data))
		}
		images := d.AppendImages(nil)
		for _, im := range images {
			if uint64(im.Bucket) >= f.bucketCount {
				t.Fatalf("image bucket %d outside %d", im.Bucket, f.bucketCount)
			}
		}
		again, err := AppendDelta(nil, f, h.DcID, d.BaseEpoch, h.Epoch, images)
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("re-encode differs (err %v)", err)
		}
	case KindSnapshotChunk:
		c := fr.Chunk
		if ChunkFrameLen(c.Len()) != len(data) || c.Len() > SnapshotChunkBuckets || c.Count == 0 || c.Index >= c.Count ||
			c.BucketOffset+uint64(c.Len()) > f.bucketCount {
			t.Fatalf("chunk %+v (len %d) in %d bytes violates its bounds", c, c.Len(), len(data))
		}
		words := make([]uint64, c.Len())
		if c.CopyWords(words) != c.Len() {
			t.Fatal("CopyWords short")
		}
		for i, w := range words {
			if w != c.Word(i) || w != binary.LittleEndian.Uint64(data[HeaderLen+ChunkBodyPrefix+8*i:]) {
				t.Fatalf("word %d differs", i)
			}
		}
	default:
		t.Fatalf("decoded kind %v", h.Kind)
	}
}

func mustCodecError(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Error() == "" {
		t.Fatalf("error %v (%T) is not a codec error", err, err)
	}
}

// FuzzDecode feeds arbitrary bytes to the frame decoder.
func FuzzDecode(f *testing.F) {
	for _, b := range seedFrames(f) {
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		exp := expectedFor(data)
		fr, err := Decode(exp, data)
		if err != nil {
			mustCodecError(t, err)
			return
		}
		checkFrame(t, exp, data, fr)
	})
}

// sealedFrame builds a header that passes every header check, so the fuzzer
// spends its effort on the body decoders behind the checksum.
func sealedFrame(kind Kind, f Format, dc, epoch uint64, body []byte) []byte {
	frame := make([]byte, HeaderLen, HeaderLen+len(body))
	putHeader(frame, kind, f, dc, epoch)
	frame = append(frame, body...)
	sealChecksum(frame)
	return frame
}

// fuzzFormat maps a fuzzed shift to a valid, small lane so the assembler's
// table stays cheap.
func fuzzFormat(seed uint64, shift uint8) Format {
	return Format{seed: seed, bucketCount: 1 << (1 + shift%16)}
}

// FuzzDecodeDeltaBody fuzzes delta bodies behind a valid header.
func FuzzDecodeDeltaBody(f *testing.F) {
	for _, b := range seedFrames(f) {
		if Kind(binary.LittleEndian.Uint16(b[6:8])) == KindDelta {
			f.Add(uint64(0x5EED), uint8(9), uint64(7), uint64(5), b[HeaderLen:])
		}
	}
	f.Add(uint64(1), uint8(0), uint64(0), uint64(0), []byte{})
	f.Fuzz(func(t *testing.T, seed uint64, shift uint8, dc, epoch uint64, body []byte) {
		fm := fuzzFormat(seed, shift)
		data := sealedFrame(KindDelta, fm, dc, epoch, body)
		fr, err := Decode(fm, data)
		d, bodyErr := decodeDeltaBody(fm.bucketCount, body)
		if (err == nil) != (bodyErr == nil) {
			t.Fatalf("frame err %v, body err %v", err, bodyErr)
		}
		if err != nil {
			mustCodecError(t, err)
			var fe, be *Error
			if len(data) <= MaxFrameBytes && (!errors.As(err, &fe) || !errors.As(bodyErr, &be) || fe.Kind != be.Kind) {
				t.Fatalf("frame err %v, body err %v", err, bodyErr)
			}
			return
		}
		if d.BaseEpoch != fr.Delta.BaseEpoch || d.Len() != fr.Delta.Len() {
			t.Fatal("body and frame decoders disagree")
		}
		checkFrame(t, fm, data, fr)
		lane := make([]uint64, fm.bucketCount)
		if err := fr.Delta.ApplyTo(lane); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzDecodeSnapshotChunk fuzzes chunk bodies behind a valid header and feeds
// every decoded chunk to an assembler.
func FuzzDecodeSnapshotChunk(f *testing.F) {
	for _, b := range seedFrames(f) {
		if Kind(binary.LittleEndian.Uint16(b[6:8])) == KindSnapshotChunk {
			f.Add(uint64(0x5EED), uint8(0), uint64(7), uint64(6), b[HeaderLen:])
		}
	}
	f.Fuzz(func(t *testing.T, seed uint64, shift uint8, dc, epoch uint64, body []byte) {
		fm := fuzzFormat(seed, shift)
		data := sealedFrame(KindSnapshotChunk, fm, dc, epoch, body)
		fr, err := Decode(fm, data)
		if _, bodyErr := decodeChunkBody(fm.bucketCount, body); (err == nil) != (bodyErr == nil) {
			t.Fatalf("frame err %v, body err %v", err, bodyErr)
		}
		if err != nil {
			mustCodecError(t, err)
			return
		}
		checkFrame(t, fm, data, fr)
		a, err := NewAssembler(fm)
		if err != nil {
			t.Fatal(err)
		}
		s, done, err := a.Add(fr)
		if err != nil {
			mustCodecError(t, err)
			return
		}
		if done && (uint64(len(s.Words)) != fm.bucketCount || s.Epoch != epoch || s.DcID != dc) {
			t.Fatalf("one-chunk snapshot %d words epoch %d", len(s.Words), s.Epoch)
		}
	})
}

// FuzzAssembler drives an assembler with a fuzzed chunk sequence and checks it
// against a model: it completes exactly when the accepted chunks covered the
// lane contiguously, and then returns exactly the words sent.
func FuzzAssembler(f *testing.F) {
	// Each 4-byte record: index, count, words, flags (bit 0 perturbs the
	// offset, bit 1 the epoch, bit 2 the dc).
	f.Add([]byte{0, 2, 8, 0, 1, 2, 8, 0})
	f.Add([]byte{0, 4, 4, 0, 1, 4, 4, 0, 2, 4, 4, 0, 3, 4, 4, 0})
	f.Add([]byte{1, 2, 8, 0})
	f.Add([]byte{0, 2, 8, 0, 1, 2, 8, 1})
	f.Add([]byte{0, 1, 15, 0})
	f.Fuzz(func(t *testing.T, script []byte) {
		const buckets = 16
		fm := Format{seed: 1, bucketCount: buckets}
		a, err := NewAssembler(fm)
		if err != nil {
			t.Fatal(err)
		}
		var (
			model       [buckets]uint64
			active      bool
			next, count uint32
			covered     uint64
			epoch, dc   uint64
			stamp       uint64
		)
		for len(script) >= 4 {
			index, cnt, nw, flags := uint32(script[0]%6), uint32(script[1]%6), int(script[2]%20), script[3]
			script = script[4:]
			offset := covered
			if flags&1 != 0 {
				offset++
			}
			if index == 0 {
				offset = 0
			}
			e, d := uint64(9), uint64(3)
			if flags&2 != 0 {
				e++
			}
			if flags&4 != 0 {
				d++
			}
			body := binary.LittleEndian.AppendUint32(nil, index)
			body = binary.LittleEndian.AppendUint32(body, cnt)
			body = binary.LittleEndian.AppendUint64(body, offset)
			words := make([]uint64, nw)
			for i := range words {
				stamp++
				words[i] = stamp
				body = binary.LittleEndian.AppendUint64(body, stamp)
			}
			fr, err := Decode(fm, sealedFrame(KindSnapshotChunk, fm, d, e, body))
			if err != nil {
				mustCodecError(t, err)
				continue
			}
			// Model of §5.3.
			if index == 0 {
				active, next, count, covered, epoch, dc = true, 0, cnt, 0, e, d
			}
			ok := active && index == next && cnt == count && e == epoch && d == dc && offset == covered
			s, done, err := a.Add(fr)
			if !ok {
				if !errors.Is(err, ErrChunkSequence) {
					t.Fatalf("model rejects, assembler: done=%v err=%v", done, err)
				}
				active = false
				continue
			}
			copy(model[offset:], words)
			covered += uint64(nw)
			next++
			switch {
			case next < count:
				if err != nil || done {
					t.Fatalf("mid-snapshot: done=%v err=%v", done, err)
				}
			case covered != buckets:
				if !errors.Is(err, ErrIncompleteCoverage) {
					t.Fatalf("incomplete coverage: done=%v err=%v", done, err)
				}
				active = false
			default:
				if err != nil || !done || s.Epoch != epoch || s.DcID != dc {
					t.Fatalf("complete: done=%v err=%v", done, err)
				}
				for i, w := range s.Words {
					if w != model[i] {
						t.Fatalf("word %d = %d, model %d", i, w, model[i])
					}
				}
				active = false
			}
			if a.InProgress() != active {
				t.Fatalf("InProgress %v, model %v", a.InProgress(), active)
			}
		}
	})
}
