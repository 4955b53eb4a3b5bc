package producer

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// BenchmarkCheckpoint encodes and restores a state of 2^20 expected blocks
// filled to 80% of its lane slots (the ApplyEvent benchmark's workload).
func BenchmarkCheckpoint(b *testing.B) {
	for _, mode := range []ckf.HashMode{ckf.HashModeVerbatim, ckf.HashModeCanonical} {
		cfg := ckf.NewConfig(1 << 20)
		cfg.Mode = mode
		s, err := NewState(cfg)
		if err != nil {
			b.Fatal(err)
		}
		d := newBenchDriver(s, 64)
		target := s.Format().BucketCount * 4 * 8 / 10
		for uint64(s.owners.len()) < target {
			d.storeNext()
		}
		s.Flush()
		var buf bytes.Buffer
		if err := s.Checkpoint(&buf); err != nil {
			b.Fatal(err)
		}
		size := int64(buf.Len())
		b.Run(fmt.Sprintf("mode=%s/op=checkpoint", mode), func(b *testing.B) {
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
		b.Run(fmt.Sprintf("mode=%s/op=restore", mode), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(size)
			data := buf.Bytes()
			for b.Loop() {
				if _, err := RestoreState(bytes.NewReader(data), cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
