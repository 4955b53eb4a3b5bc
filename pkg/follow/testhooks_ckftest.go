//go:build ckftest

package follow

import (
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/consumer"
)

// SetPoolClockForTest gives the ingestion pools s builds from now on the
// clock now (admission times and the lag watchdog). Call it before Run.
// It exists only in builds with the ckftest tag, for other packages' tests.
func SetPoolClockForTest(s *Service, now func() time.Time) {
	s.newPool = func(ix *consumer.Indexer, cfg consumer.PoolConfig) (*consumer.Pool, error) {
		return consumer.NewPoolWithClockForTest(ix, cfg, now)
	}
}

// PoolForTest is s's current ingestion pool (nil before the first lane's
// format is known).
func PoolForTest(s *Service) *consumer.Pool {
	if g := s.gen.Load(); g != nil {
		return g.pool
	}
	return nil
}
