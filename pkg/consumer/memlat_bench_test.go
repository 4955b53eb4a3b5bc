package consumer

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// BenchmarkMemoryLatency is the machine's floor under the cold query: a
// pointer chase through a random cycle of 64-byte lines in memory
// allocated like the query table (16 lanes × 4,194,304 buckets = 512 MiB,
// 2 MiB pages when the kernel grants them), so each step is one dependent
// miss to DRAM (ns/op = one miss). chains=k follows k independent cycles
// at once: with enough misses in flight the time per line falls to what
// memory-level parallelism allows, which is what the query's prefetches
// buy.
func BenchmarkMemoryLatency(b *testing.B) {
	t, err := newTable(4194304)
	if err != nil {
		b.Fatal(err)
	}
	// The mapping is the table's: it must outlive every load below.
	defer runtime.KeepAlive(t)
	words := t.words
	const lineWords = 8
	lines := uint64(len(words)) / lineWords
	// One random cycle over every line: next[i] is stored in line i's
	// first word as the index of the following line.
	rng := rand.New(rand.NewPCG(1, 2))
	perm := make([]uint32, lines)
	for i := range perm {
		perm[i] = uint32(i)
	}
	rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	for i := range perm {
		words[uint64(perm[i])*lineWords].Store(uint64(perm[(i+1)%len(perm)]))
	}
	perm = nil
	mem := t.memory()
	frac := float64(mem.HugePageBytes) / float64(mem.Bytes)
	for _, chains := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("chains=%d", chains), func(b *testing.B) {
			pos := make([]uint64, chains)
			for c := range pos {
				pos[c] = uint64(c) * (lines / uint64(chains))
			}
			b.ResetTimer()
			for range b.N {
				for c := range pos {
					pos[c] = words[pos[c]*lineWords].Load()
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chains), "ns/line")
			b.ReportMetric(frac, "hugepage-frac")
			sink := uint64(0)
			for _, p := range pos {
				sink ^= p
			}
			if sink == 1<<63 {
				b.Log(sink)
			}
		})
	}
}
