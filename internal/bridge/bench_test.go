package bridge_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/internal/engine"
	"github.com/ckfrelay/ckfrelay/internal/engine/enginetest"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// benchBatches are distinct engine steps: two 8-block stores (16 tokens
// per block) and one removal, in vLLM's current map encoding.
func benchBatches(n int) (payloads [][]byte, eventsPerBatch int) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range n {
		var evs []engine.Event
		for range 2 {
			ev := engine.Event{Kind: engine.KindStored, BlockSize: 16, Medium: []byte("GPU"),
				BlockHashes: make([]uint64, 8), TokenIDs: make([]uint32, 8*16)}
			for i := range ev.BlockHashes {
				ev.BlockHashes[i] = rng.Uint64()
			}
			for i := range ev.TokenIDs {
				ev.TokenIDs[i] = rng.Uint32N(152000)
			}
			evs = append(evs, ev)
		}
		evs = append(evs, engine.Event{Kind: engine.KindRemoved, BlockHashes: []uint64{rng.Uint64()}, Medium: []byte("GPU")})
		payloads = append(payloads, enginetest.AppendBatch(nil, 1757500000.25, 0, evs, enginetest.Format{Map: true}))
	}
	return payloads, 3
}

// BenchmarkBridgeToKVEVENTS measures engine batches → acknowledged
// KVEVENTS messages through a fake engine (ZMQ) and the bridge, next to
// the baseline of publishing the same converted messages straight to
// JetStream (async, same window, same Nats-Msg-Id) in the same run.
func BenchmarkBridgeToKVEVENTS(b *testing.B) {
	srv := testenv.StartServer(b)
	js := srv.JetStream(b)
	ctx := context.Background()
	if _, err := streams.Ensure(ctx, js, streams.Options{Memory: true}); err != nil {
		b.Fatal(err)
	}
	payloads, events := benchBatches(4096)
	const window = 1024
	run := 0

	b.Run("baseline-raw-jetstream", func(b *testing.B) {
		run++
		// Convert outside the timer: the baseline is the publish alone.
		var d engine.Decoder
		c := engine.NewConverter(engine.Options{WorkerID: 1})
		msgs := make([][]byte, len(payloads))
		for i, p := range payloads {
			batch, err := d.Decode(p)
			if err != nil {
				b.Fatal(err)
			}
			var st engine.Stats
			msgs[i], _ = c.Convert(nil, batch, uint64(i), &st)
		}
		subject := fmt.Sprintf("kvevents.bench.raw.%d", run)
		pending := make([]jetstream.PubAckFuture, 0, window)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if len(pending) == window {
				<-pending[0].Ok()
				pending = pending[1:]
			}
			m := &nats.Msg{Subject: subject, Data: msgs[i%len(msgs)]}
			f, err := js.PublishMsgAsync(m, jetstream.WithMsgID(fmt.Sprintf("raw#%d#%d", run, i)))
			if err != nil {
				b.Fatal(err)
			}
			pending = append(pending, f)
		}
		for _, f := range pending {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*events)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
	})

	b.Run("baseline-zmq-transport", func(b *testing.B) {
		e, err := enginetest.Start(enginetest.Config{ReplayEndpoint: "-"})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		sub := zmq4.NewSub(sctx)
		defer sub.Close()
		if err := sub.Dial(e.PubEndpoint()); err != nil {
			b.Fatal(err)
		}
		if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
			b.Fatal(err)
		}
		if err := e.WaitSubscribed(sctx); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		go func() {
			for i := range b.N {
				if _, err := e.PublishRaw(payloads[i%len(payloads)]); err != nil {
					return
				}
			}
		}()
		for range b.N {
			if _, err := sub.Recv(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*events)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
	})

	b.Run("bridge", func(b *testing.B) {
		run++
		e, err := enginetest.Start(enginetest.Config{Format: enginetest.Format{Map: true}})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		br, err := bridge.New(bridge.Config{Domain: "bench", DC: "br", Engines: []bridge.EngineSpec{{WorkerID: uint64(run),
			Pub: e.PubEndpoint(), Replay: e.ReplayEndpoint()}}, Streams: streams.Options{Memory: true},
			MaxInFlight: window, Metrics: prometheus.NewRegistry()}, js)
		if err != nil {
			b.Fatal(err)
		}
		bctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- br.Run(bctx) }()
		defer func() { cancel(); <-done }()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		if err := e.WaitSubscribed(wctx); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := e.PublishRaw(payloads[i%len(payloads)]); err != nil {
				b.Fatal(err)
			}
		}
		for {
			st := br.Status()
			if a := st.Engines[0].AckedSeq; a != nil && *a == uint64(b.N-1) {
				break
			}
			if wctx.Err() != nil && b.Elapsed() > 10*time.Minute {
				b.Fatal("bridge did not catch up")
			}
			time.Sleep(200 * time.Microsecond)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N*events)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "batches/s")
	})
}
