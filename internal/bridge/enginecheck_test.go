package bridge_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// The engine check (scripts/engine-check.sh) runs a third-party engine,
// llm-d's vLLM simulator, through the bridge, relay and indexer in both of
// its event forms, and holds the index to the engine's own word: before
// every request, the depth the index answers for the prompt's tokens must
// equal the engine's usage.prompt_tokens_details.cached_tokens ÷ the block
// size, through stores, shared prefixes, partial tails, eviction, an engine
// SIGKILL and restart, and a bridge restart. CKF_ENGINE_SIM names the
// simulator's binary; without it the test skips.

const (
	simBlockSize = 16
	// simCacheBlocks is the engine's --kv-cache-size: small, so the
	// eviction phase evicts.
	simCacheBlocks = 16
	// simPromptBlocks is the full blocks of every prompt the eviction
	// phase stores: equal disjoint prompts, so each eviction takes one
	// prompt's blocks whole (the simulator evicts least recently used
	// first, and a prompt's blocks share one time).
	simPromptBlocks = 4
)

func TestLLMDInferenceSimEndToEnd(t *testing.T) {
	bin := os.Getenv("CKF_ENGINE_SIM")
	if bin == "" {
		t.Skip("CKF_ENGINE_SIM is not set: scripts/engine-check.sh builds llm-d-inference-sim and runs this check")
	}
	for _, form := range []struct {
		name string
		args []string
	}{
		{"array", nil}, // the simulator's default
		{"map", []string{"--use-vllm-map-event-format=true"}},
	} {
		t.Run(form.name, func(t *testing.T) {
			runSimCheck(t, bin, form.args)
		})
	}
}

// freeTCPPort is a local port nothing listens on (freePort's, as a number).
func freeTCPPort(t *testing.T) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(freePort(t))
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// simEngine is one llm-d-inference-sim process (restartable).
type simEngine struct {
	t    *testing.T
	bin  string
	args []string
	url  string
	logf *os.File
	cmd  *exec.Cmd
}

func startSim(t *testing.T, bin string, zmqPort int, extra []string) *simEngine {
	t.Helper()
	port := freeTCPPort(t)
	logf, err := os.Create(filepath.Join(t.TempDir(), "sim.log"))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--port", strconv.Itoa(port), "--model", "ckf-check-model", "--force-dummy-tokenizer",
		"--enable-kvcache", "--kv-cache-size", strconv.Itoa(simCacheBlocks), "--block-size", strconv.Itoa(simBlockSize),
		"--zmq-endpoint", fmt.Sprintf("tcp://127.0.0.1:%d", zmqPort), "--event-batch-size", "16", "--hash-seed", "42",
	}, extra...)
	e := &simEngine{t: t, bin: bin, args: args, url: fmt.Sprintf("http://127.0.0.1:%d", port), logf: logf}
	t.Cleanup(func() {
		e.kill()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("simulator log (tail):\n%s", tail(b, 4000))
		}
	})
	e.start()
	return e
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (e *simEngine) start() {
	e.t.Helper()
	e.cmd = exec.Command(e.bin, e.args...)
	e.cmd.Stdout, e.cmd.Stderr = e.logf, e.logf
	// With --enable-kvcache the simulator names its event topic after
	// POD_IP (kv@<ip>@<model>) and refuses to start without it.
	e.cmd.Env = append(os.Environ(), "POD_IP=127.0.0.1")
	if err := e.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	testenv.Eventually(e.t, time.Minute, 50*time.Millisecond, func() error {
		resp, err := http.Get(e.url + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health %d", resp.StatusCode)
		}
		return nil
	})
}

// kill ends the process with SIGKILL (no graceful shutdown).
func (e *simEngine) kill() {
	if e.cmd == nil || e.cmd.Process == nil {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGKILL)
	_ = e.cmd.Wait()
	e.cmd = nil
}

