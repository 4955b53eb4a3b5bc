package indexer

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// BenchmarkEventToVisible measures, per stored event published on the
// relay's input, how long until a query sees it on the relay's NATS lane and
// on the same relay's kvrelay lane (one indexer follows both), and reports
// p50 and p99 of each and their ratio. Run:
//
//	go test -run '^$' -bench EventToVisible -benchtime 300x ./internal/indexer
func BenchmarkEventToVisible(b *testing.B) {
	e := newEnv(b)
	rr := startKvRelay(b, e, kvRelayConfig("a", "relay-a", 1<<14), "127.0.0.1:0")
	testenv.WaitFor(b, waitTotal, "relay active", func() bool { return rr.r.Status().State == relay.StateActive })
	s := startService(b, e.nc, e.js, kvIndexerConfig(b, rr.addr))
	kvLane := ckf.LaneCount - 1
	natsLane := -1
	testenv.WaitFor(b, waitTotal, "both lanes active", func() bool {
		l, ok := laneByName(s.Service, "a")
		k, kok := laneByName(s.Service, "a-kv")
		natsLane = l.Lane
		return ok && kok && l.State == PhaseActive && k.State == PhaseActive
	})
	subj, err := wire.WorkerEventsSubject(testDomain, "a", 1)
	if err != nil {
		b.Fatal(err)
	}
	var viaNATS, viaKv []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		h := chain(uint64(900_000+i), 1)
		msg := fmt.Sprintf(`{"worker_id":1,"event":{"event_id":%d,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":%d,"tokens_hash":%d}]}}}}`, i+1, uint64(h[0]), uint64(h[0]))
		start := time.Now()
		if _, err := e.js.Publish(testCtx(b), subj, []byte(msg)); err != nil {
			b.Fatal(err)
		}
		var tn, tk time.Duration
		for deadline := start.Add(waitTotal); tn == 0 || tk == 0; {
			if time.Now().After(deadline) {
				b.Fatalf("event %d not visible (nats %s, kvrelay %s)", i, tn, tk)
			}
			resp, err := s.Match(api.Query{Locals: h})
			if err != nil {
				continue
			}
			now := time.Since(start)
			if d, ok := laneDepth(resp, natsLane); ok && d.Depth == 1 && tn == 0 {
				tn = now
			}
			if d, ok := laneDepth(resp, kvLane); ok && d.Depth == 1 && tk == 0 {
				tk = now
			}
			time.Sleep(20 * time.Microsecond)
		}
		viaNATS, viaKv = append(viaNATS, tn), append(viaKv, tk)
	}
	b.StopTimer()
	p := func(d []time.Duration, q float64) float64 {
		slices.Sort(d)
		return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds())
	}
	n50, n99, k50, k99 := p(viaNATS, .50), p(viaNATS, .99), p(viaKv, .50), p(viaKv, .99)
	b.ReportMetric(n50, "nats-p50-µs")
	b.ReportMetric(n99, "nats-p99-µs")
	b.ReportMetric(k50, "kvrelay-p50-µs")
	b.ReportMetric(k99, "kvrelay-p99-µs")
	b.ReportMetric(k50/max(n50, 1), "kvrelay/nats-p50")
	b.ReportMetric(k99/max(n99, 1), "kvrelay/nats-p99")
}
