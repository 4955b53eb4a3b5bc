package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
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
	log, err := c.Logger(&buf, "svc")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug().Msg("hidden")
	log.Info().Str("k", "v").Msg("shown")
	if strings.Contains(buf.String(), "hidden") || !strings.Contains(buf.String(), `"k":"v"`) || !strings.Contains(buf.String(), `"service":"svc"`) {
		t.Fatal(buf.String())
	}
	for _, bad := range []Common{{LogLevel: "loud", LogFormat: "json"}, {LogLevel: "info", LogFormat: "xml"}, {LogFormat: "json"}} {
		if _, err := bad.Logger(&buf, ""); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}

func TestLoggerWritesMillisecondUTCTimesAndMillisecondDurations(t *testing.T) {
	var buf bytes.Buffer
	at := time.Date(2026, 12, 1, 1, 2, 3, 456789000, time.FixedZone("x", 3600))
	log, err := newLogger(&buf, "info", "json", "relay-producer", func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Dur("took_ms", 1500*time.Microsecond).Msg("m")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["time"] != "2026-12-01T00:02:03.456Z" || m["took_ms"] != 1.5 || m["service"] != "relay-producer" || m["level"] != "info" {
		t.Fatalf("%s", buf.String())
	}
}
