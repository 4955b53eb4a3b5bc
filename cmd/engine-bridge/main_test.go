package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/internal/engine"
	"github.com/ckfrelay/ckfrelay/internal/engine/enginetest"
	"github.com/ckfrelay/ckfrelay/testenv"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseFlagsFileAndEnvironment(t *testing.T) {
	file := filepath.Join(t.TempDir(), "engines")
	if err := os.WriteFile(file, []byte("# dc-a\n3=tcp://c:5557\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o, err := parse([]string{"--dc", "a", "--engine", "7=tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558",
		"--engine", "8=tcp://10.0.0.6:5557", "--engines-file", file, "--index-host-pinned"},
		env(map[string]string{"CKFRELAY_DOMAIN": "prod", "CKFRELAY_BLOCK_SIZE": "16"}), &out)
	if err != nil {
		t.Fatal(err)
	}
	want := []bridge.EngineSpec{
		{WorkerID: 7, Pub: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558"},
		{WorkerID: 8, Pub: "tcp://10.0.0.6:5557"},
		{WorkerID: 3, Pub: "tcp://c:5557"},
	}
	if o.cfg.Domain != "prod" || o.cfg.DC != "a" || o.cfg.BlockSize != 16 || !o.cfg.IndexHostPinned || len(o.cfg.Engines) != 3 {
		t.Fatalf("%+v", o.cfg)
	}
	for i := range want {
		if o.cfg.Engines[i] != want[i] {
			t.Fatalf("engine %d: %+v want %+v", i, o.cfg.Engines[i], want[i])
		}
	}
	o, err = parse([]string{"--dc", "a"}, env(map[string]string{"CKFRELAY_ENGINE": "1=tcp://a:1 2=tcp://b:1"}), &out)
	if err != nil || len(o.cfg.Engines) != 2 {
		t.Fatalf("engines from the environment: %v %+v", err, o)
	}
}

func TestBadConfigExitsWithUsageError(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--dc is required"},
		{[]string{"--dc", "a"}, "no engines"},
		{[]string{"--dc", "a.b", "--engine", "1=tcp://a:1"}, "dc"},
		{[]string{"--dc", "a", "--engine", "x=tcp://a:1"}, "worker id"},
		{[]string{"--dc", "a", "--engine", "1=tcp://a:1", "--engine", "2=tcp://a:1"}, "listed twice"},
		{[]string{"--dc", "a", "--engines-file", "/nonexistent/engines"}, "engines-file"},
		{[]string{"--dc", "a", "--engine", "1=tcp://a:1", "--max-in-flight", "0"}, "max-in-flight"},
		{[]string{"--dc", "a", "--engine", "1=tcp://a:1", "--block-size", "-4"}, "block size"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), c.args, env(nil), &out); code != 2 {
			t.Fatalf("%v: exit %d (%s)", c.args, code, out.String())
		}
		if !strings.Contains(out.String(), c.want) {
			t.Fatalf("%v: %q lacks %q", c.args, out.String(), c.want)
		}
	}
}

// TestServesStatusWhileBridging runs the command against an embedded
// server and a fake engine and reads /v1/status until the engine's batch
// is acknowledged.
func TestServesStatusWhileBridging(t *testing.T) {
	srv := testenv.StartServer(t)
	e, err := enginetest.Start(enginetest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	out := &testenv.LogBuffer{}
	go func() {
		done <- run(ctx, []string{"--nats-url", srv.URL(), "--dc", "a", "--http-addr", "127.0.0.1:0",
			"--engine", "1=" + e.PubEndpoint() + ",replay=" + e.ReplayEndpoint(), "--log-format", "json"}, env(nil), out)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d", code)
		}
	}()
	var base string
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		base = httpAddr(out.String())
		if base == "" {
			return errNotYet
		}
		return nil
	})
	cleared := engine.Event{Kind: engine.KindCleared}
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		if !e.Subscribed() {
			return errNotYet
		}
		return nil
	})
	if _, err := e.Publish(cleared); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		resp, err := http.Get(base + "/v1/status")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var st bridge.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return err
		}
		if len(st.Engines) != 1 || st.Engines[0].AckedSeq == nil || *st.Engines[0].AckedSeq != 0 {
			return errNotYet
		}
		return nil
	})
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `ckf_bridge_events_total{kind="cleared"} 1`) {
		t.Fatalf("metrics lack the cleared event:\n%s", body)
	}
}

// httpAddr finds the status address in the JSON log.
func httpAddr(log string) string {
	for _, line := range strings.Split(log, "\n") {
		var m struct{ Addr, Message string }
		if json.Unmarshal([]byte(line), &m) == nil && m.Message == "serving HTTP" {
			return "http://" + m.Addr
		}
	}
	return ""
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}
