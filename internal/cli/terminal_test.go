package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The console format carries no ANSI colour codes off a terminal: into a
// buffer, a pipe, a file or /dev/null (a character device, not a tty).
func TestConsoleLogsArePlainOffATerminal(t *testing.T) {
	var buf bytes.Buffer
	c := Common{LogLevel: "info", LogFormat: "console"}
	log, err := c.Logger(&buf, "svc")
	if err != nil {
		t.Fatal(err)
	}
	log.Warn().Str("k", "v").Msg("plain")
	if strings.Contains(buf.String(), "\x1b[") || !strings.Contains(buf.String(), "plain") {
		t.Fatalf("console log into a buffer: %q", buf.String())
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	file, err := os.Create(t.TempDir() + "/log")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for name, f := range map[string]*os.File{"pipe": w, os.DevNull: devNull, "file": file} {
		if IsTerminal(f) {
			t.Fatalf("%s taken for a terminal", name)
		}
		if !ConsoleWriter(f, "").NoColor {
			t.Fatalf("%s gets colours", name)
		}
	}
}
