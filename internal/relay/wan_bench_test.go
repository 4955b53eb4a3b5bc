package relay_test

import (
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/wanproxy"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// BenchmarkRelayKeepsUpOverAWAN floods a relay whose lane connection
// crosses a WAN link (ckf-wanproxy at a set RTT) while its input is local,
// as in a DC: single-block Stored events, each its own message, published
// ahead of the relay. It reports the events/s the relay applies and the
// events per published delta. One delta is in flight at a time, so the
// rate is about (events per delta) / RTT.
func BenchmarkRelayKeepsUpOverAWAN(b *testing.B) {
	for _, rtt := range []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond} {
		b.Run(fmt.Sprintf("rtt=%s", rtt), func(b *testing.B) {
			const events = 20000
			for range b.N {
				rate, perDelta := relayOverWAN(b, rtt, events)
				b.ReportMetric(rate, "events/s")
				b.ReportMetric(perDelta, "events/delta")
			}
		})
	}
}

func relayOverWAN(b *testing.B, rtt time.Duration, events int) (rate, perDelta float64) {
	b.StopTimer()
	srv := testenv.StartServer(b)
	local := srv.Connect(b)
	inputJS, err := jetstream.New(local, jetstream.WithPublishAsyncMaxPending(events))
	if err != nil {
		b.Fatal(err)
	}
	host := srv.NATS().Addr().(*net.TCPAddr)
	link, err := wanproxy.New(wanproxy.Config{Name: "bench", Routes: []wanproxy.Route{{Listen: "127.0.0.1:0", Target: host.String()}}, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { link.Close() })
	if rtt > 0 {
		if err := link.SetLatency(wanproxy.Latency{Delay: wanproxy.Duration(rtt / 2)}, wanproxy.Up, wanproxy.Down); err != nil {
			b.Fatal(err)
		}
	}
	wanNC, err := nats.Connect("nats://" + link.Routes()[0].Listen)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(wanNC.Close)
	wanJS, err := jetstream.New(wanNC)
	if err != nil {
		b.Fatal(err)
	}
	cfg := testConfig("a")
	cfg.PublishInterval = relay.DefaultConfig(domain, "a").PublishInterval // production cadence
	cfg.LeaseTTL = 10 * time.Second
	cfg.HeartbeatInterval = time.Second
	cfg.InputJS = inputJS
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	r, _ := startRelay(b, wanNC, wanJS, cfg)
	testenv.WaitFor(b, 30*time.Second, "active", func() bool { return r.Status().State == relay.StateActive })

	subj, _ := wire.WorkerEventsSubject(domain, "a", 1)
	msgs := make([][]byte, events)
	for i := range msgs {
		h := uint64(i+1) * 0x9E3779B97F4A7C15
		ev := []routerevent.RouterEvent{{WorkerID: 1, Event: routerevent.KvCacheEvent{EventID: uint64(i),
			Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{Blocks: []routerevent.StoredBlock{{BlockHash: h, TokensHash: h}}}}}}}
		if msgs[i], err = json.Marshal(ev); err != nil {
			b.Fatal(err)
		}
	}
	before := r.Status()
	b.StartTimer()
	start := time.Now()
	for _, m := range msgs {
		if _, err := inputJS.PublishAsync(subj, m); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-inputJS.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("input publishes not acknowledged")
	}
	testenv.WaitFor(b, 5*time.Minute, "every event applied", func() bool { return r.Status().Events-before.Events >= uint64(events) })
	took := time.Since(start)
	b.StopTimer()
	after := r.Status()
	deltas := float64(after.Sequence - before.Sequence)
	return float64(events) / took.Seconds(), float64(events) / max(deltas, 1)
}
