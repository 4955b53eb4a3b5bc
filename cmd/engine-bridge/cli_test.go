package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/cli/clitest"
)

func TestVersionAndGroupedHelp(t *testing.T) {
	clitest.VersionAndGroupedHelp(t, "engine-bridge", func(args []string, out *bytes.Buffer) int {
		return run(context.Background(), args, func(string) string { return "" }, out)
	})
}
