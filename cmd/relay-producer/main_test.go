package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseFlagsAndEnvironment(t *testing.T) {
	var out bytes.Buffer
	o, err := parse([]string{"--dc", "a", "--expected-blocks", "4096", "--publish-interval", "3ms"},
		env(map[string]string{"CKFRELAY_DOMAIN": "prod", "CKFRELAY_MODE": "verbatim", "CKFRELAY_EXPECTED_BLOCKS": "99",
			"CKFRELAY_CHECKPOINT_INTERVAL": "45s"}), &out)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Domain != "prod" || o.cfg.DC != "a" || o.cfg.CKF.ExpectedBlocksPerDC != 4096 ||
		o.cfg.PublishInterval != 3*time.Millisecond || o.cfg.CKF.Mode != ckf.HashModeVerbatim ||
		o.cfg.CheckpointInterval != 45*time.Second {
		t.Fatalf("%+v", o.cfg)
	}
	o, err = parse([]string{"--dc", "a", "--js-replicas", "3", "--input-js-domain", "dc-a"}, env(nil), &out)
	if err != nil || o.cfg.Streams.Replicas != 3 || o.inputJSDomain != "dc-a" || o.cfg.Streams.EventReplicas != 0 {
		t.Fatalf("replicas / input domain: %v %+v", err, o)
	}
	o, err = parse([]string{"--dc", "a", "--js-replicas", "3"}, env(map[string]string{"CKFRELAY_INPUT_JS_REPLICAS": "1"}), &out)
	if err != nil || o.cfg.Streams.Replicas != 3 || o.cfg.Streams.EventReplicas != 1 {
		t.Fatalf("input replicas: %v %+v", err, o)
	}
	o, err = parse([]string{"--dc", "a", "--checkpoint-interval", "0"}, env(nil), &out)
	if err != nil || o.cfg.CheckpointInterval != 0 {
		t.Fatalf("checkpoints not disabled: %v %+v", err, o)
	}
	o, err = parse([]string{"--dc", "a"}, env(nil), &out)
	if err != nil || o.cfg.CheckpointInterval != time.Minute {
		t.Fatalf("default checkpoint interval: %v %+v", err, o)
	}
	if o.cfg.Streams.EventMaxAge != 24*time.Hour || o.cfg.Streams.EventMaxBytes != 16<<30 || o.cfg.MaxTrackedBlocks != 0 {
		t.Fatalf("default bounds: %+v", o.cfg.Streams)
	}
	o, err = parse([]string{"--dc", "a", "--max-tracked-blocks", "5000000", "--input-max-age", "1h"},
		env(map[string]string{"CKFRELAY_INPUT_MAX_BYTES": "1000000"}), &out)
	if err != nil || o.cfg.MaxTrackedBlocks != 5_000_000 || o.cfg.Streams.EventMaxAge != time.Hour || o.cfg.Streams.EventMaxBytes != 1_000_000 {
		t.Fatalf("bounds: %v %+v", err, o)
	}
}

func TestBadConfigExitsWithUsageError(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "--dc is required"},
		{[]string{"--dc", "a.b"}, nil, "dc"},
		{[]string{"--dc", "a", "--mode", "x"}, nil, "hash mode"},
		{[]string{"--dc", "a", "--expected-blocks", "0"}, nil, "expected_blocks"},
		{[]string{"--dc", "a"}, map[string]string{"CKFRELAY_PUBLISH_INTERVAL": "soon"}, "CKFRELAY_PUBLISH_INTERVAL"},
		{[]string{"--dc", "a", "--log-level", "loud"}, nil, "log-level"},
		{[]string{"--dc", "a", "--checkpoint-interval", "-1s"}, nil, "checkpoint interval"},
		{[]string{"--dc", "a", "extra"}, nil, "unexpected argument"},
		{[]string{"--dc", "a", "--input-max-age", "90s"}, nil, "twice the checkpoint interval"},
		{[]string{"--dc", "a", "--max-tracked-blocks", "10"}, nil, "max tracked blocks"},
		{[]string{"--dc", "a", "--js-replicas", "0"}, nil, "js-replicas"},
		{[]string{"--dc", "a"}, map[string]string{"CKFRELAY_JS_REPLICAS": "7"}, "js-replicas"},
		{[]string{"--dc", "a", "--input-js-replicas", "6"}, nil, "input-js-replicas"},
		{[]string{"--dc", "a", "--input-js-replicas", "-1"}, nil, "input-js-replicas"},
		{[]string{"--dc", "a", "--upload-min-rate", "-5"}, nil, "upload min rate"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), c.args, env(c.env), &out); code != 2 {
			t.Fatalf("%v: exit %d (%s)", c.args, code, out.String())
		}
		if !strings.Contains(out.String(), c.want) {
			t.Fatalf("%v: %q lacks %q", c.args, out.String(), c.want)
		}
	}
}

func TestSecurityAndHTTPFlags(t *testing.T) {
	var out bytes.Buffer
	o, err := parse([]string{"--dc", "a", "--nats-creds", "/run/relay.creds", "--nats-tls-ca", "/ca.pem", "--http-max-conns", "8"},
		env(map[string]string{"CKFRELAY_HTTP_IDLE_TIMEOUT": "9s"}), &out)
	if err != nil {
		t.Fatal(err)
	}
	if o.common.Security.Creds != "/run/relay.creds" || o.common.Security.TLSCA != "/ca.pem" || o.http.MaxConns != 8 || o.http.IdleTimeout != 9*time.Second {
		t.Fatalf("parsed %+v", o)
	}
	for _, args := range [][]string{
		{"--dc", "a", "--nats-creds", "c", "--nats-nkey", "n"},
		{"--dc", "a", "--nats-tls-key", "k.pem"},
		{"--dc", "a", "--http-read-timeout", "0s"},
	} {
		if _, err := parse(args, env(nil), &out); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
