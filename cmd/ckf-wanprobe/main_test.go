package main

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/cli/clitest"
)

func TestVersionAndGroupedHelp(t *testing.T) { clitest.ToolHelp(t, "ckf-wanprobe", run) }

func TestBadFlagsExit2(t *testing.T) {
	for _, args := range [][]string{
		{},                                   // no --dc
		{"--dc", "dc-a", "--probe-gap", "0"}, // no pacing
		{"--dc", "dc-a", "--load-rate", "-1"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), args, clitest.NoEnv, io.Discard, &out); code != 2 {
			t.Errorf("%q: exit %d (%s), want 2", args, code, out.String())
		}
	}
}
