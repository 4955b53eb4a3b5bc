package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/testenv"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseFlagsDefaultsEnvAndPrecedence(t *testing.T) {
	o, err := parseFlags(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := options{NatsPort: 4222, Domain: "default", HTTPAddr: "127.0.0.1:8080", LogLevel: zerolog.InfoLevel,
		LogFormat: "json", Workers: ckf.DefaultIngestionWorkers, Queue: ckf.DefaultIngestionQueue}
	if o != want {
		t.Fatalf("defaults %+v, want %+v", o, want)
	}

	env := envOf(map[string]string{
		"CKFRELAY_NATS_URL":        "nats://example:4222",
		"CKFRELAY_DOMAIN":          "prod",
		"CKFRELAY_EXPECTED_BLOCKS": "1000",
		"CKFRELAY_LOG_LEVEL":       "debug",
		"CKFRELAY_WORKERS":         "2",
	})
	o, err = parseFlags([]string{"--domain", "staging", "--queue=16", "--log-format", "console"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want = options{NatsURL: "nats://example:4222", NatsPort: 4222, Domain: "staging", HTTPAddr: "127.0.0.1:8080",
		ExpectedBlocks: 1000, LogLevel: zerolog.DebugLevel, LogFormat: "console", Workers: 2, Queue: 16}
	if o != want {
		t.Fatalf("parsed %+v, want %+v (flags must win over the environment)", o, want)
	}
	cfg, err := o.config(zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantFormat, _ := ckf.NewConfig(1000).Format()
	if cfg.Format == nil || *cfg.Format != wantFormat || cfg.Pool.WorkerCount != 2 || cfg.Pool.QueueCapacity != 16 {
		t.Fatalf("config %+v", cfg)
	}
}

func TestEnvName(t *testing.T) {
	for flagName, want := range map[string]string{"nats-url": "CKFRELAY_NATS_URL", "queue": "CKFRELAY_QUEUE", "expected-blocks": "CKFRELAY_EXPECTED_BLOCKS"} {
		if got := EnvName(flagName); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", flagName, got, want)
		}
	}
}

func TestParseFlagsErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unknown flag", []string{"--nope"}, nil, "flag provided but not defined"},
		{"bad workers", []string{"--workers", "0"}, nil, "--workers 0"},
		{"bad queue", []string{"--queue=-3"}, nil, "--queue -3"},
		{"non-numeric workers", []string{"--workers", "many"}, nil, "invalid value"},
		{"bad log level", []string{"--log-level", "loud"}, nil, "--log-level"},
		{"bad log format", []string{"--log-format", "xml"}, nil, "--log-format"},
		{"bad port", []string{"--nats-port", "70000"}, nil, "--nats-port"},
		{"bad domain", []string{"--domain", "a.b"}, nil, "domain"},
		{"positional", []string{"extra"}, nil, "unexpected arguments"},
		{"bad env", nil, map[string]string{"CKFRELAY_WORKERS": "x"}, "CKFRELAY_WORKERS"},
		{"bad env level", nil, map[string]string{"CKFRELAY_LOG_LEVEL": "shout"}, "--log-level"},
		{"empty http addr", []string{"--http-addr="}, nil, "--http-addr"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(tc.args, envOf(tc.env), io.Discard)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseFlags = %v, want a usage error mentioning %q", err, tc.want)
			}
			var stderr bytes.Buffer
			if code := run(context.Background(), tc.args, envOf(tc.env), io.Discard, &stderr); code != exitUsage {
				t.Fatalf("run exit code %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr.String(), "global-indexer:") {
				t.Fatalf("stderr %q lacks a clear error", stderr.String())
			}
		})
	}
	// A port is irrelevant with an external server.
	if _, err := parseFlags([]string{"--nats-url", "nats://x", "--nats-port", "0"}, envOf(nil), io.Discard); err != nil {
		t.Fatalf("--nats-port with --nats-url: %v", err)
	}
	if _, err := parseFlags([]string{"-h"}, envOf(nil), io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h = %v, want flag.ErrHelp", err)
	}
	if code := run(context.Background(), []string{"-h"}, envOf(nil), io.Discard, io.Discard); code != exitOK {
		t.Fatalf("-h exit code %d, want 0", code)
	}
}

// syncBuffer collects the JSON log lines run writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// field returns the first value of a log field, if logged.
func (b *syncBuffer) field(name string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, line := range strings.Split(b.buf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if v, ok := m[name].(string); ok {
			return v, true
		}
	}
	return "", false
}

// runInBackground starts run and returns the HTTP address it logged and a
// stop function that cancels it and returns the exit code.
func runInBackground(t *testing.T, args []string) (string, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, envOf(nil), out, io.Discard) }()
	var addr string
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		select {
		case code := <-done:
			t.Fatalf("run exited early with %d: %s", code, out.buf.String())
		default:
		}
		var ok bool
		if addr, ok = out.field("http_addr"); !ok {
			return errors.New("no http_addr logged yet")
		}
		return nil
	})
	stopped := false
	var code int
	stop := func() int {
		if !stopped {
			stopped = true
			cancel()
			select {
			case code = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("run did not return after cancel")
			}
		}
		return code
	}
	t.Cleanup(func() { stop() })
	return addr, stop
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestRunServesAndShutsDownGracefully(t *testing.T) {
	srv := testenv.StartServer(t)
	addr, stop := runInBackground(t, []string{"--nats-url", srv.URL(), "--http-addr", "127.0.0.1:0", "--domain", "maintest"})
	base := "http://" + addr
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d %s", code, body)
	}
	if code, _ := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d without lanes, want 503", code)
	}
	if code, body := get(t, base+"/v1/lanes"); code != http.StatusOK || !strings.Contains(body, `"lanes":[]`) {
		t.Fatalf("/v1/lanes %d %s", code, body)
	}
	if code, body := get(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, "ckf_api_requests_total") {
		t.Fatalf("/metrics %d", code)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit code %d after cancel, want 0", code)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("HTTP still served after shutdown")
	}
}

func TestRunWithEmbeddedNATS(t *testing.T) {
	addr, stop := runInBackground(t, []string{"--nats-port", "-1", "--store-dir", t.TempDir(), "--http-addr", "127.0.0.1:0"})
	if code, body := get(t, fmt.Sprintf("http://%s/healthz", addr)); code != http.StatusOK {
		t.Fatalf("/healthz %d %s", code, body)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit code %d, want 0", code)
	}
}

func TestRunFailsOnUnreachableNATS(t *testing.T) {
	code := run(context.Background(), []string{"--nats-url", "nats://127.0.0.1:1", "--http-addr", "127.0.0.1:0"}, envOf(nil), io.Discard, io.Discard)
	if code != exitError {
		t.Fatalf("exit code %d, want %d", code, exitError)
	}
}
