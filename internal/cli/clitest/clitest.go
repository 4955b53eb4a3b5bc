// Package clitest holds the checks every binary's command line must pass,
// so each command's test states only how to run it.
package clitest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/cli"
)

// Run runs a command with args, writing its usage and version output to
// out, and returns its exit code.
type Run func(args []string, out *bytes.Buffer) int

// Service is the run function of a service binary: its usage and version
// go to stderr.
type Service func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int

// Tool is the run function of a binary that writes its results to stdout
// and its usage and version to stderr.
type Tool func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int

// NoEnv is an empty environment, so a test sees no CKFRELAY_ variable of
// the machine it runs on.
func NoEnv(string) string { return "" }

// ServiceHelp is VersionAndGroupedHelp for a Service, with an empty
// environment.
func ServiceHelp(t *testing.T, name string, run Service) {
	t.Helper()
	VersionAndGroupedHelp(t, name, func(args []string, out *bytes.Buffer) int {
		return run(context.Background(), args, NoEnv, out)
	})
}

// ToolHelp is VersionAndGroupedHelp for a Tool, with an empty environment;
// what it writes to stdout is dropped.
func ToolHelp(t *testing.T, name string, run Tool) {
	t.Helper()
	ServiceHelp(t, name, func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
		return run(ctx, args, getenv, io.Discard, stderr)
	})
}

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
