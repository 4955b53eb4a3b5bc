package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/testenv"
)

// --domain llama,qwen serves both: each answers on its own subject and
// /readyz?domain=, an unknown model is 404, and the metrics count two
// domains; one --domain keeps today's single-domain process.
func TestRunServesSeveralDomains(t *testing.T) {
	srv := testenv.StartServer(t)
	out, stop := runInBackground(t, []string{"--nats-url", srv.URL(), "--http-addr", "127.0.0.1:0", "--domain", "llama,qwen"})
	base := "http://" + mustField(t, out, "addr")
	for d, want := range map[string]int{"llama": http.StatusServiceUnavailable, "qwen": http.StatusServiceUnavailable, "gemma": http.StatusNotFound} {
		if code, body := get(t, base+"/readyz?domain="+d); code != want {
			t.Fatalf("/readyz?domain=%s %d %s, want %d", d, code, body, want)
		}
	}
	res, err := http.Post(base+"/v1/match", "application/json", strings.NewReader(`{"model":"gemma","local_hashes":[1]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model: %d %s, want 404", res.StatusCode, body)
	}
	if code, body := get(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, "ckf_indexer_domains 2") {
		t.Fatalf("/metrics %d: no ckf_indexer_domains 2", code)
	}
	nc := srv.Connect(t)
	checkMatchSubject(t, nc, "ckfq.llama.match")
	checkMatchSubject(t, nc, "ckfq.qwen.match")
	if code := stop(); code != exitOK {
		t.Fatalf("exit code %d, want 0", code)
	}
}

func TestParseFlagsDomains(t *testing.T) {
	o, err := parseFlags([]string{"--domain", "llama, qwen", "--domains-from", "lanemap", "--domain-allow", "q*"}, envOf(nil), io.Discard)
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
	if len(c.Domains) != 2 || c.Domains[1] != "qwen" || !c.Discover || c.Allow("llama") || !c.Allow("qwen3") {
		t.Fatalf("registry config %+v", c)
	}
	// One domain is a registry of one.
	if o, _ := parseFlags([]string{"--domain", "llama"}, envOf(nil), io.Discard); len(o.domainList()) != 1 {
		t.Fatalf("one domain: %v", o.domainList())
	}
	for _, args := range [][]string{
		{"--domain", "a,a"},
		{"--domain", "a,b.c"},
		{"--domains-from", "dns"},
		{"--domain-allow", "q*"},
		{"--domain", "a,b,c", "--max-domains", "2"},
		{"--domain", ""},
	} {
		if _, err := parseFlags(args, envOf(nil), io.Discard); err == nil {
			t.Fatalf("%v accepted", args)
		}
	}
}
