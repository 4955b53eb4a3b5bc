package client_test

import (
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// The older transport conformance (§8.1, mTLS era) from the client's side:
// a relay requiring client certificates refuses a follower without one or
// with one of another CA, and serves one with a trusted certificate.
func TestFollowerOverMutualTLS(t *testing.T) {
	pki, other := testenv.NewPKI(t), testenv.NewPKI(t)
	srvCert, srvKey := pki.Issue(t, "relay")
	pub := newTestPub()
	pub.setGen(t, testSpec, 11, 1024)
	addr, _ := serveReal(t, pub, func(c *server.Config) {
		tc, err := server.LoadTLS(srvCert, srvKey, pki.CA)
		if err != nil {
			t.Fatal(err)
		}
		c.TLS = tc
	})
	good, goodKey := pki.Issue(t, "indexer")
	stranger, strangerKey := other.Issue(t, "indexer")
	for _, tc := range []struct {
		name      string
		cert, key string
		ok        bool
	}{
		{"no client certificate", "", "", false},
		{"certificate of another CA", stranger, strangerKey, false},
		{"trusted certificate", good, goodKey, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tlsCfg, err := client.LoadTLS(pki.CA, tc.cert, tc.key, "relay")
			if err != nil {
				t.Fatal(err)
			}
			sink := newRecSink(t)
			_, m, stop := startFollower(t, addr, sink, func(c *client.Config) { c.TLS = tlsCfg })
			if tc.ok {
				sink.waitFor(t, "install over mTLS", func(s *recSink) bool { return s.ready })
				return
			}
			sink.waitFor(t, "refused handshake", func(s *recSink) bool { return s.count("invalidate") > 0 })
			time.Sleep(50 * time.Millisecond)
			stop()
			if sink.has("install", "") || m.Faults("dc-k", client.ReasonUnavailable) < 1 {
				t.Fatalf("events %+v", sink.events)
			}
		})
	}
	if _, err := client.LoadTLS("", good, "", ""); err == nil {
		t.Fatal("a certificate without its key was accepted")
	}
}
