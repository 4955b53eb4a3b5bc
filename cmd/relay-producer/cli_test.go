package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/internal/cli"
)

func TestVersionAndGroupedHelp(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, func(string) string { return "" }, &out); code != 0 {
		t.Fatalf("--version exit %d", code)
	}
	if want := "relay-producer " + cli.Version() + " ("; !strings.HasPrefix(out.String(), want) {
		t.Fatalf("--version printed %q, want %q...", out.String(), want)
	}
	out.Reset()
	if code := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	help := out.String()
	first, rest, _ := strings.Cut(help, "\n")
	if !strings.HasPrefix(first, "relay-producer: ") || len(first) < len("relay-producer: ")+20 || !strings.HasPrefix(rest, "\nUsage: ") {
		t.Fatalf("no one-line description: %q", first)
	}
	for _, want := range []string{"\nTuning:\n", "\nGeneral:\n", "  --version\n", "[$CKFRELAY_"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
}
