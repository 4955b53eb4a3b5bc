package e2e

// The "auth" setup of the attack suite: one embedded server loaded with
// the per-role permissions of internal/authconf (Render) through --nats-config's
// path (testenv.WithConfigFile), and every role connecting with its own
// user through cli.Dial, the function behind the binaries' --nats-user and
// --nats-password-file.
//
// The attacker is an insider holding relay dc-b's credentials: a
// compromised host of another DC, the strongest role short of an operator
// and the only one whose permissions reach state shared by the domain (the
// lane map, the snapshot Object Store). Everything it may not do must be
// refused by the server (a permission violation naming the subject); what
// it may still do (README Security, "Limits of what NATS can narrow") must
// be caught by ckfrelay's validation, as without auth. "Plain access to the
// bus" becomes an unauthenticated client, which the server turns away.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/authconf"
	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// attackDCs are every DC any attack test runs a relay or workers for.
var attackDCs = []string{"dc-a", "dc-b", "dc-c"}

// attackerUser is whose credentials the insider attacker holds.
const attackerUser = "relay-dc-b"

// operatorUser is an unrestricted user of the account, for the tests'
// bookkeeping and repairs; deploy/ ships no such user.
const operatorUser = "operator"

// violationLog records the permission violations the server reports to
// one connection. Safe for concurrent use (nats.go calls add on its own
// goroutine).
type violationLog struct {
	mu   sync.Mutex
	seen []string
}

func (v *violationLog) add(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	v.mu.Lock()
	v.seen = append(v.seen, err.Error())
	v.mu.Unlock()
}

// count is how many violations named subject.
func (v *violationLog) count(subject string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, s := range v.seen {
		if strings.Contains(s, `"`+subject+`"`) {
			n++
		}
	}
	return n
}

func (v *violationLog) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.seen...)
}

type authConn struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	viol *violationLog
}

func startAuth(t *testing.T) *attackEnv {
	t.Helper()
	pw := func(name string) string { return "pw-" + name + "-attack" }
	users := []authconf.User{
		{Name: "indexer", Role: authconf.RoleIndexer},
		// The replayer stands for the workers of every DC.
		{Name: "replayer", Role: authconf.RoleWorker, DCs: attackDCs},
	}
	for _, dc := range attackDCs {
		users = append(users, authconf.User{Name: "relay-" + dc, Role: authconf.RoleRelay, DC: dc})
	}
	for i := range users {
		users[i].Password = pw(users[i].Name)
	}
	block, err := authconf.Render(authconf.Params{Domain: domain, JetStream: true, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	const open = "users: ["
	if strings.Count(block, open) != 1 {
		t.Fatalf("rendered accounts block has %d %q, want one", strings.Count(block, open), open)
	}
	block = strings.Replace(block, open, open+"\n      { user: \""+operatorUser+"\", password: \""+pw(operatorUser)+"\" }", 1)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, []byte("listen: \"127.0.0.1:-1\"\ninclude \"accounts.conf\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testenv.StartServer(t, testenv.WithConfigFile(conf))

	// Plain access to the bus, the attacker: refused outright.
	if nc, err := nats.Connect(srv.URL(), nats.Timeout(10*time.Second)); err == nil {
		nc.Close()
		t.Fatal("the server accepted a client without credentials")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("client without credentials: %v, want an authorization violation", err)
	}

	userOf := func(r role) string {
		switch r {
		case roleAttacker:
			return attackerUser
		case roleOperator:
			return operatorUser
		case roleWorker("all"):
			return "replayer"
		}
		return string(r) // indexer, relay-<dc>
	}
	var mu sync.Mutex
	conns := map[role]*authConn{}
	connect := func(t *testing.T, r role) *authConn {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if c, ok := conns[r]; ok {
			return c
		}
		user := userOf(r)
		pwFile := filepath.Join(dir, string(r)+".password")
		if err := os.WriteFile(pwFile, []byte(pw(user)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c := &authConn{viol: &violationLog{}}
		nc, _, err := cli.Dial(srv.URL(), string(r), cli.Security{User: user, PasswordFile: pwFile, ConnectTimeout: 10 * time.Second},
			zerolog.Nop(), nats.ErrorHandler(c.viol.add))
		if err != nil {
			t.Fatalf("connect as %s (%s): %v", r, user, err)
		}
		t.Cleanup(nc.Close)
		if c.js, err = jetstream.New(nc); err != nil {
			t.Fatal(err)
		}
		c.nc = nc
		conns[r] = c
		return c
	}
	// Every role but the attacker did its job within its permissions.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for r, c := range conns {
			if v := c.viol.all(); r != roleAttacker && len(v) > 0 {
				t.Errorf("%s hit permission violations doing its job (internal/authconf permissions too narrow): %v", r, v)
			}
		}
	})
	return &attackEnv{
		srv: srv,
		connect: func(t *testing.T, r role) (*nats.Conn, jetstream.JetStream) {
			c := connect(t, r)
			return c.nc, c.js
		},
		attackerViolations: func(t *testing.T) *violationLog { return connect(t, roleAttacker).viol },
		authEnforced:       true,
	}
}

// attempt runs one act of the attacker that the server sees as a publish
// on subject. It reports whether the act went through. Without auth every
// act must go through (ckfrelay then defends itself). With auth an act may
// instead be refused, which must show as a permission violation naming
// subject; act's context is cancelled as soon as it does (a refused
// request gets no reply).
func (env *attackEnv) attempt(t *testing.T, subject string, act func(ctx context.Context) error) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	refused := make(chan struct{})
	if env.authEnforced {
		viol := env.attackerViolations(t)
		before := viol.count(subject)
		go func() {
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					if viol.count(subject) > before {
						close(refused)
						cancel()
						return
					}
				}
			}
		}()
	}
	err := act(ctx)
	close(done)
	if err == nil {
		return true
	}
	select {
	case <-refused:
		t.Logf("refused by the server: %s (%v)", subject, err)
		return false
	default:
	}
	if env.authEnforced {
		t.Fatalf("attacker on %s: %v, and no permission violation was reported", subject, err)
	}
	t.Fatalf("attacker on %s: %v", subject, err)
	return false
}

// requireRefusedWithAuth fails when the server let through an act that
// the attacker's permissions must refuse.
func (env *attackEnv) requireRefusedWithAuth(t *testing.T, delivered bool, what string) {
	t.Helper()
	if env.authEnforced && delivered {
		t.Fatalf("the server let %s %s", attackerUser, what)
	}
}
