package authconf

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/testenv"
)

// One process may serve several models: a relay runs a pool per model
// (--pools-file), an indexer serves several domains, the trace replayer
// works and queries for each. Every domain-scoped grant is then repeated
// for each of Params.Domains, and a domain not listed stays refused.
func TestRenderGrantsEveryDomain(t *testing.T) {
	const second, unlisted = "sec-2", "sec-3"
	srv, users := permServerFor(t, Params{Domain: testDomain, Domains: []string{second}, JetStream: true, Users: testUsers()})
	for _, c := range []struct{ user, allowed, refused string }{
		{"worker-dc-a", "kvevents." + second + ".dc-a.w1", "kvevents." + unlisted + ".dc-a.w1"},
		{"worker-dc-a", "ckfload." + second + ".dc-a.worker.1", "ckfload." + unlisted + ".dc-a.worker.1"},
		{"relay-dc-a", "ckf." + second + ".dc-a.lane", "ckf." + unlisted + ".dc-a.lane"},
		{"relay-dc-a", "$KV.ckf-leases.lease." + second + ".dc-a", "$KV.ckf-leases.lease." + unlisted + ".dc-a"},
		{"relay-dc-a", "$KV.ckf-leases.lanes." + second, "$KV.ckf-leases.lanes." + unlisted},
		{"relay-dc-a", "$JS.API.CONSUMER.CREATE.KVEVENTS.c.kvevents." + second + ".dc-a.*", "$JS.API.CONSUMER.CREATE.KVEVENTS.c.kvevents." + unlisted + ".dc-a.*"},
		{"indexer", "$KV.ckf-leases.snapreq." + second + ".dc-a", "$KV.ckf-leases.snapreq." + unlisted + ".dc-a"},
		{"indexer", "$JS.API.CONSUMER.CREATE.CKF_LANES.c.ckf." + second + ".>", "$JS.API.CONSUMER.CREATE.CKF_LANES.c.ckf." + unlisted + ".>"},
		{"query", "ckfq." + second + ".match", "ckfq." + unlisted + ".match"},
	} {
		rc := connectAs(t, srv, users[c.user])
		if err := rc.nc.Publish(c.allowed, []byte("x")); err != nil {
			t.Fatal(err)
		}
		// The server answers a connection's publishes in order and the
		// client reports async errors in order: once the refused subject's
		// violation is in, one for the allowed subject would be too.
		refused(t, c.user, rc, c.refused)
		for _, v := range rc.violations() {
			if strings.Contains(v, `"`+c.allowed+`"`) {
				t.Errorf("%s may not publish on %s: %s", c.user, c.allowed, v)
			}
		}
	}
	// The indexer answers every listed domain's queries and reads its load windows.
	rc := connectAs(t, srv, users["indexer"])
	for _, subj := range []string{"ckfq." + second + ".match", "ckfq." + second + ".route", "ckfload." + second + ".dc-a.pool", "ckfq." + unlisted + ".match"} {
		if _, err := rc.nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
	}
	if err := rc.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		v := rc.violations()
		if len(v) == 0 {
			return errors.New("subscribing to an unlisted domain's queries was not refused")
		}
		if len(v) != 1 || !strings.Contains(v[0], "ckfq."+unlisted+".match") {
			return fmt.Errorf("violations %v, want only ckfq.%s.match", v, unlisted)
		}
		return nil
	})
}

func TestRenderRejectsADomainTwice(t *testing.T) {
	for name, p := range map[string]Params{
		"repeated":   {Domain: "d", Domains: []string{"e", "e"}},
		"as Domain":  {Domain: "d", Domains: []string{"d"}},
		"bad second": {Domain: "d", Domains: []string{"a.b"}},
	} {
		if _, err := Render(p); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s: err %v, want ErrInvalidParams", name, err)
		}
	}
}
