package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

func TestRenderLoadsInNatsServer(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"--domain", "prod,prod-2", "--js-domain", "hub",
		"--user", "relay-eu:relay:eu:" + pw, "--user", "w:worker:eu,us:" + pw, "--user", "ix:indexer:" + pw}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{`"ckf.prod.eu.>"`, `"$JS.hub.API.$KV.ckf-leases.epoch.prod.eu"`, `"kvevents.prod.us.>"`, `"ckf.prod-2.eu.>"`, `"kvevents.prod-2.us.>"`, `password: "s3cret"`} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %s:\n%s", want, out.String())
		}
	}
	conf := filepath.Join(dir, "accounts.conf")
	if err := os.WriteFile(conf, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil || len(opts.Users) != 3 {
		t.Fatalf("nats-server config: users %d, err %v", len(opts.Users), err)
	}
}

func TestBadUsers(t *testing.T) {
	for _, spec := range []string{"a:relay:x,y:/nope", "a:query:x:/nope", "a", "a:relay:x:/does/not/exist", "a:admin:/dev/null"} {
		var out, errb bytes.Buffer
		if code := run([]string{"--domain", "d", "--user", spec}, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2", spec, code)
		}
	}
}
