package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/testenv"
)

// logLine returns the first JSON log line whose message is msg.
func logLine(out string, msg string) (map[string]any, bool) {
	for _, line := range strings.Split(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["message"] == msg {
			return m, true
		}
	}
	return nil, false
}

// A relay that stops because its context ended (SIGINT or SIGTERM in
// cli.Main) says so in its last log line, with the reason, and exits 0.
func TestRunLogsItsStopWithTheReason(t *testing.T) {
	srv := testenv.StartServer(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	out := &testenv.LogBuffer{}
	done := make(chan int, 1)
	args := []string{"--log-format", "json", "--nats-url", srv.URL(), "--dc", "dc-a", "--domain", "stoptest",
		"--http-addr", "127.0.0.1:0", "--expected-blocks", "4096"}
	go func() { done <- run(ctx, args, env(nil), out) }()
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if _, ok := logLine(out.String(), "relay-producer starting"); !ok {
			return errors.New("not started yet:\n" + out.String())
		}
		return nil
	})
	if _, ok := logLine(out.String(), "relay-producer stopped"); ok {
		t.Fatalf("stop logged while running:\n%s", out)
	}
	cancel(errors.New("terminated signal received"))
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after the stop, want 0:\n%s", code, out)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("run did not return after cancel; goroutines:\n%s", testenv.Goroutines())
	}
	line, ok := logLine(out.String(), "relay-producer stopped")
	if !ok || line["reason"] != "terminated signal received" || line["level"] != "info" {
		t.Fatalf("stop line %v (found %v), want reason %q:\n%s", line, ok, "terminated signal received", out)
	}
}
