package engine_test

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/ckfrelay/ckfrelay/internal/engine"
	"github.com/ckfrelay/ckfrelay/internal/engine/enginetest"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

const (
	benchBlockSize      = 16 // vLLM's default
	benchBlocksPerStore = 8
	benchPayloads       = 2048 // distinct batches, cycled: beyond the caches
)

// benchPayloads builds distinct vLLM batches of one engine step: a
// BlockStored of 8 blocks × 16 tokens chained on a parent, one of 8 blocks
// starting a new prefix, and a BlockRemoved of one block.
func benchBatches(f enginetest.Format) (payloads [][]byte, events, blocks int) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range benchPayloads {
		var evs []engine.Event
		for s := range 2 {
			ev := engine.Event{Kind: engine.KindStored, BlockSize: benchBlockSize, Medium: []byte("GPU"),
				BlockHashes: make([]uint64, benchBlocksPerStore), TokenIDs: make([]uint32, benchBlocksPerStore*benchBlockSize)}
			for i := range ev.BlockHashes {
				ev.BlockHashes[i] = rng.Uint64()
			}
			for i := range ev.TokenIDs {
				ev.TokenIDs[i] = rng.Uint32N(152000)
			}
			if s == 0 {
				ev.HasParent, ev.Parent = true, rng.Uint64()
			}
			evs = append(evs, ev)
		}
		evs = append(evs, engine.Event{Kind: engine.KindRemoved, BlockHashes: []uint64{rng.Uint64()}, Medium: []byte("GPU")})
		payloads = append(payloads, enginetest.AppendBatch(nil, 1757500000.25, 0, evs, f))
	}
	return payloads, 3, 2 * benchBlocksPerStore
}

func reportRate(b *testing.B, lat []time.Duration, events, blocks int) {
	el := b.Elapsed().Seconds()
	b.ReportMetric(el*1e9/float64(b.N*events), "ns/event")
	b.ReportMetric(float64(b.N*blocks)/el, "blocks/s")
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns/batch")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns/batch")
		b.ReportMetric(float64(blocks)/lat[len(lat)/2].Seconds(), "p50-blocks/s")
	}
}

// BenchmarkDecodeConvert measures decode + RouterEvent conversion (with
// the canonical tokens_hash of every block) per batch, both encodings,
// next to two baselines on the same payloads: a generic msgpack decode
// (vmihailenco, into interface values) and the tokens hashing alone.
func BenchmarkDecodeConvert(b *testing.B) {
	for _, enc := range []struct {
		name string
		f    enginetest.Format
	}{{"map", enginetest.Format{Map: true}}, {"array", enginetest.Format{}}} {
		payloads, events, blocks := benchBatches(enc.f)
		b.Run("bridge/"+enc.name, func(b *testing.B) {
			var d engine.Decoder
			c := engine.NewConverter(engine.Options{WorkerID: 1, BlockSize: benchBlockSize})
			var st engine.Stats
			buf := make([]byte, 0, 8192)
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				batch, err := d.Decode(payloads[i%len(payloads)])
				if err != nil {
					b.Fatal(err)
				}
				buf, _ = c.Convert(buf[:0], batch, uint64(i), &st)
				lat = append(lat, time.Since(t0))
			}
			reportRate(b, lat, events, blocks)
		})
		b.Run("baseline-msgpack-generic/"+enc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				var v any
				if err := msgpack.NewDecoder(bytes.NewReader(payloads[i%len(payloads)])).Decode(&v); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, nil, events, blocks)
		})
	}
	b.Run("baseline-tokens-hash-only", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(3, 4))
		tokens := make([][]uint32, benchPayloads)
		for i := range tokens {
			tokens[i] = make([]uint32, 2*benchBlocksPerStore*benchBlockSize)
			for j := range tokens[i] {
				tokens[i][j] = rng.Uint32N(152000)
			}
		}
		locals := make([]ckf.LocalBlockHash, 0, 2*benchBlocksPerStore)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			locals = ckf.LocalBlockHashes(locals[:0], tokens[i%len(tokens)], benchBlockSize)
		}
		reportRate(b, nil, 3, 2*benchBlocksPerStore)
	})
}
