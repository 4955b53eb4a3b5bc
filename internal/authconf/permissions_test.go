package authconf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/eventpub"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

const testDomain = "sec"

var testDCs = []string{"dc-a", "dc-b"}

// testUsers are every role of the test domain; the password is the name
// reversed (tests only).
func testUsers() []User {
	pw := func(name string) string { return "pw-" + name + "-test" }
	us := []User{
		{Name: "indexer", Password: pw("indexer"), Role: RoleIndexer},
		{Name: "query", Password: pw("query"), Role: RoleQuery},
	}
	for _, dc := range testDCs {
		us = append(us,
			User{Name: "relay-" + dc, Password: pw("relay-" + dc), Role: RoleRelay, DC: dc},
			User{Name: "worker-" + dc, Password: pw("worker-" + dc), Role: RoleWorker, DCs: []string{dc}})
	}
	return us
}

// adminUser is the test server's operator (no permissions set).
var adminUser = User{Name: "admin", Password: "pw-admin-test"}

// permServer starts an embedded server whose config includes the rendered
// accounts of the test domain.
func permServer(t *testing.T) (*testenv.Server, map[string]User) {
	t.Helper()
	return permServerFor(t, Params{Domain: testDomain, JetStream: true, Users: testUsers()})
}

// permServerFor starts an embedded server whose config includes the
// accounts rendered from p.
func permServerFor(t *testing.T, p Params) (*testenv.Server, map[string]User) {
	t.Helper()
	users := p.Users
	block, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	// An unrestricted operator of the account (deploy/ ships none), the
	// only user that may delete streams.
	const open = "users: ["
	if strings.Count(block, open) != 1 {
		t.Fatalf("rendered accounts block has %d %q, want one", strings.Count(block, open), open)
	}
	block = strings.Replace(block, open, open+"\n      { user: \""+adminUser.Name+"\", password: \""+adminUser.Password+"\" }", 1)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, []byte("listen: \"127.0.0.1:-1\"\ninclude \"accounts.conf\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	byName := map[string]User{}
	for _, u := range users {
		byName[u.Name] = u
	}
	return testenv.StartServer(t, testenv.WithConfigFile(conf)), byName
}

// roleConn is one authenticated connection and its async error log.
type roleConn struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	stats *cli.ConnStats

	mu   sync.Mutex
	errs []error
}

func (r *roleConn) violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.errs {
		if errors.Is(e, nats.ErrPermissionViolation) {
			out = append(out, e.Error())
		}
	}
	return out
}

func connectAs(t *testing.T, srv *testenv.Server, u User) *roleConn {
	t.Helper()
	return connectTo(t, srv.URL(), u)
}

