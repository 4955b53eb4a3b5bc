package cli

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseCommandLineWinsOverEnvironment(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c Common
	c.Register(fs)
	env := map[string]string{"CKFRELAY_NATS_URL": "nats://env:4222", "CKFRELAY_LOG_LEVEL": "debug"}
	if err := Parse(fs, []string{"--log-level", "warn"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.NatsURL != "nats://env:4222" || c.LogLevel != "warn" {
		t.Fatalf("%+v", c)
	}
	if EnvName("http-addr") != "CKFRELAY_HTTP_ADDR" {
		t.Fatal(EnvName("http-addr"))
	}
}

func TestParseRejectsBadEnvironmentValues(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c Common
	c.Register(fs)
	err := Parse(fs, nil, func(k string) string {
		if k == "CKFRELAY_NATS_PORT" {
			return "many"
		}
		return ""
	})
	if err == nil || !strings.Contains(err.Error(), "CKFRELAY_NATS_PORT") {
		t.Fatalf("err = %v", err)
	}
}

func TestLoggerFlags(t *testing.T) {
	var buf bytes.Buffer
	c := Common{LogLevel: "info", LogFormat: "json"}
	log, err := c.Logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug().Msg("hidden")
	log.Info().Str("k", "v").Msg("shown")
	if strings.Contains(buf.String(), "hidden") || !strings.Contains(buf.String(), `"k":"v"`) {
		t.Fatal(buf.String())
	}
	for _, bad := range []Common{{LogLevel: "loud", LogFormat: "json"}, {LogLevel: "info", LogFormat: "xml"}, {LogFormat: "json"}} {
		if _, err := bad.Logger(&buf); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}
