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
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
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
	out := &testenv.LogBuffer{}
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

	// SIGHUP reloads the file: qwen leaves, mistral comes.
	if err := os.WriteFile(file, []byte("pools:\n  - domain: llama\n  - domain: mistral\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		res, err := http.Get("http://" + addr + "/readyz?domain=mistral")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			return fmt.Errorf("mistral /readyz %d", res.StatusCode)
		}
		return nil
	})
	res, err = http.Get("http://" + addr + "/readyz?domain=qwen")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Fatalf("qwen /readyz %d after the reload, want 404", res.StatusCode)
	}
	if !strings.Contains(out.String(), `"message":"pools file reloaded"`) {
		t.Fatalf("no reload logged:\n%s", out)
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
	} {
		if _, err := parse(args, env(nil), io.Discard); err == nil {
			t.Fatalf("%v accepted", args)
		}
	}
}

// --kvrelay-listen with --pools-file: each pool's kvrelay block over the
// flags' endpoint, block size and roles, checked as the flags are.
func TestPoolsFileKvRelay(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "allow: [\"g*\"]\npools:\n  - domain: llama\n    kvrelay: {model: meta/llama, endpoint: prod/llama/generate, block_size: 64}\n  - domain: qwen\n")
	kv := []string{"--dc", "x", "--kvrelay-listen", "127.0.0.1:0", "--kvrelay-endpoint", "prod/backend/generate", "--kvrelay-block-size", "16"}
	with := func(file string, extra ...string) []string {
		return append(append(slices.Clone(kv), "--pools-file", file), extra...)
	}
	o, err := parse(with(good), env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.KvRelay != nil || o.kv.text.Endpoint != "prod/backend/generate" || o.kv.text.BlockSize != 16 {
		t.Fatalf("pooled kvrelay: base spec %+v, defaults %+v", o.cfg.KvRelay, o.kv.text)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{with(good, "--kvrelay-model", "m"), "--kvrelay-model names one model"},
		{with(good, "--kvrelay-alias", "m"), "--kvrelay-alias names one model"},
		{with(write("ownroles.yaml", "pools:\n  - domain: a\n    kvrelay: {roles: [decode]}\n"), "--kvrelay-roles", "router"), "--kvrelay-roles: unknown role"},
		{with(write("roles.yaml", "pools:\n  - domain: a\n    kvrelay: {roles: [router]}\n")), "kvrelay roles: unknown role"},
		{with(write("ep.yaml", "pools:\n  - domain: a\n    kvrelay: {endpoint: a/b}\n")), "NAMESPACE/COMPONENT/ENDPOINT"},
		{with(write("dup.yaml", "pools:\n  - domain: a\n    kvrelay: {model: m}\n  - domain: b\n    kvrelay: {model: m}\n")), "one kvrelay pool id"},
		{[]string{"--dc", "x", "--kvrelay-listen", "127.0.0.1:0", "--pools-file", write("nodef.yaml", "pools:\n  - domain: a\n")}, "endpoint"},
		{[]string{"--dc", "x", "--kvrelay-listen", "127.0.0.1:0", "--pools-file", write("allow.yaml", "allow: [\"*\"]\npools:\n  - domain: a\n    kvrelay: {endpoint: a/b/c, block_size: 8}\n")}, "--kvrelay-endpoint"},
		{[]string{"--dc", "x", "--pools-file", good}, "needs --kvrelay-listen"},
	} {
		_, err := parse(c.args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// relay-producer --pools-file --kvrelay-listen serves every pool in one
// catalog once it holds the pool's lease.
func TestRunServesThePoolsOverOneKvRelayCatalog(t *testing.T) {
	srv := testenv.StartServer(t)
	file := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(file, []byte("pools:\n  - domain: llama\n    kvrelay: {model: meta/llama, aliases: [chat]}\n  - domain: qwen\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kvAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testenv.LogBuffer{}
	done := make(chan int, 1)
	args := []string{"--log-format", "json", "--nats-url", srv.URL(), "--dc", "dc-a", "--pools-file", file, "--http-addr", "",
		"--expected-blocks", "4096", "--lease-ttl", "3s", "--kvrelay-listen", kvAddr, "--kvrelay-endpoint", "prod/backend/generate",
		"--kvrelay-block-size", "16", "--kvrelay-heartbeat", "50ms"}
	go func() { done <- run(ctx, args, env(nil), out) }()
	conn, err := grpc.NewClient("passthrough:///"+kvAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := kvrelayv1.NewKvEventRelayClient(conn)
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		cs, err := rc.WatchKvPoolCatalog(cctx, &kvrelayv1.WatchKvPoolCatalogRequest{SubscriberId: "t", ContractMarker: kvrelayv1.ContractMarker})
		if err != nil {
			return err
		}
		u, err := cs.Recv()
		if err != nil {
			return err
		}
		var models []string
		for _, d := range u.Snapshot.GetPools() {
			models = append(models, d.Registrations[0].CanonicalModelId)
		}
		if !slices.Equal(models, []string{"meta/llama", "qwen"}) {
			return fmt.Errorf("catalog lists %v", models)
		}
		return nil
	})
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
