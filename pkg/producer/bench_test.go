package producer

import (
	"fmt"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/testenv/cputime"
)

const benchBlocksPerEvent = 16

func benchMix(v uint64) uint64 {
	v += 0x9E3779B97F4A7C15
	v = (v ^ v>>30) * 0xBF58476D1CE4E5B9
	v = (v ^ v>>27) * 0x94D049BB133111EB
	return v ^ v>>31
}

// benchDriver stores 16-block events with fresh hashes and removes the
// oldest live event, keeping the lane at a fixed load. The two events are
// reused so the loop itself allocates nothing.
type benchDriver struct {
	s        *State
	members  uint64
	next     uint64 // id of the next event to store
	oldest   uint64 // id of the oldest live event
	store    routerevent.RouterEvent
	removeEv routerevent.RouterEvent
}

func newBenchDriver(s *State, members uint64) *benchDriver {
	d := &benchDriver{s: s, members: members}
	d.store.Event.Data = routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{Blocks: make([]routerevent.StoredBlock, benchBlocksPerEvent)}}
	d.removeEv.Event.Data = routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{BlockHashes: make([]uint64, benchBlocksPerEvent)}}
	return d
}

func (d *benchDriver) ext(id uint64, i int) uint64 {
	return benchMix(id*benchBlocksPerEvent + uint64(i))
}

func (d *benchDriver) storeNext() EventOutcome {
	id := d.next
	d.next++
	d.store.WorkerID, d.store.Event.DpRank = id%d.members, 0
	for i := range d.store.Event.Data.Stored.Blocks {
		h := d.ext(id, i)
		d.store.Event.Data.Stored.Blocks[i] = routerevent.StoredBlock{BlockHash: h, TokensHash: h ^ 0x5555}
	}
	return d.s.ApplyEvent(&d.store)
}

func (d *benchDriver) removeOldest() EventOutcome {
	id := d.oldest
	d.oldest++
	d.removeEv.WorkerID, d.removeEv.Event.DpRank = id%d.members, 0
	for i := range d.removeEv.Event.Data.Removed.BlockHashes {
		d.removeEv.Event.Data.Removed.BlockHashes[i] = d.ext(id, i)
	}
	return d.s.ApplyEvent(&d.removeEv)
}

func BenchmarkProducerApplyEvent(b *testing.B) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		b.Run(fmt.Sprintf("mode=%s", mode), func(b *testing.B) {
			cfg := ckf.NewConfig(1 << 20)
			cfg.Mode = mode
			s, err := NewState(cfg)
			if err != nil {
				b.Fatal(err)
			}
			d := newBenchDriver(s, 64)
			// Fill to ~80% of the physical slots.
			target := s.Format().BucketCount * 4 * 8 / 10
			for uint64(s.owners.len()) < target {
				d.storeNext()
			}
			b.ReportAllocs()
			var failures uint64
			cpu0 := cputime.Process()
			for b.Loop() {
				if out := d.storeNext(); out.FirstError != nil {
					failures++
				}
				if out := d.removeOldest(); out.FirstError != nil {
					b.Fatalf("remove: %v", out.FirstError)
				}
			}
			cpu := cputime.Process() - cpu0
			blocks := float64(b.N) * 2 * benchBlocksPerEvent
			b.ReportMetric(blocks/b.Elapsed().Seconds(), "blocks/s")
			if cpu > 0 {
				b.ReportMetric(blocks/cpu.Seconds(), "blocks/cpu-s")
			}
			b.ReportMetric(float64(s.Stats().OccupiedSlots)/float64(s.Format().BucketCount*4), "load")
			b.ReportMetric(float64(failures), "capacity_failures")
		})
	}
}

// TestApplyEventSteadyStateDoesNotAllocate pins the zero-allocation hot path.
func TestApplyEventSteadyStateDoesNotAllocate(t *testing.T) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		cfg := ckf.NewConfig(1 << 12)
		cfg.Mode = mode
		s := mustState(t, cfg)
		d := newBenchDriver(s, 8)
		for range 2000 {
			d.storeNext()
			d.removeOldest()
		}
		for range 64 {
			d.storeNext()
		}
		allocs := testing.AllocsPerRun(500, func() {
			if out := d.storeNext(); out.FirstError != nil {
				panic(out.FirstError)
			}
			if out := d.removeOldest(); out.FirstError != nil {
				panic(out.FirstError)
			}
		})
		if allocs > 0.1 {
			t.Fatalf("%s: %.2f allocations per store+remove pair", mode, allocs)
		}
		if err := checkInvariants(s); err != nil {
			t.Fatal(err)
		}
	}
}
