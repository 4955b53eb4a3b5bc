// Package clitest holds the checks every binary's command line must pass,
// so each command's test states only how to run it.
package clitest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/cli"
)

// Run runs a command with args, writing its usage and version output to
// out, and returns its exit code.
type Run func(args []string, out *bytes.Buffer) int

// VersionAndGroupedHelp checks that --version prints "name version (…"
// and that --help starts with a one-line description and lists grouped
// flags with their CKFRELAY_ variables.
func VersionAndGroupedHelp(t *testing.T, name string, run Run) {
	t.Helper()
	var out bytes.Buffer
	if code := run([]string{"--version"}, &out); code != 0 {
		t.Fatalf("--version exit %d", code)
	}
	if want := name + " " + cli.Version() + " ("; !strings.HasPrefix(out.String(), want) {
		t.Fatalf("--version printed %q, want %q...", out.String(), want)
	}
	out.Reset()
	if code := run([]string{"--help"}, &out); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	help := out.String()
	first, rest, _ := strings.Cut(help, "\n")
	if !strings.HasPrefix(first, name+": ") || len(first) < len(name+": ")+20 || !strings.HasPrefix(rest, "\nUsage: ") {
		t.Fatalf("no one-line description: %q", first)
	}
	for _, want := range []string{"\nTuning:\n", "\nGeneral:\n", "  --version\n", "[$CKFRELAY_"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
}
