package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/indexer"
)

func TestKvRelayFlags(t *testing.T) {
	o, err := parseFlags([]string{"--kvrelay-source", "dyn-a=10.0.0.1:7000", "--kvrelay-source", "dyn-b=relay-b:7000,dyn-c=[::1]:7000",
		"--kvrelay-model", "llama", "--kvrelay-block-size", "64"}, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config(zerolog.Nop(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []indexer.KvRelaySource{{Name: "dyn-a", Addr: "10.0.0.1:7000"}, {Name: "dyn-b", Addr: "relay-b:7000"}, {Name: "dyn-c", Addr: "[::1]:7000"}}
	k := cfg.KvRelay
	if len(k.Sources) != 3 || k.Sources[0] != want[0] || k.Sources[1] != want[1] || k.Sources[2] != want[2] ||
		k.Model != "llama" || k.BlockSize != 64 || !k.AcceptLegacy || k.TLS != nil {
		t.Fatalf("kvrelay config %+v", k)
	}
	env := envOf(map[string]string{"CKFRELAY_KVRELAY_SOURCE": "dyn-a=h:1", "CKFRELAY_KVRELAY_MODEL": "m", "CKFRELAY_KVRELAY_BLOCK_SIZE": "16"})
	if o, err = parseFlags(nil, env, io.Discard); err != nil || o.kv.sources != "dyn-a=h:1" {
		t.Fatalf("from the environment: %+v %v", o.kv, err)
	}
	var help bytes.Buffer
	run(context.Background(), []string{"-h"}, envOf(nil), io.Discard, &help)
	for _, f := range []string{"-kvrelay-source", "-kvrelay-model", "-kvrelay-block-size", "-kvrelay-tls-ca", "-kvrelay-tls-cert", "-kvrelay-tls-key", "-kvrelay-server-name"} {
		if !strings.Contains(help.String(), f) {
			t.Errorf("help lacks %s", f)
		}
	}
}

func TestBadKvRelayFlagsExit2(t *testing.T) {
	src := []string{"--kvrelay-source", "dyn-a=h:1"}
	full := append(src, "--kvrelay-model", "llama", "--kvrelay-block-size", "64")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no address", []string{"--kvrelay-source", "dyn-a", "--kvrelay-model", "m", "--kvrelay-block-size", "1"}, "NAME=HOST:PORT"},
		{"no port", []string{"--kvrelay-source", "dyn-a=host", "--kvrelay-model", "m", "--kvrelay-block-size", "1"}, "NAME=HOST:PORT"},
		{"no model", append(src, "--kvrelay-block-size", "64"), "--kvrelay-model"},
		{"no block size", append(src, "--kvrelay-model", "llama"), "--kvrelay-block-size"},
		{"model without source", []string{"--kvrelay-model", "llama"}, "need --kvrelay-source"},
		{"duplicate name", append(append([]string{}, full...), "--kvrelay-source", "dyn-a=h:2"), "given twice"},
		{"bad name", []string{"--kvrelay-source", "a.b=h:1", "--kvrelay-model", "m", "--kvrelay-block-size", "1"}, "kvrelay.sources"},
		{"cert without key", append(append([]string{}, full...), "--kvrelay-tls-cert", "c.pem"), "--kvrelay-tls"},
		{"missing CA file", append(append([]string{}, full...), "--kvrelay-tls-ca", "/nonexistent.pem"), "--kvrelay-tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(tc.args, envOf(nil), io.Discard)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseFlags = %v, want a usage error mentioning %q", err, tc.want)
			}
			var stderr bytes.Buffer
			if code := run(context.Background(), tc.args, envOf(nil), io.Discard, &stderr); code != exitUsage {
				t.Fatalf("exit %d, want %d (%s)", code, exitUsage, stderr.String())
			}
		})
	}
}