func connectTo(t *testing.T, url string, u User) *roleConn {
	t.Helper()
	pwFile := filepath.Join(t.TempDir(), u.Name+".password")
	if err := os.WriteFile(pwFile, []byte(u.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := &roleConn{}
	nc, stats, err := cli.Dial(url, u.Name, cli.Security{User: u.Name, PasswordFile: pwFile, ConnectTimeout: 10 * time.Second}, zerolog.Nop(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			rc.mu.Lock()
			rc.errs = append(rc.errs, err)
			rc.mu.Unlock()
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", u.Name, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rc.nc, rc.js, rc.stats = nc, js, stats
	return rc
}

// refused publishes on subject as rc and requires the server to refuse it
// with a permissions violation naming the subject.
func refused(t *testing.T, who string, rc *roleConn, subject string) {
	t.Helper()
	if err := rc.nc.Publish(subject, []byte("forged")); err != nil {
		t.Fatal(err)
	}
	if err := rc.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		for _, v := range rc.violations() {
			if strings.Contains(v, `"`+subject+`"`) {
				return nil
			}
		}
		return fmt.Errorf("%s publishing on %s was not refused (violations: %v)", who, subject, rc.violations())
	})
}

func requireNoViolation(t *testing.T, who string, rc *roleConn) {
	t.Helper()
	if v := rc.violations(); len(v) > 0 {
		t.Errorf("%s doing its job hit permission violations (the deploy permissions are too narrow): %v", who, v)
	}
}

// Every role does its job under the rendered permissions, with no
// violation: workers publish events, relays publish their lanes (with
// snapshots and checkpoints), the indexer follows them and answers a query
// client's match requests.
func TestRolesDoTheirJobAndForbiddenActsAreRefused(t *testing.T) {
	srv, users := permServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	relays := map[string]*roleConn{}
	for _, dc := range testDCs {
		rc := connectAs(t, srv, users["relay-"+dc])
		relays[dc] = rc
		cfg := roleRelayConfig(testDomain, dc)
		cfg.SnapshotInterval = 300 * time.Millisecond
		runRelay(t, rc, rc.js, cfg)
	}
	ixConn := connectAs(t, srv, users["indexer"])
	ix := runIndexer(t, ixConn, testDomain, nil)

	// Workers publish a replayed workload, each for its own DC.
	reqs, err := replay.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	rp, err := replay.New(replay.Config{DCs: testDCs, WorkersPerDC: 2, CapacityBlocks: 256, Duplication: 1, Affinity: 0.7, Seed: 3}, reqs[:60])
	if err != nil {
		t.Fatal(err)
	}
	workers := map[string]*roleConn{}
	pubs := map[string]*eventpub.Publisher{}
	for _, dc := range testDCs {
		workers[dc] = connectAs(t, srv, users["worker-"+dc])
		if pubs[dc], err = eventpub.New(workers[dc].js, eventpub.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	var steps []replay.Step
	for {
		st, ok := rp.Next()
		if !ok {
			break
		}
		steps = append(steps, st)
		if len(st.Events) == 0 {
			continue
		}
		dc := testDCs[st.DC]
		if err := pubs[dc].PublishEvents(ctx, testDomain, dc, st.Worker, st.Events); err != nil {
			t.Fatalf("worker of %s publishing its events: %v", dc, err)
		}
	}

	// The query client asks the indexer over NATS until every lane reports
	// the exact depth its DC holds.
	q := connectAs(t, srv, users["query"])
	testenv.Eventually(t, 90*time.Second, 50*time.Millisecond, func() error {
		for _, st := range steps {
			body, _ := json.Marshal(map[string]any{"local_hashes": st.Locals})
			msg, err := q.nc.Request(indexer.MatchSubject(testDomain), body, 2*time.Second)
			if err != nil {
				return fmt.Errorf("match request: %w", err)
			}
			var resp api.MatchResponse
			if err := json.Unmarshal(msg.Data, &resp); err != nil || len(resp.Lanes) != len(testDCs) {
				return fmt.Errorf("answer %s: %v", msg.Data, err)
			}
			seqs := ckf.SequenceHashes(nil, st.Locals)
			for _, l := range resp.Lanes {
				dc := -1
				for i, n := range testDCs {
					if n == l.DC {
						dc = i
					}
				}
				if truth := rp.Depth(dc, seqs); dc < 0 || int(l.Depth) < truth {
					return fmt.Errorf("lane %s depth %d below the truth %d", l.DC, l.Depth, truth)
				}
			}
		}
		return nil
	})
	// Let snapshots and checkpoints run under the permissions too.
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, dc := range testDCs {
			if _, err := ixConn.js.Stream(ctx, "OBJ_ckf-snapshots"); err != nil {
				return err
			}
			ob, err := ixConn.js.ObjectStore(ctx, "ckf-snapshots")
			if err != nil {
				return err
			}
			name, _ := relay.CheckpointObjectName(testDomain, dc)
			if _, err := ob.GetInfo(ctx, name); err != nil {
				return fmt.Errorf("checkpoint of %s: %w", dc, err)
			}
		}
		return nil
	})

	// Each DC's workers report their load to their relay (the engine
	// bridge's job), which the relays' load windows carry to the indexer.
	for _, dc := range testDCs {
		rep := wire.WorkerLoad{WorkerID: 1001, Sequence: 1, Time: time.Now(), Flags: wire.LoadRequests, Serving: wire.ServingLoad{Running: 1}}
		b, _ := wire.AppendWorkerLoad(nil, &rep)
		subj, _ := wire.WorkerLoadSubject(testDomain, dc, 1001)
		if err := workers[dc].nc.Publish(subj, b); err != nil {
			t.Fatal(err)
		}
		_ = workers[dc].nc.Flush()
	}
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, dc := range testDCs {
			if promtest.Count(ix.Metrics(), `ckf_indexer_load_windows_total{dc="`+dc+`",outcome="accepted"}`) == 0 {
				return fmt.Errorf("no load window of %s accepted", dc)
			}
		}
		return nil
	})
	for _, dc := range testDCs {
		requireNoViolation(t, "relay "+dc, relays[dc])
		requireNoViolation(t, "worker "+dc, workers[dc])
	}
	requireNoViolation(t, "indexer", ixConn)
	requireNoViolation(t, "query client", q)

	// Forbidden acts, each refused by the server.
	refused(t, "indexer", ixConn, "ckf.sec.dc-a.snap")
	refused(t, "indexer", ixConn, "$KV.ckf-leases.epoch.sec.dc-a")
	refused(t, "relay dc-a", relays["dc-a"], "ckf.sec.dc-b.delta")
	refused(t, "relay dc-a", relays["dc-a"], "ckf.sec.dc-b.snap")
	refused(t, "relay dc-a", relays["dc-a"], "$KV.ckf-leases.epoch.sec.dc-b")
	refused(t, "relay dc-a", relays["dc-a"], "$KV.ckf-leases.lease.sec.dc-b")
	refused(t, "relay dc-a", relays["dc-a"], "$JS.API.STREAM.DELETE.KVEVENTS")
	refused(t, "relay dc-a", relays["dc-a"], "$JS.API.CONSUMER.CREATE.KVEVENTS.steal.kvevents.sec.dc-b.*")
	refused(t, "relay dc-a", relays["dc-a"], "ckfload.sec.dc-b.pool")
	refused(t, "worker dc-a", workers["dc-a"], "ckfload.sec.dc-b.worker.1001")
	refused(t, "worker dc-a", workers["dc-a"], "ckfload.sec.dc-a.pool")
	refused(t, "indexer", ixConn, "ckfload.sec.dc-a.pool")
	refused(t, "worker dc-a", workers["dc-a"], "ckf.sec.dc-a.delta")
	refused(t, "worker dc-a", workers["dc-a"], "kvevents.sec.dc-b.1001")
	refused(t, "worker dc-a", workers["dc-a"], "$KV.ckf-leases.lanes.sec")
	refused(t, "query client", q, "kvevents.sec.dc-a.1001")
	refused(t, "query client", q, "ckf.sec.dc-a.hb")
	refused(t, "query client", q, "$JS.API.STREAM.INFO.KVEVENTS")

	// A relay writing another DC's epoch through the KV API fails too.
	kv, err := relays["dc-a"].js.KeyValue(ctx, "ckf-leases")
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	if _, err := kv.Put(pctx, "epoch.sec.dc-b", []byte("18446744073709551615")); err == nil {
		t.Fatal("relay dc-a wrote dc-b's epoch key")
	}
}

