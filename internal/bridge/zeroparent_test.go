package bridge_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/internal/engine"
	"github.com/ckfrelay/ckfrelay/internal/engine/enginetest"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// The first store of a request in llm-d-inference-sim's default array
// form, as the simulator (v0.10.2) published it:
// ["BlockStored",[h1,h2,h3],0,[48 tokens],16,nil,"GPU",nil,nil] — parent 0
// for "none" — and the next request's store of one more block with parent
// h3 (both captured from the running simulator). Through bridge, relay
// and indexer the prompt is found 4 blocks deep; with parent 0 refused as
// parent_block_not_found it was found 0 deep.
func TestLLMDInferenceSimArrayFormParentZeroIsIndexed(t *testing.T) {
	store, err := os.ReadFile("testdata/llm-d-inference-sim-array-store.msgpack")
	if err != nil {
		t.Fatal(err)
	}
	cont, err := os.ReadFile("testdata/llm-d-inference-sim-array-continuation.msgpack")
	if err != nil {
		t.Fatal(err)
	}
	// The prompt's tokens are the events' own.
	var dec engine.Decoder
	var tokens []uint32
	for i, p := range [][]byte{store, cont} {
		b, err := dec.Decode(p)
		if err != nil || len(b.Events) != 1 {
			t.Fatalf("payload %d: %v", i, err)
		}
		ev := b.Events[0]
		if i == 0 && (!ev.HasParent || ev.Parent != 0 || len(ev.BlockHashes) != 3 || len(ev.TokenIDs) != 48 || ev.BlockSize != 16) {
			t.Fatalf("the captured first store is not the array form with parent 0: %+v", ev)
		}
		if i == 1 && (!ev.HasParent || ev.Parent == 0) {
			t.Fatalf("the continuation has no parent: %+v", ev)
		}
		tokens = append(tokens, ev.TokenIDs...)
	}
	st := newStack(t)
	e := startEngine(t, enginetest.Config{})
	rb := st.startBridge(t, []bridge.EngineSpec{specFor(3, e)}, func(c *bridge.Config) { c.BlockSize = 16 })
	rb.waitConnected(t, e)
	for _, p := range [][]byte{store, cont} {
		if _, err := e.PublishRaw(p); err != nil {
			t.Fatal(err)
		}
	}
	depth := func() int {
		body, _ := json.Marshal(map[string]any{"tokens": tokens, "block_size": 16})
		q, err := api.DecodeMatchRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := st.ix.Match(q)
		if err != nil {
			return -1
		}
		for _, l := range resp.Lanes {
			if l.DC == dc {
				return int(l.Depth)
			}
		}
		return -1
	}
	testenv.WaitFor(t, settle, "the simulator's prompt indexed 4 blocks deep", func() bool { return depth() == 4 })
	if es := rb.engine(0); es.Refused != 0 || es.Refusing != "" {
		t.Fatalf("bridge refused the simulator's events: %+v", es)
	}
}
