package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/internal/engine"
	"github.com/ckfrelay/ckfrelay/internal/engine/enginetest"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// TestEngineEventsCarryTheQueryMapping checks that a step's events, sent
// through a fake engine's encoding and the bridge's conversion, come out
// with the same engine hashes and parents and with tokens_hash =
// engineLocal(trace local), the mapping queries use.
func TestEngineEventsCarryTheQueryMapping(t *testing.T) {
	reqs, err := replay.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	rp, err := replay.New(replay.Config{DCs: []string{"a"}, WorkersPerDC: 2, CapacityBlocks: 64, Duplication: 1, Affinity: 0.8, Seed: 1}, reqs[:200])
	if err != nil {
		t.Fatal(err)
	}
	conv := map[uint64]*engine.Converter{}
	var dec engine.Decoder
	kinds := map[routerevent.EventKind]int{}
	for {
		step, ok := rp.Next()
		if !ok {
			break
		}
		evs, _ := toEngineEvents(nil, nil, step.Events)
		if len(evs) != len(step.Events) {
			t.Fatalf("%d events became %d", len(step.Events), len(evs))
		}
		c := conv[step.Worker]
		if c == nil {
			c = engine.NewConverter(engine.Options{WorkerID: step.Worker, BlockSize: zmqBlockSize})
			conv[step.Worker] = c
		}
		b, err := dec.Decode(appendBatch(evs))
		if err != nil {
			t.Fatal(err)
		}
		var st engine.Stats
		out, _ := c.Convert(nil, b, 1, &st)
		got, err := routerevent.DecodeRouterEvents(out)
		if err != nil || len(got) != len(step.Events) {
			t.Fatalf("converted %d events (%v), want %d", len(got), err, len(step.Events))
		}
		for i, want := range step.Events {
			g := got[i].Event.Data
			kinds[g.Kind]++
			if g.Kind != want.Event.Data.Kind {
				t.Fatalf("kind %v want %v", g.Kind, want.Event.Data.Kind)
			}
			if g.Kind != routerevent.EventStored {
				continue
			}
			ws := want.Event.Data.Stored
			if (ws.ParentHash == nil) != (g.Stored.ParentHash == nil) || (ws.ParentHash != nil && *ws.ParentHash != *g.Stored.ParentHash) {
				t.Fatalf("parent %v want %v", g.Stored.ParentHash, ws.ParentHash)
			}
			for j, blk := range ws.Blocks {
				if g.Stored.Blocks[j].BlockHash != blk.BlockHash || g.Stored.Blocks[j].TokensHash != uint64(engineLocal(ckf.LocalBlockHash(blk.TokensHash))) {
					t.Fatalf("block %d: %+v, want hash %x tokens_hash %x", j, g.Stored.Blocks[j], blk.BlockHash, engineLocal(ckf.LocalBlockHash(blk.TokensHash)))
				}
			}
		}
	}
	if kinds[routerevent.EventStored] == 0 || kinds[routerevent.EventRemoved] == 0 {
		t.Fatalf("workload exercised only %v", kinds)
	}
}

// TestVLLMZMQModeFeedsABridge runs the replayer in vllm-zmq mode against
// an embedded server with a bridge reading the engines files it writes:
// every batch reaches KVEVENTS.
func TestVLLMZMQModeFeedsABridge(t *testing.T) {
	srv := testenv.StartServer(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb testenv.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--nats-url", srv.URL(), "--domain", "z", "--dcs", "a", "--engine", "vllm-zmq",
			"--zmq-engines-dir", dir, "--workers-per-dc", "2", "--max-requests", "100", "--speed", "0",
			"--indexer-url", "", "--zmq-wait", "30s"}, func(string) string { return "" }, &out, &errb)
	}()
	path := filepath.Join(dir, "a.engines")
	var specs []bridge.EngineSpec
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		specs, err = bridge.ParseEngines(f)
		return err
	})
	js := srv.JetStream(t)
	b, err := bridge.New(bridge.Config{Domain: "z", DC: "a", Engines: specs, Streams: streams.Options{Memory: true}, Logger: zerolog.Nop()}, js)
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(context.Background())
	bdone := make(chan error, 1)
	go func() { bdone <- b.Run(bctx) }()
	defer func() { bcancel(); <-bdone }()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	case <-ctx.Done():
		t.Fatal("replayer did not finish")
	}
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		s, err := js.Stream(ctx, streams.EventStream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("kvevents.z.a.>"))
		if err != nil {
			return err
		}
		var batches uint64
		for _, e := range b.Status().Engines {
			batches += e.Batches
		}
		if batches == 0 || info.State.Msgs != batches {
			return errorf("KVEVENTS %d messages, bridge applied %d batches", info.State.Msgs, batches)
		}
		return nil
	})
}

func appendBatch(evs []engine.Event) []byte {
	return enginetest.AppendBatch(nil, 1, 0, evs, enginetest.Format{Map: true})
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }
