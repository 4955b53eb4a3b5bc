package cli

import (
	"errors"
	"flag"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://alice:s3cret@host:4222":              "nats://alice:***@host:4222",
		"nats://tok3n@host:4222":                     "nats://***@host:4222",
		"nats://host:4222":                           "nats://host:4222",
		"nats://a:pw1@h1:4222, nats://b:pw2@h2:4222": "nats://a:***@h1:4222,nats://b:***@h2:4222",
		"tls://u:p%40ss@h:1":                         "tls://u:***@h:1",
		"::not a url with secret@":                   "<redacted url>",
		"":                                           "",
		"nats://127.0.0.1:4222,nats://user:hunter2@backup:4222": "nats://127.0.0.1:4222,nats://user:***@backup:4222",
	} {
		got := RedactURL(in)
		if got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
		for _, secret := range []string{"s3cret", "tok3n", "pw1", "pw2", "p%40ss", "hunter2"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactURL(%q) = %q still holds %q", in, got, secret)
			}
		}
	}
}

func TestSecurityFlagsFromEnvironment(t *testing.T) {
	var s Security
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	s.Register(fs)
	env := map[string]string{
		"CKFRELAY_NATS_USER":          "relay-dc-a",
		"CKFRELAY_NATS_PASSWORD_FILE": "/run/secrets/pw",
		"CKFRELAY_NATS_TLS_CA":        "/ca.pem",
	}
	if err := Parse(fs, []string{"--nats-tls-cert", "c.pem", "--nats-tls-key", "k.pem"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	want := Security{User: "relay-dc-a", PasswordFile: "/run/secrets/pw", TLSCA: "/ca.pem", TLSCert: "c.pem", TLSKey: "k.pem", ConnectTimeout: DefaultConnectTimeout}
	if s != want {
		t.Fatalf("parsed %+v, want %+v", s, want)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestSecurityValidate(t *testing.T) {
	for name, s := range map[string]Security{
		"creds and user":        {Creds: "c", User: "u", PasswordFile: "p"},
		"creds and nkey":        {Creds: "c", NKeySeed: "n"},
		"user without password": {User: "u"},
		"password without user": {PasswordFile: "p"},
		"cert without key":      {TLSCert: "c"},
		"key without cert":      {TLSKey: "k"},
		"negative wait":         {ConnectTimeout: -time.Second},
	} {
		if err := s.Validate(); !errors.Is(err, ErrSecurityFlags) {
			t.Errorf("%s: err %v, want ErrSecurityFlags", name, err)
		}
	}
	c := Common{NatsURL: "nats://x", NatsConfig: "server.conf"}
	if err := c.ValidateConnection(); !errors.Is(err, ErrSecurityFlags) {
		t.Errorf("--nats-config with --nats-url: err %v, want ErrSecurityFlags", err)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// authServer starts the embedded server from a config with one user that
// may publish only on allowed.>.
func authServer(t *testing.T, password string) (*Conn, Common) {
	t.Helper()
	conf := writeFile(t, "server.conf", `
listen: "127.0.0.1:-1"
authorization {
  users: [
    { user: app, password: "`+password+`", permissions: { publish: ["allowed.>", "$JS.API.>"], subscribe: ["_INBOX.>", "allowed.>"] } }
  ]
}
`)
	c := Common{NatsPort: -1, StoreDir: t.TempDir(), NatsConfig: conf,
		Security: Security{User: "app", PasswordFile: writeFile(t, "pw", password+"\n"), ConnectTimeout: 5 * time.Second}}
	conn, err := c.Connect("cli-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn, c
}

// The embedded server loads --nats-config, the binary authenticates with
// --nats-user/--nats-password-file, and a permission violation is logged
// and counted, never with the password.
func TestConnectWithConfigPasswordAndPermissionCount(t *testing.T) {
	const pw = "Sup3r-Secret-pw"
	conn, _ := authServer(t, pw)
	if !strings.HasPrefix(conn.URL, "nats://127.0.0.1:") {
		t.Fatalf("embedded server URL %q, want loopback", conn.URL)
	}
	var logs testenv.LogBuffer
	log := zerolog.New(&logs)
	sec := Security{User: "app", PasswordFile: writeFile(t, "pw2", pw), ConnectTimeout: 5 * time.Second}
	nc, stats, err := Dial(conn.URL, "perm-test", sec, log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	reg := prometheus.NewRegistry()
	if err := stats.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("forbidden.subject", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for stats.PermissionViolations.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if stats.PermissionViolations.Load() != 1 {
		t.Fatalf("permission violations %d, want 1", stats.PermissionViolations.Load())
	}
	if out, ok := promtest.Has(reg, `ckf_nats_async_errors_total{kind="permission"} 1`); !ok {
		t.Fatalf("metrics lack the permission count:\n%s", out)
	}
	if !strings.Contains(logs.String(), "forbidden.subject") {
		t.Fatalf("violation not logged: %s", logs.String())
	}
	if strings.Contains(logs.String(), pw) {
		t.Fatalf("log holds the password: %s", logs.String())
	}
}

// A wrong password is refused, and neither the error nor the log holds it
// even when it was passed inside the URL.
func TestWrongCredentialsNeverLeak(t *testing.T) {
	conn, _ := authServer(t, "right-password")
	host := strings.TrimPrefix(conn.URL, "nats://")
	var logs testenv.LogBuffer
	_, _, err := Dial("nats://app:wr0ng-pa55@"+host, "leak-test", Security{ConnectTimeout: 500 * time.Millisecond}, zerolog.New(&logs))
	if err == nil {
		t.Fatal("wrong password accepted")
	}
	if !errors.Is(err, ErrNotConnected) && !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("err %v, want a connection failure", err)
	}
	for _, s := range []string{err.Error(), logs.String()} {
		if strings.Contains(s, "wr0ng-pa55") {
			t.Fatalf("password leaked: %s", s)
		}
	}
	if !strings.Contains(err.Error(), "app:***@") {
		t.Fatalf("error %q does not name the redacted URL", err)
	}
}

// Without credentials the server refuses the connection.
func TestAnonymousRefusedByConfiguredServer(t *testing.T) {
	conn, _ := authServer(t, "pw")
	_, _, err := Dial(conn.URL, "anon", Security{ConnectTimeout: 300 * time.Millisecond}, zerolog.Nop())
	if err == nil {
		t.Fatal("anonymous connection accepted by a server with users")
	}
}

// RetryOnFailedConnect: a binary started before its server waits for it.
func TestDialWaitsForALateServer(t *testing.T) {
	// Start a server to learn a free port, stop it, dial, then restart.
	first := Common{NatsPort: -1, StoreDir: t.TempDir(), Security: Security{ConnectTimeout: time.Second}}
	conn, err := first.Connect("probe", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	url := conn.URL
	p := conn.Embedded.Addr().(*net.TCPAddr).Port
	conn.Close()
	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, _, err := Dial(url, "late", Security{ConnectTimeout: 20 * time.Second}, zerolog.Nop())
		done <- result{nc, err}
	}()
	late := Common{NatsPort: p, StoreDir: t.TempDir()}
	lconn, err := late.Connect("late-server", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer lconn.Close()
	r := <-done
	if r.err != nil {
		t.Fatalf("dial before the server started: %v", r.err)
	}
	r.nc.Close()
}

// --nats-tls-ca/--nats-tls-cert/--nats-tls-key: mutual TLS against an
// embedded server that requires client certificates (generated now).
func TestDialMutualTLS(t *testing.T) {
	pki := testenv.NewPKI(t)
	srvCert, srvKey := pki.Issue(t, "server")
	cliCert, cliKey := pki.Issue(t, "client")
	conf := writeFile(t, "tls.conf", `
listen: "127.0.0.1:-1"
tls { cert_file: "`+srvCert+`", key_file: "`+srvKey+`", ca_file: "`+pki.CA+`", verify: true, timeout: 2 }
`)
	c := Common{NatsPort: -1, StoreDir: t.TempDir(), NatsConfig: conf,
		Security: Security{TLSCA: pki.CA, TLSCert: cliCert, TLSKey: cliKey, ConnectTimeout: 5 * time.Second}}
	conn, err := c.Connect("tls-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !strings.HasPrefix(conn.URL, "tls://127.0.0.1:") {
		t.Fatalf("URL %q, want tls://127.0.0.1", conn.URL)
	}
	if _, err := conn.JS.AccountInfo(t.Context()); err != nil {
		t.Fatalf("JetStream over mutual TLS: %v", err)
	}
	// Without a client certificate, or without trusting the CA, the
	// connection fails.
	for name, sec := range map[string]Security{
		"no client cert": {TLSCA: pki.CA},
		"untrusted CA":   {TLSCert: cliCert, TLSKey: cliKey},
	} {
		sec.ConnectTimeout = 300 * time.Millisecond
		if nc, _, err := Dial(conn.URL, "bad", sec, zerolog.Nop()); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		}
	}
	if _, _, err := Dial(conn.URL, "bad", Security{TLSCert: cliCert, TLSKey: pki.CA}, zerolog.Nop()); err == nil {
		t.Error("a CA file accepted as the client key")
	}
}

// Whatever the input, a URL whose credentials url.Parse finds comes out
// with them replaced by ***.
func FuzzRedactURL(f *testing.F) {
	for _, s := range []string{"nats://u:p@h:1", "nats://tok@h", "a://x:y@h,b://z:w@h2", "nats://h:4222", "u:p@h", "nats://u:p%40@h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, part := range strings.Split(s, ",") {
			u, err := url.Parse(strings.TrimSpace(part))
			if err != nil || u.User == nil {
				continue
			}
			out := RedactURL(part)
			ou, err := url.Parse(out)
			if err != nil || ou.User == nil {
				t.Fatalf("RedactURL(%q) = %q: no redacted user info", part, out)
			}
			if pw, ok := ou.User.Password(); ok && pw != "***" || !ok && ou.User.Username() != "***" {
				t.Fatalf("RedactURL(%q) = %q keeps credentials", part, out)
			}
		}
	})
}
