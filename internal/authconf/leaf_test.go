package authconf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/natsembed"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/eventpub"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// shipped is one of the deploy/nats-*-secure.conf files made runnable in a
// test: loopback random ports, a temporary store, test certificates.
type shipped struct {
	dir  string
	pki  *testenv.PKI
	hubs string // hub leaf-node host:port, for the DC configs
}

func newShipped(t *testing.T) *shipped {
	t.Helper()
	s := &shipped{dir: t.TempDir(), pki: testenv.NewPKI(t)}
	if err := os.Mkdir(filepath.Join(s.dir, "auth"), 0o700); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(shippedDir, "*-accounts.conf"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.dir, "auth", filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"nats-hub", "leaf-dc-a", "leaf-dc-b"} {
		s.pki.Issue(t, n)
	}
	return s
}

// config writes deploy/<name> with the deployment-specific values replaced,
// applying edit last, and returns its path.
func (s *shipped) config(t *testing.T, name string, edit func(string) string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	c := string(b)
	c = strings.ReplaceAll(c, "0.0.0.0:4222", "127.0.0.1:-1")
	c = strings.ReplaceAll(c, "0.0.0.0:7422", "127.0.0.1:-1")
	// No fixed monitoring port in tests (compose healthchecks use it).
	c = strings.ReplaceAll(c, "http: 0.0.0.0:8222\n", "")
	c = strings.ReplaceAll(c, "/etc/nats/certs/", s.pki.Dir+"/")
	c = strings.ReplaceAll(c, "store_dir: /data", "store_dir: \""+t.TempDir()+"\"")
	if s.hubs != "" {
		c = strings.ReplaceAll(c, "@nats-hub:7422", "@"+s.hubs)
	}
	if edit != nil {
		c = edit(c)
	}
	p := filepath.Join(s.dir, strings.TrimSuffix(name, ".conf")+"-"+strconv.Itoa(len(c))+".conf")
	if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// logLines records a server's log for assertions.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) WriteLine(level, line string) {
	l.mu.Lock()
	l.lines = append(l.lines, level+" "+line)
	l.mu.Unlock()
}

func (l *logLines) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.lines {
		if strings.Contains(x, sub) {
			return true
		}
	}
	return false
}

