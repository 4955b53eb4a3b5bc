package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/testenv"
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
	want := []follow.KvRelaySource{{Name: "dyn-a", Addr: "10.0.0.1:7000"}, {Name: "dyn-b", Addr: "relay-b:7000"}, {Name: "dyn-c", Addr: "[::1]:7000"}}
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

// staticPub publishes one generation of an empty lane over kvrelay.
type staticPub struct{ gen server.Generation }

func (p staticPub) Generation() (server.Generation, bool)   { return p.gen, true }
func (p staticPub) Changed() <-chan struct{}                { return nil }
func (p staticPub) Load() server.PoolLoad                   { return server.PoolLoad{} }
func (p staticPub) ServingLoad() (server.ServingLoad, bool) { return server.ServingLoad{}, false }
func (p staticPub) Subscribe(_ context.Context, key kvrelay.ProducerKey, limits server.QueueLimits) (*server.Feed, error) {
	if key != p.gen.Key {
		return nil, kvrelay.ErrProducerChanged
	}
	return server.NewFanout().Add(make([]uint64, key.BucketCount), 0, limits), nil
}

// The binary follows a kvrelay source given on its command line: the lane
// is installed and /v1/lanes names its source, address and producer.
func TestRunFollowsAKvRelaySource(t *testing.T) {
	f, err := ckf.NewConfig(4096).Format()
	if err != nil {
		t.Fatal(err)
	}
	spec := server.PoolSpec{Model: "llama", Namespace: "prod", Component: "backend", Endpoint: "generate", BlockSize: 16}
	gen, err := spec.Generation(kvrelay.DcID("west"), 1, 1, f)
	if err != nil {
		t.Fatal(err)
	}
	scfg := server.DefaultConfig()
	scfg.PoolHeartbeat = 50 * time.Millisecond
	srv, err := server.New(staticPub{gen: gen}, scfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	out, stop := runInBackground(t, []string{"--nats-port", "-1", "--store-dir", t.TempDir(), "--http-addr", "127.0.0.1:0",
		"--expected-blocks", "4096", "--kvrelay-source", "dyn-west=" + ln.Addr().String(), "--kvrelay-model", "llama", "--kvrelay-block-size", "16"})
	addr := mustField(t, out, "addr")
	var row api.LaneStatus
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		_, body := get(t, fmt.Sprintf("http://%s/v1/lanes", addr))
		var lanes struct{ Lanes []api.LaneStatus }
		if err := json.Unmarshal([]byte(body), &lanes); err != nil {
			return err
		}
		if len(lanes.Lanes) != 1 || lanes.Lanes[0].State != follow.PhaseActive {
			return fmt.Errorf("lanes %s", body)
		}
		row = lanes.Lanes[0]
		return nil
	})
	if row.DC != "dyn-west" || row.Source != follow.SourceKvRelay || row.Address != ln.Addr().String() || row.Producer == "" || row.Lane != 15 {
		t.Fatalf("row %+v", row)
	}
	if code, body := get(t, fmt.Sprintf("http://%s/readyz", addr)); code != http.StatusOK {
		t.Fatalf("/readyz %d %s", code, body)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit %d", code)
	}
}

