package consumer

import (
	"strconv"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// BenchmarkInstallSnapshot measures how long one lane's snapshot install
// holds its ingestion worker (every other lane of that worker waits behind
// it) with all 16 lanes configured.
func BenchmarkInstallSnapshot(b *testing.B) {
	for _, buckets := range []uint64{1 << 20, 1 << 22} {
		b.Run(strconv.FormatUint(buckets, 10)+"-buckets", func(b *testing.B) {
			format := ckf.NewFormatIdentity(ckf.DefaultSeed, buckets)
			domain := poolTestDomain(1)
			var lanes [ckf.LaneCount]*ckf.PoolID
			for l := range ckf.LaneCount {
				lanes[l] = &ckf.PoolID{Domain: domain, Dc: ckf.DcID(l + 1)}
			}
			ix := defaultIndexer(b, 1, domain, format, lanes)
			cfg := DefaultPoolConfig()
			cfg.MaxDirtyToAppliedAge = time.Minute
			p, err := NewPool(ix, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			words := make([]uint64, buckets)
			for i := range words {
				words[i] = uint64(i)*0x9E3779B97F4A7C15 | 1
			}
			install := func(epoch uint64) {
				id := ckf.ProducerIdentity{Pool: *lanes[15], ProducerIncarnation: epoch, LayoutGeneration: 1, Format: format}
				lease := ckf.LaneLease{ConsumerInstance: 1, PhysicalLane: 15, AssignmentEpoch: epoch}
				if err := p.Assign(id, lease); err != nil {
					b.Fatal(err)
				}
				if out, err := p.InstallSnapshot(&ckf.Snapshot{Identity: id, Lease: lease, Sequence: 1, Buckets: words}); err != nil || out.Kind != OutcomeSnapshotInstalled {
					b.Fatal(out, err)
				}
			}
			install(1) // the first touch of the table's pages is not what repeats
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				install(uint64(i) + 2)
			}
		})
	}
}
