package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// The compose configurations must load with the server's own parser.
func TestTheDeployConfigsParse(t *testing.T) {
	t.Setenv("HUB_SERVER_NAME", "hub-1")
	// The configs docker-compose.yml runs (the *-secure ones need
	// certificates and are loaded by internal/authconf's tests).
	var files []string
	for _, name := range []string{"nats-hub.conf", "nats-hub-cluster.conf", "nats-dc-a.conf", "nats-dc-b.conf"} {
		files = append(files, filepath.Join("..", "..", "deploy", name))
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
		o, err := server.ProcessConfigFile(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !o.JetStream || o.JetStreamDomain == "" {
			t.Fatalf("%s: JetStream %v in domain %q; every site runs JetStream in its own domain", f, o.JetStream, o.JetStreamDomain)
		}
		if o.HTTPPort != 8222 {
			t.Fatalf("%s: monitoring port %d", f, o.HTTPPort)
		}
		// A DC leaf keeps its worker events on its side of the WAN.
		for _, r := range o.LeafNode.Remotes {
			if !slices.Contains(r.DenyImports, "kvevents.>") || !slices.Contains(r.DenyExports, "kvevents.>") {
				t.Fatalf("%s: leaf remote lets kvevents.> cross: imports %q exports %q", f, r.DenyImports, r.DenyExports)
			}
		}
	}
}
