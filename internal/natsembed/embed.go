// Package natsembed starts an in-process nats-server with JetStream for the
// ckfrelay binaries (and the test harness), so one command can run the whole
// pipeline on one machine without an external NATS deployment.
package natsembed

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultHost is the listen host when EmbeddedOptions.Host is empty: an
// embedded server is a local convenience, so it is not exposed by default.
const DefaultHost = "127.0.0.1"

// DefaultReadyTimeout bounds the wait for the listeners when
// EmbeddedOptions.ReadyTimeout is zero.
const DefaultReadyTimeout = 10 * time.Second

// readyPoll is how long one readiness probe may block before the fatal-log
// check runs again.
const readyPoll = 25 * time.Millisecond

var (
	// ErrInvalidOptions is wrapped by every EmbeddedOptions validation error.
	ErrInvalidOptions = errors.New("natsembed: invalid options")
	// ErrNotReady is wrapped when the server did not accept connections in
	// time or reported a fatal error while starting (e.g. port in use).
	ErrNotReady = errors.New("natsembed: server not ready")
)

// EmbeddedOptions configures RunEmbedded. The zero value is not usable:
// StoreDir is required.
type EmbeddedOptions struct {
	// Host is the client listen host; empty means DefaultHost.
	Host string
	// Port is the client port; 0 means the NATS default 4222, -1 a random
	// free port (read it back with ClientPort).
	Port int
	// StoreDir is the JetStream storage directory (required).
	StoreDir string
	// ServerName names the server; empty lets nats-server pick its id.
	ServerName string
	// JetStreamDomain, when set, puts this server's JetStream in its own
	// domain (one per DC in a leaf-node topology).
	JetStreamDomain string
	// LeafNodePort opens a leaf-node listener: 0 disables it, -1 picks a
	// random free port (read it back with LeafNodePort).
	LeafNodePort int
	// LeafNodeHost is the leaf-node listen host; empty means Host.
	LeafNodeHost string
	// LeafNodeNoAdvertise keeps the leaf-node listener's own URL out of the
	// INFO sent to leaves, so they only ever dial their configured remote
	// (e.g. a proxy standing in for the WAN).
	LeafNodeNoAdvertise bool
	// LeafRemotes are hub leaf-node URLs (nats-leaf://host:port or
	// nats://host:port) this server connects to as a leaf.
	LeafRemotes []string
	// LeafDeny lists subjects that never cross this server's leaf remotes,
	// in either direction (e.g. the DC-local input events kvevents.>).
	LeafDeny []string
	// ReadyTimeout bounds the wait for readiness; 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// LogWriter receives the server log when non-nil; nil keeps it silent.
	LogWriter LineWriter
	// Debug and Trace raise the server log level (only with LogWriter).
	Debug, Trace bool
	// ConfigFile is a nats-server config file (accounts, users,
	// permissions, TLS, listen address...). Its settings win; the fields
	// above fill what it leaves unset: listen host (still DefaultHost, so
	// only a config that says so exposes the server), port, store dir,
	// server name, JetStream domain, leaf nodes. JetStream is always on.
	ConfigFile string
}

// LineWriter receives one formatted server log line per call. It must be
// safe for concurrent use: nats-server logs from many goroutines.
type LineWriter interface {
	WriteLine(level, line string)
}

