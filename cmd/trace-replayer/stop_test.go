package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/testenv"
)

// Stopped by a signal before the replay ends, the replayer says so with
// the reason and exits 130.
func TestInterruptedReplayLogsItsStop(t *testing.T) {
	srv := testenv.StartServer(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("interrupt signal received"))
	var out, errb bytes.Buffer
	code := run(ctx, []string{"--nats-url", srv.URL(), "--domain", "stoptest", "--max-requests", "100", "--speed", "0"},
		func(string) string { return "" }, &out, &errb)
	if code != 130 || !strings.Contains(errb.String(), "trace-replayer: stopped before the end of the replay (interrupt signal received)") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
}
