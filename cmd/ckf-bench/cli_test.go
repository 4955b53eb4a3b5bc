package main

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/cli/clitest"
)

func TestVersionAndGroupedHelp(t *testing.T) {
	clitest.VersionAndGroupedHelp(t, "ckf-bench", func(args []string, out *bytes.Buffer) int {
		return run(context.Background(), args, func(string) string { return "" }, io.Discard, out)
	})
}