func (e *simEngine) post(path string, body any, out any) {
	e.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(e.url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("%s: %d %s", path, resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		e.t.Fatalf("%s: %v in %s", path, err, data)
	}
}

func messages(text string) []map[string]string {
	return []map[string]string{{"role": "user", "content": text}}
}

// tokens is the engine's own tokenization of a chat prompt.
func (e *simEngine) tokens(text string) []uint32 {
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	e.post("/tokenize", map[string]any{"model": "ckf-check-model", "messages": messages(text)}, &out)
	return out.Tokens
}

// chat sends one request and returns the engine's prompt and cached
// token counts.
func (e *simEngine) chat(text string) (prompt, cached int) {
	var out struct {
		Usage struct {
			PromptTokens  int `json:"prompt_tokens"`
			PromptDetails *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	e.post("/v1/chat/completions", map[string]any{"model": "ckf-check-model", "messages": messages(text), "max_tokens": 1}, &out)
	if out.Usage.PromptDetails != nil {
		cached = out.Usage.PromptDetails.CachedTokens
	}
	return out.Usage.PromptTokens, cached
}

// simCheck holds one event form's run.
type simCheck struct {
	t       *testing.T
	st      *stack
	sim     *simEngine
	checks  int
	evicted int // checks of a stored prompt the engine had evicted
	warmups int
}

func (c *simCheck) depth(tokens []uint32) (int, error) {
	body, _ := json.Marshal(map[string]any{"tokens": tokens, "block_size": simBlockSize})
	q, err := api.DecodeMatchRequest(body)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.st.ix.Match(q)
	if err != nil {
		return 0, err
	}
	for _, l := range resp.Lanes {
		if l.DC == dc {
			return int(l.Depth), nil
		}
	}
	return 0, nil // no lane yet: nothing indexed
}

// settle waits until the index holds the prompt's full blocks (the engine
// has just stored them): every event before them is applied too.
func (c *simCheck) settle(tokens []uint32, within time.Duration) error {
	want := len(tokens) / simBlockSize
	deadline := time.Now().Add(within)
	for {
		got, err := c.depth(tokens)
		if err == nil && got == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("index depth %d (err %v) for a prompt of %d tokens, want %d", got, err, len(tokens), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// request checks one prompt: the index's depth before the request equals
// the engine's cached tokens ÷ the block size; then it waits for the
// engine's stores to be indexed. It returns the engine's cached blocks.
func (c *simCheck) request(what, text string) int {
	c.t.Helper()
	toks := c.sim.tokens(text)
	d, err := c.depth(toks)
	if err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
	prompt, cached := c.sim.chat(text)
	if prompt != len(toks) {
		c.t.Fatalf("%s: the engine tokenized %d prompt tokens, /tokenize gave %d", what, prompt, len(toks))
	}
	if cached%simBlockSize != 0 || d != cached/simBlockSize {
		c.t.Fatalf("%s: index depth %d, engine cached_tokens %d (%d blocks of %d)", what, d, cached, cached/simBlockSize, simBlockSize)
	}
	c.checks++
	if err := c.settle(toks, 30*time.Second); err != nil {
		c.t.Fatalf("%s: after the request: %v", what, err)
	}
	return cached / simBlockSize
}

// warmup sends fresh prompts until one is indexed: after a (re)start the
// engine's PUB socket dials the bridge's and a batch published before the
// connection is up is lost (ZMQ's slow joiner), and after an engine
// restart the index still holds the old incarnation's blocks until the
// bridge sees the new one's first batch. Its depth is not compared.
func (c *simCheck) warmup(gen *promptGen) {
	c.t.Helper()
	// The simulator redials every second: give it the time to connect and
	// subscribe, so no batch is lost to a gap the bridge would have to
	// treat as a restart.
	time.Sleep(3 * time.Second)
	for range 10 {
		c.warmups++
		text := gen.prompt(simPromptBlocks, 3)
		c.sim.chat(text)
		if err := c.settle(c.sim.tokens(text), 3*time.Second); err == nil {
			return
		}
	}
	c.t.Fatal("no warm-up prompt reached the index")
}

// promptGen builds chat prompts of a given number of full blocks and a
// partial tail, out of distinct words (the simulator's tokenizer makes one
// token of each word).
type promptGen struct {
	t        *testing.T
	sim      *simEngine
	overhead int // tokens the chat template adds to the words
	next     int
}

func newPromptGen(t *testing.T, sim *simEngine) *promptGen {
	g := &promptGen{t: t, sim: sim}
	one, three := len(sim.tokens("w0")), len(sim.tokens("w0 w1 w2"))
	if three-one != 2 {
		t.Fatalf("the simulator's tokenizer does not make one token per word (%d, %d)", one, three)
	}
	g.overhead = one - 1
	return g
}

func (g *promptGen) words(n int) []string {
	w := make([]string, n)
	for i := range w {
		w[i] = "w" + strconv.Itoa(g.next)
		g.next++
	}
	return w
}

// prompt returns a fresh prompt of `blocks` full blocks and `tail` more
// tokens (tail < block size).
func (g *promptGen) prompt(blocks, tail int) string {
	return strings.Join(g.words(blocks*simBlockSize+tail-g.overhead), " ")
}

// extend returns base cut to its first n
// words and continued with fresh ones to `blocks` full blocks and `tail`.
func (g *promptGen) extend(base string, n, blocks, tail int) string {
	w := strings.Fields(base)[:n]
	return strings.Join(append(w, g.words(blocks*simBlockSize+tail-g.overhead-n)...), " ")
}

func runSimCheck(t *testing.T, bin string, formArgs []string) {
	began := time.Now()
	st := newStack(t)
	zmqPort := freeTCPPort(t)
	spec := bridge.EngineSpec{WorkerID: 1, Pub: fmt.Sprintf("tcp://*:%d", zmqPort)}
	cfgBridge := func(c *bridge.Config) { c.BlockSize = simBlockSize }
	rb := st.startBridge(t, []bridge.EngineSpec{spec}, cfgBridge)
	testenv.WaitFor(t, time.Minute, "bridge bound", func() bool { return rb.engine(0).Connected })
	sim := startSim(t, bin, zmqPort, formArgs)
	c := &simCheck{t: t, st: st, sim: sim}
	gen := newPromptGen(t, sim)
	c.warmup(gen)

	// Stores, shared prefixes and partial tails.
	x := gen.prompt(simPromptBlocks, 5)
	if got := c.request("a fresh prompt", x); got != 0 {
		t.Fatalf("a fresh prompt had %d cached blocks", got)
	}
	y := gen.extend(x, 2*simBlockSize-gen.overhead+3, simPromptBlocks, 9)
	if got := c.request("a prompt sharing a prefix", y); got < 1 || got >= simPromptBlocks {
		t.Fatalf("shared prefix: %d cached blocks, want some but not all", got)
	}
	if got := c.request("the first prompt again", x); got != simPromptBlocks {
		t.Fatalf("repeat: %d cached blocks", got)
	}
	xt := x + " " + strings.Join(gen.words(3), " ")
	if got := c.request("the first prompt with a longer partial tail", xt); got != simPromptBlocks {
		t.Fatalf("longer tail: %d cached blocks", got)
	}

	// An engine SIGKILL and restart: its cache is empty, and once its first
	// batch reaches the bridge the worker's old blocks are gone.
	sim.kill()
	sim.start()
	c.warmup(gen)
	if got := c.request("a prompt stored before the engine restart", x); got != 0 {
		t.Fatalf("after the restart: %d cached blocks", got)
	}
	if rb.engine(0).Restarts == 0 {
		t.Fatal("the bridge saw no engine restart")
	}

	// Eviction: disjoint prompts of equal size overflow the cache.
	var ps []string
	for range simCacheBlocks/simPromptBlocks + 2 {
		p := gen.prompt(simPromptBlocks, 7)
		ps = append(ps, p)
		c.request("an eviction filler", p)
	}
	// Newest first: the prompts the cache still holds answer in full, then
	// the evicted ones answer 0 (each re-stored evicts the oldest left).
	kept := 0
	for i := len(ps) - 1; i >= -1; i-- {
		p := x
		if i >= 0 {
			p = ps[i]
		}
		if got := c.request(fmt.Sprintf("eviction check of prompt %d", i), p); got == 0 {
			c.evicted++
		} else {
			kept++
		}
	}
	if c.evicted == 0 || kept == 0 {
		t.Fatalf("the eviction phase found %d evicted and %d kept prompts: it must see both", c.evicted, kept)
	}

	// A bridge restart: the index keeps what was indexed and the new
	// bridge resumes the engine's stream.
	rb.stop(t)
	rb = st.startBridge(t, []bridge.EngineSpec{spec}, cfgBridge)
	testenv.WaitFor(t, time.Minute, "bridge bound again", func() bool { return rb.engine(0).Connected })
	c.warmup(gen)
	for i, p := range ps[len(ps)-2:] {
		c.request(fmt.Sprintf("after the bridge restart %d", i), p)
	}
	c.request("a fresh prompt after the bridge restart", gen.prompt(simPromptBlocks, 1))
	t.Logf("%d checks (%d of evicted prompts), %d warm-ups, %v", c.checks, c.evicted, c.warmups, time.Since(began).Round(time.Millisecond))
}