func TestKvRelayModelsFlags(t *testing.T) {
	src := []string{"--kvrelay-source", "dyn-a=h:1"}
	o, err := parseFlags(append(append([]string{}, src...), "--domain", "", "--kvrelay-models", "llama,meta/qwen2.5", "--domain-allow", "q*"), envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	base, err := o.config(zerolog.Nop(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := o.registryConfig(base, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	k := c.KvRelay
	if len(base.KvRelay.Sources) != 0 || len(c.Domains) != 0 || k.All || strings.Join(k.Models, " ") != "llama meta/qwen2.5" ||
		k.KvRelay.BlockSize != 0 || len(k.KvRelay.Sources) != 1 || !k.KvRelay.AcceptLegacy || c.Allow("llama") {
		t.Fatalf("registry config %+v, base kvrelay %+v", c, base.KvRelay)
	}
	if o, err = parseFlags(append(append([]string{}, src...), "--kvrelay-models", "*", "--kvrelay-block-size", "16"), envOf(nil), io.Discard); err != nil {
		t.Fatal(err)
	}
	if c, err = o.registryConfig(base, nil, zerolog.Nop()); err != nil || !c.KvRelay.All || c.KvRelay.KvRelay.BlockSize != 16 || c.Domains[0] != "default" {
		t.Fatalf("'*': %+v %v", c, err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"models without source", []string{"--kvrelay-models", "llama"}, "need --kvrelay-source"},
		{"both model flags", append(append([]string{}, src...), "--kvrelay-models", "a", "--kvrelay-model", "b", "--kvrelay-block-size", "1"), "exclusive"},
		{"a set in --kvrelay-model", append(append([]string{}, src...), "--kvrelay-model", "a,b", "--kvrelay-block-size", "1"), "--kvrelay-models"},
		{"'*' in --kvrelay-model", append(append([]string{}, src...), "--kvrelay-model", "*", "--kvrelay-block-size", "1"), "--kvrelay-models"},
		{"'*' and a list", append(append([]string{}, src...), "--kvrelay-models", "*,a"), "list no other"},
		{"one domain of two models", append(append([]string{}, src...), "--kvrelay-models", "a/b,a.b"), "map to it"},
		{"a model of no domain", append(append([]string{}, src...), "--kvrelay-models", strings.Repeat("m", 65)), "kvrelay-models"},
		{"no domain at all", []string{"--domain", ""}, "--kvrelay-models"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(tc.args, envOf(nil), io.Discard)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseFlags = %v, want a usage error mentioning %q", err, tc.want)
			}
		})
	}
}

// The binary follows every model one relay's catalog lists, each into its
// own domain at the catalog's block size: both are ready, by domain and by
// model name, and /v1/lanes shows one kvrelay lane per model's domain.
func TestRunFollowsEveryModelOfTheCatalog(t *testing.T) {
	f, err := ckf.NewConfig(4096).Format()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(nil, server.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i, spec := range []server.PoolSpec{
		{Model: "llama", Namespace: "prod", Component: "llama", Endpoint: "generate", BlockSize: 16},
		{Model: "meta/qwen2.5", Namespace: "prod", Component: "qwen", Endpoint: "generate", BlockSize: 32},
	} {
		gen, err := spec.Generation(kvrelay.DcID("west"), uint64(i+1), 1, f)
		if err != nil {
			t.Fatal(err)
		}
		srv.AddPool(spec.Component, staticPub{gen: gen})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	out, stop := runInBackground(t, []string{"--nats-port", "-1", "--store-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--domain", "",
		"--expected-blocks", "4096", "--kvrelay-source", "dyn-west=" + ln.Addr().String(), "--kvrelay-models", "*"})
	addr := mustField(t, out, "addr")
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		for _, d := range []string{"llama", "meta_qwen2_5", url.QueryEscape("meta/qwen2.5")} {
			if code, body := get(t, fmt.Sprintf("http://%s/readyz?domain=%s", addr, d)); code != http.StatusOK {
				return fmt.Errorf("/readyz?domain=%s %d %s", d, code, body)
			}
		}
		return nil
	})
	_, body := get(t, fmt.Sprintf("http://%s/v1/lanes", addr))
	var lanes struct{ Lanes []api.LaneStatus }
	if err := json.Unmarshal([]byte(body), &lanes); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range lanes.Lanes {
		rows = append(rows, fmt.Sprintf("%s/%s/%s/%d/%s", l.Domain, l.DC, l.Source, l.Lane, l.State))
	}
	if got := strings.Join(rows, " "); got != "llama/dyn-west/kvrelay/15/active meta_qwen2_5/dyn-west/kvrelay/15/active" {
		t.Fatalf("lanes %s", got)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit %d", code)
	}
}
