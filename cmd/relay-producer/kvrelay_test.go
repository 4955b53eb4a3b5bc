package main

import (
	"bytes"
	"context"
	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

var kvArgs = []string{"--dc", "a", "--kvrelay-listen", "127.0.0.1:0", "--kvrelay-model", "llama", "--kvrelay-alias", "chat",
	"--kvrelay-endpoint", "prod/backend/generate", "--kvrelay-block-size", "64"}

func TestKvRelayFlags(t *testing.T) {
	var out bytes.Buffer
	o, err := parse(kvArgs, env(map[string]string{"CKFRELAY_KVRELAY_ALIAS": "assistant,chat"}), &out)
	if err != nil {
		t.Fatal(err)
	}
	spec := o.cfg.KvRelay
	if spec == nil || spec.Model != "llama" || spec.Namespace != "prod" || spec.Component != "backend" || spec.Endpoint != "generate" ||
		spec.BlockSize != 64 || !slices.Contains(spec.Aliases, "chat") || o.kv.cfg.PoolHeartbeat != 10*time.Second || o.kv.cfg.TLS != nil {
		t.Fatalf("spec %+v, server %+v", spec, o.kv.cfg)
	}
	f, err := o.cfg.CKF.Format()
	if err != nil {
		t.Fatal(err)
	}
	if gen, err := spec.Generation(kvrelay.DcID("a"), 1, 1, f); err != nil || gen.Key.DcID != kvrelay.DcID("a") {
		t.Fatalf("generation: %v", err)
	}
	// --kvrelay-source-path: the card's source path derives the cache
	// semantics, the model stays the canonical id; without it the model is
	// the source path.
	if spec.SourcePath != "" {
		t.Fatalf("source path %q without the flag, want empty (the model)", spec.SourcePath)
	}
	o2, err := parse(append(slices.Clone(kvArgs), "--kvrelay-source-path", "meta/llama"), env(nil), &out)
	if err != nil {
		t.Fatal(err)
	}
	withSource, err := o2.cfg.KvRelay.Generation(kvrelay.DcID("a"), 1, 1, f)
	if err != nil {
		t.Fatal(err)
	}
	want, err := kvrelay.DefaultCacheSemantics("meta/llama", 64, kvrelayv1.KvQueryHashFormat_KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1)
	if err != nil {
		t.Fatal(err)
	}
	if got := withSource.Descriptor.Producer.PoolId.IndexerDomain.CacheSemantics; !bytes.Equal(got.Digest, want.Digest) || withSource.Descriptor.Registrations[0].CanonicalModelId != "llama" {
		t.Fatalf("with --kvrelay-source-path meta/llama: cache semantics %x, canonical id %q; want %x and llama", got.Digest, withSource.Descriptor.Registrations[0].CanonicalModelId, want.Digest)
	}
	if !slices.Equal(spec.Roles, []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_AGGREGATED}) {
		t.Fatalf("default roles %v, want [AGGREGATED] (the role Dynamo's Global Router follows)", spec.Roles)
	}
	o, err = parse(append(slices.Clone(kvArgs), "--kvrelay-roles", "prefill,WORKER_ROLE_DECODE"), env(nil), &out)
	if err != nil || !slices.Equal(o.cfg.KvRelay.Roles, []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_PREFILL, kvrelayv1.WorkerRole_WORKER_ROLE_DECODE}) {
		t.Fatalf("roles: %v %+v", err, o)
	}
	o, err = parse(kvArgs, env(map[string]string{"CKFRELAY_KVRELAY_ROLES": "legacy"}), &out)
	if err != nil || !slices.Equal(o.cfg.KvRelay.Roles, []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY}) {
		t.Fatalf("legacy role: %v %+v", err, o)
	}
	o, err = parse(append(slices.Clone(kvArgs), "--kvrelay-heartbeat", "2s"), env(nil), &out)
	if err != nil || o.kv.cfg.CatalogHeartbeat != 2*time.Second {
		t.Fatalf("heartbeat: %v", err)
	}
	o, err = parse([]string{"--dc", "a"}, env(nil), &out)
	if err != nil || o.cfg.KvRelay != nil {
		t.Fatalf("kvrelay must be off by default: %v", err)
	}
}

func TestBadKvRelayFlagsExit2(t *testing.T) {
	with := func(extra ...string) []string { return append(slices.Clone(kvArgs), extra...) }
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dc", "a", "--kvrelay-listen", "nohost"}, "--kvrelay-listen"},
		{[]string{"--dc", "a", "--kvrelay-listen", ":7000"}, "--kvrelay-model is required"},
		{[]string{"--dc", "a", "--kvrelay-model", "llama"}, "needs --kvrelay-listen"},
		{[]string{"--dc", "a", "--kvrelay-source-path", "meta/llama"}, "--kvrelay-source-path needs --kvrelay-listen"},
		{with("--kvrelay-endpoint", "prod/generate"), "NAMESPACE/COMPONENT/ENDPOINT"},
		{with("--kvrelay-endpoint", "prod/ backend/generate"), "--kvrelay-endpoint"},
		{with("--kvrelay-block-size", "0"), "--kvrelay-block-size"},
		{with("--kvrelay-roles", "router"), "unknown role"},
		{with("--kvrelay-roles", "unspecified"), "unknown role"},
		{with("--kvrelay-roles", "decode,DECODE"), "given twice"},
		{with("--kvrelay-roles", "legacy,aggregated"), "cannot be combined"},
		{[]string{"--dc", "a", "--kvrelay-roles", "aggregated"}, "needs --kvrelay-listen"},
		{with("--kvrelay-heartbeat", "0s"), "--kvrelay-heartbeat"},
		{with("--kvrelay-heartbeat", "soon"), "kvrelay-heartbeat"},
		{with("--kvrelay-tls-cert", "c.pem"), "go together"},
		{with("--kvrelay-client-ca", "ca.pem"), "--kvrelay-client-ca needs"},
		{with("--kvrelay-tls-cert", "/nonexistent.pem", "--kvrelay-tls-key", "/nonexistent.key"), "tls certificate"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), c.args, env(nil), &out); code != 2 {
			t.Fatalf("%v: exit %d (%s)", c.args, code, out.String())
		}
		if !strings.Contains(out.String(), c.want) {
			t.Fatalf("%v: %q lacks %q", c.args, out.String(), c.want)
		}
	}
}
