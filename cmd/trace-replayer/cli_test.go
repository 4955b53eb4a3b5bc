package main

import (
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/cli/clitest"
)

func TestVersionAndGroupedHelp(t *testing.T) { clitest.ToolHelp(t, "trace-replayer", run) }