func run(t *testing.T, conf string, logs natsembed.LineWriter) *server.Server {
	t.Helper()
	s, err := natsembed.RunEmbedded(natsembed.EmbeddedOptions{StoreDir: t.TempDir(), ConfigFile: conf, LogWriter: logs, ReadyTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func demoUser(t *testing.T, name, role, dc string) User {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(secretsDir, name+".password"))
	if err != nil {
		t.Fatal(err)
	}
	return User{Name: name, Password: strings.TrimSpace(string(b)), Role: role, DC: dc}
}

// Every shipped server config parses, with its included account files.
func TestShippedServerConfigsParse(t *testing.T) {
	s := newShipped(t)
	s.hubs = "127.0.0.1:7422"
	for _, name := range []string{"nats-hub-secure.conf", "nats-dc-a-secure.conf", "nats-dc-b-secure.conf"} {
		opts, err := server.ProcessConfigFile(s.config(t, name, nil))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(opts.Users) == 0 {
			t.Errorf("%s: no users: the accounts file was not included", name)
		}
	}
}

// The shipped hub and DC configs run the compose topology: the DC leaf
// links over mutual TLS with its own user and holds dc-a's KVEVENTS in its
// own JetStream domain; the relay of dc-a (on the DC server, input with
// --input-js-domain dc-a, lanes with --js-domain hub) and its worker, the
// indexer and the query client (on the hub) and the replayer (worker at the
// DC, verifier at the hub) all do their job with their demo users and no
// permission violation. Worker events stay in the DC. A leaf without a
// client certificate, or with a wrong password, is refused by the hub.
func TestShippedLeafTopology(t *testing.T) {
	s := newShipped(t)
	hubLog := &logLines{}
	hub := run(t, s.config(t, "nats-hub-secure.conf", nil), hubLog)
	host, port, err := natsembed.LeafNodeAddr(hub)
	if err != nil {
		t.Fatal(err)
	}
	s.hubs = host + ":" + strconv.Itoa(port)
	dcA := run(t, s.config(t, "nats-dc-a-secure.conf", nil), nil)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if n := hub.NumLeafNodes(); n != 1 {
			return fmt.Errorf("%d leaf links", n)
		}
		return nil
	})

	// dc-b's link without a client certificate is refused.
	run(t, s.config(t, "nats-dc-b-secure.conf", func(c string) string {
		return strings.NewReplacer(
			`cert_file: "`+s.pki.Dir+`/leaf-dc-b.pem"`, "",
			`key_file: "`+s.pki.Dir+`/leaf-dc-b-key.pem"`, "").Replace(c)
	}), nil)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if !hubLog.has("client didn't provide a certificate") {
			return fmt.Errorf("no refused handshake logged")
		}
		return nil
	})
	// dc-b's link with a wrong password is refused.
	run(t, s.config(t, "nats-dc-b-secure.conf", func(c string) string {
		pw := demoUser(t, "leaf-dc-b", RoleQuery, "").Password
		return strings.ReplaceAll(c, pw, "not-the-password")
	}), nil)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if !hubLog.has(`authentication error - User "leaf-dc-b"`) {
			hubLog.mu.Lock()
			defer hubLog.mu.Unlock()
			return fmt.Errorf("no refused leaf authorization logged: %s", strings.Join(hubLog.lines, "\n"))
		}
		return nil
	})
	if n := hub.NumLeafNodes(); n != 1 {
		t.Fatalf("%d leaf links, want only dc-a's", n)
	}
	if pw := demoUser(t, "leaf-dc-b", RoleQuery, "").Password; hubLog.has(pw) || hubLog.has("not-the-password") {
		t.Fatal("the hub logged a leaf password")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ixConn := connectTo(t, hub.ClientURL(), demoUser(t, "indexer", RoleIndexer, ""))
	runIndexer(t, ixConn, DemoDomain, nil)

	rc := connectTo(t, dcA.ClientURL(), demoUser(t, "relay-dc-a", RoleRelay, "dc-a"))
	rjs, err := jetstream.NewWithDomain(rc.nc, DemoJSDomain)
	if err != nil {
		t.Fatal(err)
	}
	inJS, err := jetstream.NewWithDomain(rc.nc, "dc-a")
	if err != nil {
		t.Fatal(err)
	}
	cfg := roleRelayConfig(DemoDomain, "dc-a")
	cfg.InputJS = inJS
	runRelay(t, rc, rjs, cfg)

	w := connectTo(t, dcA.ClientURL(), demoUser(t, "worker-dc-a", RoleWorker, ""))
	// Like the trace replayer, the worker ensures its DC's input stream
	// (the local JetStream domain; the relay may not have made it yet).
	if _, err := streams.EnsureEvents(ctx, w.js, streams.Options{Memory: true}); err != nil {
		t.Fatalf("worker ensuring the DC's KVEVENTS: %v", err)
	}
	pub, err := eventpub.New(w.js, eventpub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := replay.LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	rp, err := replay.New(replay.Config{DCs: []string{"dc-a"}, WorkersPerDC: 2, CapacityBlocks: 256, Duplication: 1, Affinity: 0.7, Seed: 5}, reqs[:40])
	if err != nil {
		t.Fatal(err)
	}
	var steps []replay.Step
	for {
		st, ok := rp.Next()
		if !ok {
			break
		}
		steps = append(steps, st)
		if len(st.Events) > 0 {
			if err := pub.PublishEvents(ctx, DemoDomain, "dc-a", st.Worker, st.Events); err != nil {
				t.Fatalf("worker publishing through the leaf: %v", err)
			}
		}
	}
	q := connectTo(t, hub.ClientURL(), demoUser(t, "query", RoleQuery, ""))
	testenv.Eventually(t, 90*time.Second, 50*time.Millisecond, func() error {
		if v := append(rc.violations(), ixConn.violations()...); len(v) > 0 {
			t.Fatalf("permission violations: %v", v)
		}
		for _, st := range steps {
			body, _ := json.Marshal(map[string]any{"local_hashes": st.Locals})
			msg, err := q.nc.Request(indexer.MatchSubject(DemoDomain), body, 2*time.Second)
			if err != nil {
				return err
			}
			var resp api.MatchResponse
			if err := json.Unmarshal(msg.Data, &resp); err != nil || len(resp.Lanes) != 1 {
				return fmt.Errorf("answer %s: %v", msg.Data, err)
			}
			if truth := rp.Depth(0, ckf.SequenceHashes(nil, st.Locals)); int(resp.Lanes[0].Depth) < truth {
				return fmt.Errorf("depth %d below the truth %d", resp.Lanes[0].Depth, truth)
			}
		}
		return nil
	})
	// The replayer: a worker of dc-a at the DC (ensures the stream and
	// publishes there), a query client at the hub.
	rpDC := connectTo(t, dcA.ClientURL(), demoUser(t, "replayer", RoleWorker, ""))
	if _, err := streams.EnsureEvents(ctx, rpDC.js, streams.Options{Memory: true}); err != nil {
		t.Fatalf("replayer ensuring the DC's KVEVENTS: %v", err)
	}
	rpPub, err := eventpub.New(rpDC.js, eventpub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	last := steps[len(steps)-1]
	if err := rpPub.PublishEvents(ctx, DemoDomain, "dc-a", last.Worker, last.Events); err != nil {
		t.Fatalf("replayer publishing at the DC: %v", err)
	}
	rpHub := connectTo(t, hub.ClientURL(), demoUser(t, "replayer", RoleWorker, ""))
	body, _ := json.Marshal(map[string]any{"local_hashes": last.Locals})
	if _, err := rpHub.nc.Request(indexer.MatchSubject(DemoDomain), body, 5*time.Second); err != nil {
		t.Fatalf("replayer query at the hub: %v", err)
	}

	// Worker events stay in the DC: the hub holds no KVEVENTS, and dc-a's
	// holds every event published there.
	if _, err := ixConn.js.Stream(ctx, streams.EventStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("KVEVENTS at the hub: err %v, want ErrStreamNotFound", err)
	}
	local, err := w.js.Stream(ctx, streams.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := local.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		t.Fatal("dc-a's KVEVENTS holds no event")
	}
	for who, c := range map[string]*roleConn{"relay": rc, "worker": w, "indexer": ixConn, "query": q, "replayer@dc": rpDC, "replayer@hub": rpHub} {
		requireNoViolation(t, who, c)
	}
	// Through the leaf, the relay of dc-a still cannot touch dc-b.
	refused(t, "relay dc-a via leaf", rc, "ckf.demo.dc-b.snap")
	refused(t, "relay dc-a via leaf", rc, "$JS.hub.API.$KV.ckf-leases.epoch.demo.dc-b")
}
