// Package testenv starts embedded nats-server instances with JetStream for
// tests of other packages: a single server, or a hub with one leaf-node
// server per data center, each DC in its own JetStream domain.
//
// Every server binds 127.0.0.1 on random ports, keeps its JetStream store
// under t.TempDir() and is shut down by t.Cleanup. Set CKF_NATS_LOGGING to
// info, debug or trace to route server logs into the test output.
package testenv

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/natsembed"
)

// LoggingEnv names the environment variable that turns server logs on.
const LoggingEnv = "CKF_NATS_LOGGING"

// readyTimeout bounds a server start; generous for a loaded 2-core CI box.
const readyTimeout = 20 * time.Second

// Option adjusts one server started by StartServer.
type Option func(*natsembed.EmbeddedOptions)

// WithName sets the server name (default: nats-server's generated id).
func WithName(name string) Option {
	return func(o *natsembed.EmbeddedOptions) { o.ServerName = name }
}

// WithDomain puts the server's JetStream in domain d (default: no domain).
func WithDomain(d string) Option {
	return func(o *natsembed.EmbeddedOptions) { o.JetStreamDomain = d }
}

// WithLeafNodeListener opens a leaf-node listener on a random port
// (default: none). Its URL is not advertised to leaves: they dial only
// their configured remote, so a Link between them really cuts them off.
func WithLeafNodeListener() Option {
	return func(o *natsembed.EmbeddedOptions) { o.LeafNodePort, o.LeafNodeNoAdvertise = -1, true }
}

// WithLeafRemote makes the server a leaf node of the hub at url (default:
// standalone).
func WithLeafRemote(url string) Option {
	return func(o *natsembed.EmbeddedOptions) { o.LeafRemotes = append(o.LeafRemotes, url) }
}

// WithConfigFile loads a nats-server config file (accounts, users,
// permissions, TLS); the options above fill what it leaves unset.
func WithConfigFile(path string) Option {
	return func(o *natsembed.EmbeddedOptions) { o.ConfigFile = path }
}

// WithLeafDeny keeps subjects from crossing the server's leaf remotes in
// either direction.
func WithLeafDeny(subjects ...string) Option {
	return func(o *natsembed.EmbeddedOptions) { o.LeafDeny = append(o.LeafDeny, subjects...) }
}

// WithPort listens for clients on a fixed port (default: random), e.g. to
// start a server late at an address clients already dial.
func WithPort(port int) Option {
	return func(o *natsembed.EmbeddedOptions) { o.Port = port }
}

// WithLeafNodePort opens the leaf-node listener on a fixed port (not
// advertised, as WithLeafNodeListener).
func WithLeafNodePort(port int) Option {
	return func(o *natsembed.EmbeddedOptions) { o.LeafNodePort, o.LeafNodeNoAdvertise = port, true }
}

// FreePort returns a 127.0.0.1 TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Server is one embedded nats-server. Methods are safe for concurrent use;
// the underlying server changes on Restart.
type Server struct {
	opts natsembed.EmbeddedOptions
	// route is set for a node of a Cluster: its cluster listener and
	// routes, applied on every start.
	route *routeOpts

	mu  sync.Mutex // guards srv
	srv *server.Server
}

// StartServer starts a JetStream server and registers its shutdown with
// t.Cleanup. It fails the test if the server does not become ready.
func StartServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return startServer(t, nil, opts...)
}

// startServer is StartServer, as a cluster node when route is set.
func startServer(t testing.TB, route *routeOpts, opts ...Option) *Server {
	t.Helper()
	o := natsembed.EmbeddedOptions{
		Host:         "127.0.0.1",
		Port:         -1,
		StoreDir:     t.TempDir(),
		ReadyTimeout: readyTimeout,
	}
	for _, opt := range opts {
		opt(&o)
	}
	switch lvl := os.Getenv(LoggingEnv); lvl {
	case "":
	case "debug", "trace", "info":
		o.Debug = lvl != "info"
		o.Trace = lvl == "trace"
		o.LogWriter = natsembed.LineFunc(func(level, line string) {
			t.Logf("nats[%s] %s: %s", o.ServerName, level, line)
		})
	default:
		t.Fatalf("testenv: %s=%q, want info, debug or trace", LoggingEnv, lvl)
	}
	srv, err := run(o, route)
	if err != nil {
		t.Fatalf("testenv: start server: %v", err)
	}
	// Remember the ports picked, so Restart reuses them even after Shutdown.
	o.Port = natsembed.ClientPort(srv)
	if o.LeafNodePort != 0 {
		if _, port, err := natsembed.LeafNodeAddr(srv); err == nil {
			o.LeafNodePort = port
		}
	}
	s := &Server{opts: o, route: route, srv: srv}
	t.Cleanup(s.Shutdown)
	return s
}

