package bridge_test

import (
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/internal/engine/enginetest"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// An engine whose every store has another block_size than the bridge's
// --block-size is refused whole: the bridge logs one warning (rate-limited)
// with the reason and a sample, and its status names the engine as
// refusing until the window slides past the refusals.
func TestAnEngineWhoseEventsAreRefusedShowsInTheStatus(t *testing.T) {
	st := newStack(t)
	rng := rand.New(rand.NewPCG(21, 22))
	bad := startEngine(t, enginetest.Config{})
	good := startEngine(t, enginetest.Config{})
	logs := &testenv.LogBuffer{}
	var clock atomic.Int64
	clock.Store(time.Unix(1_800_000_000, 0).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	rb := st.startBridge(t, []bridge.EngineSpec{specFor(1, bad), specFor(2, good)}, func(c *bridge.Config) {
		c.Logger, c.Now = zerolog.New(logs), now
	})
	rb.waitConnected(t, bad, good)
	for range 10 {
		r := newRequest(rng, 2)
		ev := r.store(0, 2)
		ev.BlockSize = 16 // the bridge's --block-size is blockSize (4)
		publish(t, bad, ev)
		publish(t, good, newRequest(rng, 1).store(0, 1))
	}
	last := newRequest(rng, 2)
	publish(t, good, last.store(0, 2))
	st.waitDepth(t, last.tokens, "", 2)
	testenv.WaitFor(t, 0, "refusals counted", func() bool { return rb.engine(0).Refused == 10 })
	es, ok := rb.engine(0), rb.engine(1)
	if want := "10 of 10 recent events refused (block_size_mismatch)"; es.Refusing != want {
		t.Fatalf("engine 1 refusing %q, want %q", es.Refusing, want)
	}
	if ok.Refusing != "" || ok.Refused != 0 {
		t.Fatalf("the healthy engine is named: %+v", ok)
	}
	warns := logs.Lines(`"message":"engine events refused`)
	if len(warns) != 1 {
		t.Fatalf("%d warnings, want 1 (rate-limited):\n%s", len(warns), strings.Join(warns, "\n"))
	}
	for _, f := range []string{`"level":"warn"`, `"worker_id":1`, `"reason":"block_size_mismatch"`, `"sample_seq":`, `"sample_payload_head":"`} {
		if !strings.Contains(warns[0], f) {
			t.Errorf("warning lacks %s: %s", f, warns[0])
		}
	}
	clock.Add(int64(31 * time.Second))
	if es := rb.engine(0); es.Refusing != "" || es.Refused != 10 {
		t.Fatalf("after the window: %+v", es)
	}
}