// ServerOptions validates o and translates it into nats-server options.
// RunEmbedded uses it; it is exported so callers can adjust rarely used
// settings before starting the server with RunOptions.
func (o EmbeddedOptions) ServerOptions() (*server.Options, error) {
	opts := &server.Options{}
	if o.ConfigFile != "" {
		var err error
		if opts, err = server.ProcessConfigFile(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("%w: config %s: %w", ErrInvalidOptions, o.ConfigFile, err)
		}
	}
	if strings.TrimSpace(o.StoreDir) == "" && opts.StoreDir == "" {
		return nil, fmt.Errorf("%w: store dir is required", ErrInvalidOptions)
	}
	if o.Port < -1 || o.Port > 65535 {
		return nil, fmt.Errorf("%w: port %d out of range (-1 random, 0 default, 1..65535)", ErrInvalidOptions, o.Port)
	}
	if o.LeafNodePort < -1 || o.LeafNodePort > 65535 {
		return nil, fmt.Errorf("%w: leafnode port %d out of range (-1 random, 0 off, 1..65535)", ErrInvalidOptions, o.LeafNodePort)
	}
	if o.ReadyTimeout < 0 {
		return nil, fmt.Errorf("%w: negative ready timeout %s", ErrInvalidOptions, o.ReadyTimeout)
	}
	host := o.Host
	if host == "" {
		host = DefaultHost
	}
	setString := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	// A config without a listen address keeps the loopback default: an
	// embedded server is exposed only on purpose.
	setString(&opts.Host, host)
	if opts.Port == 0 {
		opts.Port = o.Port
		if o.Port == 0 {
			opts.Port = server.DEFAULT_PORT
		}
	}
	setString(&opts.ServerName, o.ServerName)
	setString(&opts.StoreDir, o.StoreDir)
	setString(&opts.JetStreamDomain, o.JetStreamDomain)
	opts.JetStream = true
	opts.NoSigs = true
	if opts.MaxPayload == 0 {
		// Deltas may reach wire.MaxMessageBytes; the NATS default is 1 MiB.
		opts.MaxPayload = 8 << 20
	}
	opts.NoLog = o.LogWriter == nil
	opts.Debug = opts.Debug || o.Debug
	opts.Trace = opts.Trace || o.Trace
	if o.LeafNodePort != 0 {
		lh := o.LeafNodeHost
		if lh == "" {
			lh = host
		}
		opts.LeafNode.Host = lh
		opts.LeafNode.Port = o.LeafNodePort
		opts.LeafNode.NoAdvertise = o.LeafNodeNoAdvertise
	}
	for _, raw := range o.LeafRemotes {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: leaf remote %q: %w", ErrInvalidOptions, raw, err)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("%w: leaf remote %q has no host:port", ErrInvalidOptions, raw)
		}
		opts.LeafNode.Remotes = append(opts.LeafNode.Remotes, &server.RemoteLeafOpts{
			URLs:        []*url.URL{u},
			DenyImports: append([]string(nil), o.LeafDeny...),
			DenyExports: append([]string(nil), o.LeafDeny...),
		})
	}
	if len(opts.LeafNode.Remotes) > 0 && opts.LeafNode.ReconnectInterval == 0 {
		// Retry quickly so a leaf started before its hub joins soon after.
		opts.LeafNode.ReconnectInterval = 100 * time.Millisecond
	}
	return opts, nil
}

// RunEmbedded starts a JetStream-enabled nats-server from o and waits until
// it accepts connections. On any failure the server is shut down and the
// error wraps ErrInvalidOptions or ErrNotReady. The caller owns the returned
// server: Shutdown then WaitForShutdown.
func RunEmbedded(o EmbeddedOptions) (*server.Server, error) {
	opts, err := o.ServerOptions()
	if err != nil {
		return nil, err
	}
	timeout := o.ReadyTimeout
	if timeout == 0 {
		timeout = DefaultReadyTimeout
	}
	return RunOptions(opts, o.LogWriter, timeout)
}

// RunOptions starts a server from already built options (see
// EmbeddedOptions.ServerOptions). logs may be nil. Failures wrap ErrNotReady
// or ErrInvalidOptions, as for RunEmbedded.
func RunOptions(opts *server.Options, logs LineWriter, timeout time.Duration) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	// Always install our logger: the stock one exits the process on a fatal
	// error (e.g. port in use), which an embedding binary or test must not.
	lg := newLogger(logs)
	s.SetLoggerV2(lg, opts.Debug, opts.Trace, false)
	s.Start()

	deadline := time.Now().Add(timeout)
	for !s.ReadyForConnections(readyPoll) {
		if msg := lg.fatal(); msg != "" {
			shutdown(s)
			return nil, fmt.Errorf("%w: %s", ErrNotReady, msg)
		}
		if time.Now().After(deadline) {
			shutdown(s)
			return nil, fmt.Errorf("%w: no listener after %s on %s:%d", ErrNotReady, timeout, opts.Host, opts.Port)
		}
	}
	if opts.JetStream && !s.JetStreamEnabled() {
		msg := lg.fatal()
		shutdown(s)
		return nil, fmt.Errorf("%w: jetstream failed to start (store %s) %s", ErrNotReady, opts.StoreDir, msg)
	}
	return s, nil
}

func shutdown(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// ClientPort returns the client port the server listens on (useful after
// Port -1).
func ClientPort(s *server.Server) int {
	if a, ok := s.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// LeafNodeAddr returns the host and port of the server's leaf-node
// listener (useful after LeafNodePort -1), or an error when none is open.
func LeafNodeAddr(s *server.Server) (host string, port int, err error) {
	v, err := s.Varz(nil)
	if err != nil {
		return "", 0, fmt.Errorf("natsembed: read server state: %w", err)
	}
	if v.LeafNode.Port <= 0 {
		return "", 0, fmt.Errorf("natsembed: server %s has no leafnode listener", s.Name())
	}
	return v.LeafNode.Host, v.LeafNode.Port, nil
}

// LeafNodeURL returns the nats-leaf:// URL of the server's leaf-node
// listener, or an error when none is open.
func LeafNodeURL(s *server.Server) (string, error) {
	host, port, err := LeafNodeAddr(s)
	if err != nil {
		return "", err
	}
	return "nats-leaf://" + net.JoinHostPort(host, strconv.Itoa(port)), nil
}
