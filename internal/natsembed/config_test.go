package natsembed

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func writeConf(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "server.conf")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// nonLoopbackIP returns an address of this host that is not loopback, or
// skips when the host has none.
func nonLoopbackIP(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	t.Skip("no non-loopback IPv4 address")
	return nil
}

func start(t *testing.T, o EmbeddedOptions) int {
	t.Helper()
	o.ReadyTimeout = 20 * time.Second
	s, err := RunEmbedded(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(s) })
	return ClientPort(s)
}

// Without --nats-config, and with a config that names no listen address,
// the embedded server is reachable on loopback only.
func TestEmbeddedStaysOnLoopback(t *testing.T) {
	ip := nonLoopbackIP(t)
	for name, conf := range map[string]string{
		"no config":             "",
		"config without listen": writeConf(t, "authorization { users: [ { user: a, password: b } ] }\n"),
	} {
		port := start(t, EmbeddedOptions{Port: -1, StoreDir: t.TempDir(), ConfigFile: conf})
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", itoa(port)), 2*time.Second); err != nil {
			t.Fatalf("%s: loopback dial: %v", name, err)
		} else {
			c.Close()
		}
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), itoa(port)), 2*time.Second); err == nil {
			c.Close()
			t.Fatalf("%s: server reachable on %s, want loopback only", name, ip)
		}
	}
}

// A config's users and permissions are enforced by the embedded server.
func TestEmbeddedConfigEnforcesAuth(t *testing.T) {
	conf := writeConf(t, `
listen: "127.0.0.1:-1"
authorization { users: [ { user: app, password: pw, permissions: { publish: "ok.>" } } ] }
`)
	port := start(t, EmbeddedOptions{StoreDir: t.TempDir(), ConfigFile: conf})
	url := "nats://127.0.0.1:" + itoa(port)
	if nc, err := nats.Connect(url, nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Fatal("anonymous client accepted")
	}
	errs := make(chan error, 1)
	nc, err := nats.Connect(url, nats.UserInfo("app", "pw"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("other", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("err %v, want a permission violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("publish outside the permissions was not refused")
	}
}

func TestEmbeddedConfigErrors(t *testing.T) {
	if _, err := (EmbeddedOptions{StoreDir: t.TempDir(), ConfigFile: writeConf(t, "listen: [unterminated")}).ServerOptions(); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("bad config: err %v, want ErrInvalidOptions", err)
	}
	if _, err := (EmbeddedOptions{StoreDir: t.TempDir(), ConfigFile: filepath.Join(t.TempDir(), "missing.conf")}).ServerOptions(); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("missing config: err %v, want ErrInvalidOptions", err)
	}
	// A config's store_dir replaces the required StoreDir.
	dir := t.TempDir()
	opts, err := (EmbeddedOptions{ConfigFile: writeConf(t, "jetstream { store_dir: \""+dir+"\" }\n")}).ServerOptions()
	if err != nil || opts.StoreDir != dir || opts.Host != DefaultHost {
		t.Fatalf("opts %+v err %v: want the config's store dir on %s", opts, err, DefaultHost)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
