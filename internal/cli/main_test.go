package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
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
		"help":          {parse: func() (*Common, error) { return nil, flag.ErrHelp }, code: ExitOK},
		"bad flags":     {parse: func() (*Common, error) { return nil, errors.New("--x: bad") }, code: ExitUsage, stderr: "svc: --x: bad"},
		"bad log level": {parse: func() (*Common, error) { return &Common{LogLevel: "loud", LogFormat: "json"}, nil }, code: ExitUsage, stderr: "svc: "},
		"serve fails":   {parse: ok, serve: func(zerolog.Logger) error { return fmt.Errorf("boom") }, code: ExitError, stderr: "svc failed"},
		"canceled":      {parse: ok, serve: func(zerolog.Logger) error { return fmt.Errorf("stop: %w", context.Canceled) }, code: ExitError},
		"clean":         {parse: ok, serve: func(zerolog.Logger) error { return nil }, code: ExitOK},
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
			if got := Run("svc", &stderr, tc.parse, serve); got != tc.code {
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
