package main

import (
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/cli/clitest"
)

func TestVersionAndGroupedHelp(t *testing.T) { clitest.ServiceHelp(t, "engine-bridge", run) }
