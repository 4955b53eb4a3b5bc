package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --check-config parses the flags and reads the pools file they name, then
// exits 0 without dialling NATS (the URL here has no server, so a dial
// would end in exit 1): the pre-flight
// the Helm chart's check runs on every relay container.
func TestCheckConfigReadsThePoolsFileAndConnectsNowhere(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("pools:\n  - domain: demo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("pools:\n  - domain: demo\n  - domain: demo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]int{good: 0, bad: 2} {
		var out bytes.Buffer
		code := run(context.Background(), []string{"--nats-url=nats://127.0.0.1:1", "--dc=dc-a", "--pools-file=" + file, "--check-config"},
			func(string) string { return "" }, &out)
		if code != want {
			t.Fatalf("%s: exit %d, want %d: %s", filepath.Base(file), code, want, out.String())
		}
		if ok := strings.Contains(out.String(), "relay-producer: configuration ok"); ok != (want == 0) {
			t.Fatalf("%s: output %q", filepath.Base(file), out.String())
		}
	}
}