// run starts a server from o, as a cluster node when route is set.
func run(o natsembed.EmbeddedOptions, route *routeOpts) (*server.Server, error) {
	if route == nil {
		return natsembed.RunEmbedded(o)
	}
	opts, err := o.ServerOptions()
	if err != nil {
		return nil, err
	}
	route.apply(opts)
	return natsembed.RunOptions(opts, o.LogWriter, o.ReadyTimeout)
}

// StartCustomServer starts a JetStream server named name on a free port
// with the options testenv gives every server, after edit has changed
// them (cluster routes, say), for a topology no helper here builds. The
// server shuts down with the test.
func StartCustomServer(t testing.TB, name string, edit func(*server.Options)) *server.Server {
	t.Helper()
	opts, err := natsembed.EmbeddedOptions{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir(), ServerName: name}.ServerOptions()
	if err != nil {
		t.Fatalf("testenv: server options: %v", err)
	}
	edit(opts)
	srv, err := natsembed.RunOptions(opts, nil, readyTimeout)
	if err != nil {
		t.Fatalf("testenv: start %s: %v", name, err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

// NATS returns the current underlying server.
func (s *Server) NATS() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// URL returns the client URL (nats://127.0.0.1:port); it stays the same
// across Restart.
func (s *Server) URL() string { return s.NATS().ClientURL() }

// StoreDir returns the JetStream storage directory.
func (s *Server) StoreDir() string { return s.opts.StoreDir }

// Domain returns the server's JetStream domain ("" when none).
func (s *Server) Domain() string { return s.opts.JetStreamDomain }

// LeafNodeURL returns the nats-leaf:// URL of the leaf-node listener; it
// fails the test if the server has none.
func (s *Server) LeafNodeURL(t testing.TB) string {
	t.Helper()
	u, err := natsembed.LeafNodeURL(s.NATS())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return u
}

// Connect opens a client connection that reconnects quickly (so it survives
// Restart) and is closed by t.Cleanup.
func (s *Server) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	base := []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(25 * time.Millisecond),
		nats.Timeout(5 * time.Second),
	}
	nc, err := nats.Connect(s.URL(), append(base, opts...)...)
	if err != nil {
		t.Fatalf("testenv: connect %s: %v", s.URL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream opens a new connection (see Connect) and returns a JetStream
// context on the server's own domain.
func (s *Server) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(s.Connect(t))
	if err != nil {
		t.Fatalf("testenv: jetstream: %v", err)
	}
	return js
}

// Shutdown stops the server and waits for it. Idempotent.
func (s *Server) Shutdown() {
	srv := s.NATS()
	srv.Shutdown()
	srv.WaitForShutdown()
}

// Restart shuts the server down and starts it again on the same client and
// leaf-node ports with the same store directory, so JetStream state
// survives and clients and leaves reconnect. It also starts a server that
// was Shutdown.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.opts
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	srv, err := run(o, s.route)
	if err != nil {
		t.Fatalf("testenv: restart server: %v", err)
	}
	s.srv = srv
}

// Defaults of WaitFor.
const (
	DefaultWait     = 20 * time.Second
	DefaultInterval = 5 * time.Millisecond
)

// WaitFor polls cond every DefaultInterval until it holds, failing the test
// with what once within has elapsed (DefaultWait when within is 0). It is
// the one polling helper of the project's tests: deterministic tests wait
// on a condition, never on a sleep.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if within <= 0 {
		within = DefaultWait
	}
	Eventually(t, within, DefaultInterval, func() error {
		if cond() {
			return nil
		}
		return errors.New(what)
	})
}

// Eventually polls fn every `every` until it returns nil, failing the test
// with fn's last error once total has elapsed. Use it instead of sleeps.
func Eventually(t testing.TB, total, every time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: condition not met within %s: %v", total, err)
		}
		<-tick.C
	}
}
