package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/cli/clitest"
)

func TestVersionAndGroupedHelp(t *testing.T) { clitest.ServiceHelp(t, "ckf-wanproxy", run) }

func TestBadFlagsExit2(t *testing.T) {
	for _, args := range [][]string{
		{},                          // no route
		{"--routes", "127.0.0.1:1"}, // not listen=target
		{"--routes", "127.0.0.1:0=x:1", "--latency", "1ms", "--jitter", "2ms"},
		{"--routes", "127.0.0.1:0=x:1", "--bandwidth", "-1"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), args, clitest.NoEnv, &out); code != 2 {
			t.Errorf("%q: exit %d (%s), want 2", args, code, out.String())
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The command forwards, takes its initial latency from the environment
// and changes it over its control API.
func TestServesRoutesAndTheControlAPI(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	listen, ctl := freePort(t), freePort(t)
	env := map[string]string{"CKFRELAY_LATENCY": "20ms"}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	var logs bytes.Buffer
	go func() {
		exited <- run(ctx, []string{"--name", "dc-t", "--routes", listen + "=" + echo.Addr().String(), "--http-addr", ctl, "--log-format", "json"},
			func(k string) string { return env[k] }, &logs)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + ctl + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("control API never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rtt := func() time.Duration {
		c, err := net.Dial("tcp", listen)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	if d := rtt(); d < 40*time.Millisecond {
		t.Fatalf("round trip %s with CKFRELAY_LATENCY=20ms, want ≥ 40ms", d)
	}
	resp, err := http.Post("http://"+ctl+"/v1/latency", "application/json", strings.NewReader(`{"delay":"60ms"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := rtt(); d < 120*time.Millisecond {
		t.Fatalf("round trip %s after setting 60ms, want ≥ 120ms", d)
	}
	cancel()
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop")
	}
	if !strings.Contains(logs.String(), `"link":"dc-t"`) {
		t.Fatalf("logs lack the link name: %s", logs.String())
	}
}
