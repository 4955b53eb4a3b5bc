package producer

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// BenchmarkCheckpoint encodes and restores states of 2^20 expected blocks
// in two shapes:
//
//   - distinct: 64 members with disjoint blocks filling 80% of the lane's
//     slots (the ApplyEvent benchmark's workload);
//   - shared: 64 workers caching the same 2^16 blocks (a common system
//     prompt): 1/16 of the unique blocks of distinct, but 4.2M edges, one
//     table of the prefix's size per worker.
func BenchmarkCheckpoint(b *testing.B) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		for _, shape := range []string{"distinct", "shared"} {
			cfg := ckf.NewConfig(1 << 20)
			cfg.Mode = mode
			s, err := NewState(cfg)
			if err != nil {
				b.Fatal(err)
			}
			switch shape {
			case "distinct":
				d := newBenchDriver(s, 64)
				target := s.Format().BucketCount * 4 * 8 / 10
				for uint64(s.owners.len()) < target {
					d.storeNext()
				}
			case "shared":
				for w := range uint64(64) {
					storeRange(s, w, 1, 1<<16)
				}
			}
			s.Flush()
			var buf bytes.Buffer
			if err := s.Checkpoint(&buf); err != nil {
				b.Fatal(err)
			}
			size := int64(buf.Len())
			name := fmt.Sprintf("mode=%s/shape=%s", mode, shape)
			b.Run(name+"/op=checkpoint", func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(size)
				for b.Loop() {
					buf.Reset()
					if err := s.Checkpoint(&buf); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(size)/(1<<20), "MiB/checkpoint")
			})
			b.Run(name+"/op=restore", func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(size)
				data := buf.Bytes()
				for b.Loop() {
					if _, err := RestoreState(bytes.NewReader(data), cfg); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(s.UniqueBlocks()), "blocks")
				b.ReportMetric(float64(len(s.members)), "members")
			})
		}
	}
}
