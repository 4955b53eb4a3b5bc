package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/testenv"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// --pools-file runs every declared pool of the DC in one process: each
// holds its own lease and lane, /v1/status lists them and /readyz?domain=
// answers per pool.
func TestRunServesThePoolsOfAPoolsFile(t *testing.T) {
	srv := testenv.StartServer(t)
	file := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(file, []byte("pools:\n  - domain: llama\n  - domain: qwen\n    expected_blocks: 8192\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	done := make(chan int, 1)
	args := []string{"--log-format", "json", "--nats-url", srv.URL(), "--dc", "dc-a", "--pools-file", file,
		"--http-addr", addr, "--expected-blocks", "4096", "--lease-ttl", "3s"}
	go func() { done <- run(ctx, args, env(nil), out) }()
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		res, err := http.Get("http://" + addr + "/v1/status")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var st struct {
			Pools []struct {
				Domain, State string
				Lane          int
			} `json:"pools"`
		}
		if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
			return err
		}
		if len(st.Pools) != 2 || st.Pools[0].Domain != "llama" || st.Pools[1].Domain != "qwen" ||
			st.Pools[0].State != "active" || st.Pools[1].State != "active" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	for d, want := range map[string]int{"llama": 200, "qwen": 200, "gemma": 404} {
		res, err := http.Get("http://" + addr + "/readyz?domain=" + d)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("/readyz?domain=%s %d %s, want %d", d, res.StatusCode, b, want)
		}
	}
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), "ckf_relay_pools 2") || !strings.Contains(string(b), `domain="qwen"`) {
		t.Fatalf("metrics lack the pools:\n%.2000s", b)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return")
	}
}

func TestPoolsFileFlagErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	empty := filepath.Join(dir, "empty.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	for name, body := range map[string]string{good: "pools:\n  - domain: a\n", empty: "max_pools: 3\n", bad: "pools: [{domain: a.b}]\n"} {
		if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := parse([]string{"--dc", "x", "--pools-file", good}, env(nil), io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--dc", "x", "--pools-file", empty},
		{"--dc", "x", "--pools-file", bad},
		{"--dc", "x", "--pools-file", filepath.Join(dir, "missing.yaml")},
		{"--dc", "x", "--pools-file", good, "--kvrelay-listen", "127.0.0.1:0", "--kvrelay-model", "m", "--kvrelay-endpoint", "a/b/c", "--kvrelay-block-size", "16"},
	} {
		if _, err := parse(args, env(nil), io.Discard); err == nil {
			t.Fatalf("%v accepted", args)
		}
	}
}
