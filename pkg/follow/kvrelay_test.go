package follow

import (
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// kvSpec is the descriptor metadata the test relays publish.
var kvSpec = server.PoolSpec{Model: "llama", Namespace: "prod", Component: "backend", Endpoint: "generate", BlockSize: 64}

func kvIndexerConfig(t testing.TB, addr string) Config {
	cfg := testConfig(t)
	cfg.KvRelay = KvRelayConfig{Sources: []KvRelaySource{{Name: "a-kv", Addr: addr}}, Model: "llama", BlockSize: 64, AcceptLegacy: true,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond, FrameTimeout: 3 * time.Second}
	return cfg
}

func laneByName(s *Service, name string) (api.LaneStatus, bool) {
	for _, l := range s.Lanes() {
		if l.DC == name {
			return l, true
		}
	}
	return api.LaneStatus{}, false
}

// A lane map entry of the name a kvrelay source holds is refused (and so
// is one landing on its lane); the kvrelay lane keeps its place.
func TestKvRelayNameCollisionWithANATSLane(t *testing.T) {
	e := newEnv(t)
	r := newFakeRelay(t, e.js, testDomain, "a-kv", testBlocks)
	r.register()
	r.takeEpoch()
	s := startService(t, e.nc, e.js, kvIndexerConfig(t, "127.0.0.1:1"))
	testenv.WaitFor(t, waitTotal, "collision counted", func() bool {
		v, ok, _ := promtest.Value(s.Metrics(), MetricLaneMapRejected+`{entry="kvrelay"}`)
		return ok && v >= 1
	})
	rows := s.Lanes()
	if len(rows) != 1 || rows[0].Source != SourceKvRelay || rows[0].Lane != ckf.LaneCount-1 {
		t.Fatalf("lanes %+v", rows)
	}
}
