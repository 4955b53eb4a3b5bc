package consumer_test

import (
	"math/rand/v2"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// BenchmarkPipelineApplyEvent measures 16-block stored events end to end:
// producer state, publisher, image copy, pool admission and the worker's
// application, including an exact drain every benchDrainEvery iterations so
// the bounded lane FIFO never saturates. To hold occupancy steady each
// iteration also removes the chain stored benchWindow iterations earlier;
// blocks/s counts stored blocks only.
func BenchmarkPipelineApplyEvent(b *testing.B) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		b.Run(mode.String(), func(b *testing.B) { benchApply(b, mode) })
	}
}

const (
	benchBlocks     = 16
	benchChains     = 1024
	benchWindow     = benchChains / 2
	benchDrainEvery = 128
)

func benchApply(b *testing.B, mode ckf.HashMode) {
	cfg := ckf.NewConfig(benchWindow * benchBlocks * 2)
	cfg.Mode = mode
	pool := newSharedPool(b, cfg, poolOptions{workers: 1, queue: 1024, imagesPerLane: 64}, laneSpec{lane: seedLane, dc: seedDc})
	p := newPipeline(b, cfg, fixtureIdentity(b, cfg, seedDc), fixtureLease(seedLane, 1), pool)

	rng := rand.New(rand.NewPCG(7, 13))
	stores := make([]*routerevent.RouterEvent, benchChains)
	removes := make([]*routerevent.RouterEvent, benchChains)
	for j := range benchChains {
		locals := make([]ckf.LocalBlockHash, benchBlocks)
		for i := range locals {
			locals[i] = ckf.LocalBlockHash(rng.Uint64())
		}
		seqs := ckf.SequenceHashes(nil, locals)
		blocks := make([]routerevent.StoredBlock, benchBlocks)
		hashes := make([]uint64, benchBlocks)
		for i, s := range seqs {
			ext := uint64(s)
			if mode == ckf.HashModeCanonical {
				ext = engineHash(s)
			}
			blocks[i] = routerevent.StoredBlock{BlockHash: ext, TokensHash: uint64(locals[i])}
			hashes[i] = ext
		}
		stores[j] = &routerevent.RouterEvent{WorkerID: 1, Event: routerevent.KvCacheEvent{
			Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{Blocks: blocks}}}}
		removes[j] = &routerevent.RouterEvent{WorkerID: 1, Event: routerevent.KvCacheEvent{
			Data: routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{BlockHashes: hashes}}}}
	}

	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		res, err := p.apply(stores[i%benchChains])
		if err != nil || res.FirstError != nil {
			b.Fatalf("store %d: %+v, %v", i, res, err)
		}
		if i >= benchWindow {
			if _, err := p.apply(removes[(i-benchWindow)%benchChains]); err != nil {
				b.Fatalf("remove %d: %v", i, err)
			}
		}
		if i%benchDrainEvery == benchDrainEvery-1 {
			if _, _, err := p.drain(); err != nil {
				b.Fatalf("drain at %d: %v", i, err)
			}
		}
	}
	if _, _, err := p.drain(); err != nil {
		b.Fatalf("final drain: %v", err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchBlocks)/b.Elapsed().Seconds(), "blocks/s")
	assertLaneConverged(b, p)
}
