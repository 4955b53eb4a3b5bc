package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestRunMapsEachStageToItsExitCode(t *testing.T) {
	ok := func() (*Common, error) { return &Common{LogLevel: "info", LogFormat: "json"}, nil }
	for name, tc := range map[string]struct {
		parse  func() (*Common, error)
		serve  func(zerolog.Logger) error
		code   int
		stderr string
	}{
		"help":                         {parse: func() (*Common, error) { return nil, flag.ErrHelp }, code: ExitOK},
		"bad flags":                    {parse: func() (*Common, error) { return nil, errors.New("--x: bad") }, code: ExitUsage, stderr: "svc: --x: bad"},
		"bad log level":                {parse: func() (*Common, error) { return &Common{LogLevel: "loud", LogFormat: "json"}, nil }, code: ExitUsage, stderr: "svc: "},
		"serve fails":                  {parse: ok, serve: func(zerolog.Logger) error { return fmt.Errorf("boom") }, code: ExitError, stderr: "svc failed"},
		"canceled":                     {parse: ok, serve: func(zerolog.Logger) error { return fmt.Errorf("stop: %w", context.Canceled) }, code: ExitError},
		"clean":                        {parse: ok, serve: func(zerolog.Logger) error { return nil }, code: ExitOK, stderr: `"reason":"finished"`},
		"check-config":                 {parse: func() (*Common, error) { return &Common{LogLevel: "info", LogFormat: "json", CheckConfig: true}, nil }, code: ExitOK, stderr: "svc: configuration ok"},
		"check-config, bad log format": {parse: func() (*Common, error) { return &Common{LogLevel: "info", LogFormat: "xml", CheckConfig: true}, nil }, code: ExitUsage, stderr: "svc: "},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			served := false
			serve := func(l zerolog.Logger) error {
				served = true
				if tc.serve == nil {
					return nil
				}
				return tc.serve(l)
			}
			if got := Run(context.Background(), "svc", &stderr, tc.parse, serve); got != tc.code {
				t.Fatalf("exit %d, want %d (stderr %q)", got, tc.code, stderr.String())
			}
			if tc.stderr != "" && !strings.Contains(stderr.String(), tc.stderr) {
				t.Fatalf("stderr %q lacks %q", stderr.String(), tc.stderr)
			}
			if served != (tc.serve != nil) {
				t.Fatalf("served = %v", served)
			}
		})
	}
}

// A service that ends normally logs one stop line with why: the signal
// cli.Main turned into its context's cause, or "finished".
func TestRunLogsTheStopReason(t *testing.T) {
	ok := func() (*Common, error) { return &Common{LogLevel: "info", LogFormat: "json"}, nil }
	ctx, cancel := context.WithCancelCause(context.Background())
	var stderr bytes.Buffer
	code := Run(ctx, "svc", &stderr, ok, func(zerolog.Logger) error {
		cancel(errors.New("interrupt signal received"))
		return nil
	})
	if code != ExitOK || !strings.Contains(stderr.String(), `"reason":"interrupt signal received"`) ||
		!strings.Contains(stderr.String(), `"message":"svc stopped"`) {
		t.Fatalf("exit %d, log %q", code, stderr.String())
	}
}

func TestPprofAddrDefaultsToLoopback(t *testing.T) {
	for in, want := range map[string]string{
		"": "", ":6060": "127.0.0.1:6060", "6060": "127.0.0.1:6060",
		"0.0.0.0:6060": "0.0.0.0:6060", "[::1]:7000": "[::1]:7000", "localhost:0": "localhost:0",
	} {
		got, err := PprofAddr(in)
		if err != nil || got != want {
			t.Fatalf("PprofAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"host:port:x", ":notaport", "1.2.3.4:"} {
		if _, err := PprofAddr(bad); err == nil {
			t.Fatalf("PprofAddr(%q) accepted", bad)
		}
	}
}

// With --pprof-addr the profiles answer while the service runs, and the
// server is gone once it returns.
func TestRunServesProfilesWhileServing(t *testing.T) {
	c := &Common{LogLevel: "error", LogFormat: "json", PprofAddr: "127.0.0.1:" + freePort(t)}
	var addr string
	code := Run(context.Background(), "svc", io.Discard, func() (*Common, error) { return c, nil }, func(zerolog.Logger) error {
		addr = c.PprofAddr
		resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("pprof answered %d", resp.StatusCode)
		}
		return nil
	})
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	if resp, err := http.Get("http://" + addr + "/debug/pprof/"); err == nil {
		resp.Body.Close()
		t.Fatal("pprof still answers after Run returned")
	}
	bad := &Common{LogLevel: "error", LogFormat: "json", PprofAddr: ":x"}
	if code := Run(context.Background(), "svc", io.Discard, func() (*Common, error) { return bad, nil }, func(zerolog.Logger) error { return nil }); code != ExitUsage {
		t.Fatalf("bad --pprof-addr: exit %d", code)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// parsedOpts is a binary's options for the RunParsed test.
type parsedOpts struct {
	common Common
	name   string
}

func (o *parsedOpts) CommonFlags() *Common { return &o.common }

func TestRunParsedHandsParseItsInputsAndServeTheOptions(t *testing.T) {
	getenv := func(k string) string { return "env:" + k }
	parse := func(args []string, env func(string) string, stderr io.Writer) (*parsedOpts, error) {
		switch args[0] {
		case "-h":
			return nil, flag.ErrHelp
		case "bad":
			return nil, errors.New("--x: bad")
		}
		return &parsedOpts{common: Common{LogLevel: "info", LogFormat: "json"}, name: args[0] + "/" + env("K")}, nil
	}
	var got string
	serve := func(ctx context.Context, o *parsedOpts, log zerolog.Logger) error { got = o.name; return nil }
	var stderr bytes.Buffer
	if code := RunParsed(context.Background(), "svc", []string{"a"}, getenv, &stderr, parse, serve); code != ExitOK || got != "a/env:K" {
		t.Fatalf("exit %d, served %q; want 0, %q", code, got, "a/env:K")
	}
	if code := RunParsed(context.Background(), "svc", []string{"-h"}, getenv, &stderr, parse, serve); code != ExitOK {
		t.Fatalf("--help exit %d", code)
	}
	stderr.Reset()
	if code := RunParsed(context.Background(), "svc", []string{"bad"}, getenv, &stderr, parse, serve); code != ExitUsage || !strings.Contains(stderr.String(), "svc: --x: bad") {
		t.Fatalf("bad flags: exit %d, stderr %q", code, stderr.String())
	}
}