// Without credentials nothing connects.
func TestAnonymousClientRefused(t *testing.T) {
	srv, _ := permServer(t)
	nc, err := nats.Connect(srv.URL(), nats.Timeout(2*time.Second))
	if err == nil {
		nc.Close()
		t.Fatal("anonymous client accepted")
	}
}

// roleRelayConfig is the relay of dc the role tests run: fast cadences
// and in-memory streams.
func roleRelayConfig(domain, dc string) relay.Config {
	cfg := relay.DefaultConfig(domain, dc)
	cfg.Instance = "relay-" + dc
	cfg.CKF = ckf.NewConfig(1 << 12)
	cfg.PublishInterval = 2 * time.Millisecond
	cfg.HeartbeatInterval = 25 * time.Millisecond
	cfg.CheckpointInterval = 200 * time.Millisecond
	cfg.LeaseTTL = 3 * time.Second
	cfg.Streams = streams.Options{Memory: true}
	return cfg
}

// runRelay runs a relay connected as rc, its lanes on js, until the test
// ends.
func runRelay(t *testing.T, rc *roleConn, js jetstream.JetStream, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(rc.nc, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Background(t, r.Run)
	return r
}

// runIndexer runs the indexer of domain connected as conn until the test
// ends; edit, if set, adjusts its configuration first.
func runIndexer(t *testing.T, conn *roleConn, domain string, edit func(*follow.Config)) *indexer.Service {
	t.Helper()
	pc := consumer.DefaultPoolConfig()
	pc.MaxDirtyToAppliedAge = time.Minute
	cfg := follow.Config{
		Domain: domain, Pool: pc,
		BootstrapBackoffMin: 10 * time.Millisecond, BootstrapBackoffMax: 200 * time.Millisecond,
		StatePollInterval: 20 * time.Millisecond, Streams: streams.Options{Memory: true},
	}
	if edit != nil {
		edit(&cfg)
	}
	ix, err := indexer.New(conn.nc, conn.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Background(t, ix.Run)
	return ix
}
