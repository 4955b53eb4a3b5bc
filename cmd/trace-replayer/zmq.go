package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/internal/engine"
	"github.com/ckfrelay/ckfrelay/internal/engine/enginetest"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// In --engine vllm-zmq mode every simulated worker is a fake vLLM engine
// (enginetest) publishing msgpack batches over ZMQ; an engine-bridge per
// DC turns them back into KVEVENTS input. The trace carries Dynamo local
// hashes, not tokens, so each block gets zmqBlockSize synthetic tokens
// derived from its local hash; the bridge then computes the local hash of
// those tokens (engineLocal), and queries use that mapping.
const zmqBlockSize = 4

// synthTokens appends a block's synthetic tokens.
func synthTokens(dst []uint32, local uint64) []uint32 {
	return append(dst, uint32(local), uint32(local>>32), uint32(local)^0x9e3779b9, uint32(local>>32)^0x7f4a7c15)
}

// engineLocal is the local hash the bridge derives for a trace block.
func engineLocal(local ckf.LocalBlockHash) ckf.LocalBlockHash {
	var tok [zmqBlockSize]uint32
	return ckf.LocalBlockHashes(nil, synthTokens(tok[:0], uint64(local)), zmqBlockSize)[0]
}

// queryLocals maps a request's trace locals to what the indexer holds in
// the current mode.
func (o *options) queryLocals(locals []ckf.LocalBlockHash) []ckf.LocalBlockHash {
	if o.engineMode != engineVLLMZMQ {
		return locals
	}
	out := make([]ckf.LocalBlockHash, len(locals))
	for i, l := range locals {
		out[i] = engineLocal(l)
	}
	return out
}

const (
	engineDynamo  = "dynamo"
	engineVLLMZMQ = "vllm-zmq"
)

// zmqFleet is one fake engine per simulated worker.
type zmqFleet struct {
	engines map[uint64]*enginetest.Engine
	events  []engine.Event
	tokens  []uint32
}

// startFleet binds every worker's engine on host, PUB on basePort+2k and
// replay on basePort+2k+1 (0 = random ports), and writes one engines file
// per DC (<dir>/<dc>.engines) for `engine-bridge --engines-file`.
func startFleet(o *options, stdout interface{ Write([]byte) (int, error) }) (*zmqFleet, error) {
	f := &zmqFleet{engines: map[uint64]*enginetest.Engine{}}
	k := 0
	format := enginetest.Format{Map: o.zmqFormat == "map"}
	for dc, name := range o.rcfg.DCs {
		var lines []string
		for w := range o.rcfg.WorkersPerDC {
			pub, rep := "tcp://"+o.zmqHost+":0", "tcp://"+o.zmqHost+":0"
			if o.zmqBasePort > 0 {
				pub = fmt.Sprintf("tcp://%s:%d", o.zmqHost, o.zmqBasePort+2*k)
				rep = fmt.Sprintf("tcp://%s:%d", o.zmqHost, o.zmqBasePort+2*k+1)
			}
			k++
			e, err := enginetest.Start(enginetest.Config{PubEndpoint: pub, ReplayEndpoint: rep, Format: format, Layout: enginetest.LayoutB})
			if err != nil {
				f.close()
				return nil, err
			}
			id := replay.WorkerID(dc, w)
			f.engines[id] = e
			lines = append(lines, bridge.EngineSpec{WorkerID: id, Pub: e.PubEndpoint(), Replay: e.ReplayEndpoint()}.String())
		}
		path := filepath.Join(o.zmqEnginesDir, name+".engines")
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			f.close()
			return nil, fmt.Errorf("engines file: %w", err)
		}
		fmt.Fprintf(stdout, "fake vLLM engines of %s: engine-bridge --dc %s --engines-file %s\n", name, name, path)
	}
	return f, nil
}

// waitSubscribed waits until every engine has a subscriber (a bridge).
func (f *zmqFleet) waitSubscribed(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for id, e := range f.engines {
		if err := e.WaitSubscribed(ctx); err != nil {
			return fmt.Errorf("engine of worker %d has no subscriber (is an engine-bridge running with its engines file?): %w", id, err)
		}
	}
	return nil
}

// publish sends one step's events as one batch of its worker's engine and
// returns how many events it carried.
func (f *zmqFleet) publish(step replay.Step) (int, error) {
	e, ok := f.engines[step.Worker]
	if !ok {
		return 0, fmt.Errorf("no engine for worker %d", step.Worker)
	}
	f.events, f.tokens = toEngineEvents(f.events[:0], f.tokens[:0], step.Events)
	if len(f.events) == 0 {
		return 0, nil
	}
	if _, err := e.Publish(f.events...); err != nil {
		return 0, err
	}
	return len(f.events), nil
}

// toEngineEvents converts RouterEvents into vLLM events with synthetic
// tokens. tokens backs the events' TokenIDs and is returned for reuse.
func toEngineEvents(dst []engine.Event, tokens []uint32, evs []routerevent.RouterEvent) ([]engine.Event, []uint32) {
	need := 0
	for i := range evs {
		need += len(evs[i].Event.Data.Stored.Blocks) * zmqBlockSize
	}
	if cap(tokens) < need {
		tokens = make([]uint32, 0, need)
	}
	for i := range evs {
		d := &evs[i].Event.Data
		switch d.Kind {
		case routerevent.EventStored:
			start := len(tokens)
			hashes := make([]uint64, len(d.Stored.Blocks))
			for j, b := range d.Stored.Blocks {
				hashes[j] = b.BlockHash
				tokens = synthTokens(tokens, b.TokensHash)
			}
			ev := engine.Event{Kind: engine.KindStored, BlockHashes: hashes, TokenIDs: tokens[start:len(tokens):len(tokens)],
				BlockSize: zmqBlockSize, Medium: []byte("GPU")}
			if d.Stored.ParentHash != nil {
				ev.HasParent, ev.Parent = true, *d.Stored.ParentHash
			}
			dst = append(dst, ev)
		case routerevent.EventRemoved:
			dst = append(dst, engine.Event{Kind: engine.KindRemoved, BlockHashes: d.Removed.BlockHashes, Medium: []byte("GPU")})
		case routerevent.EventCleared:
			dst = append(dst, engine.Event{Kind: engine.KindCleared})
		}
	}
	return dst, tokens
}

func (f *zmqFleet) close() {
	for _, e := range f.engines {
		e.Close()
	}
}
