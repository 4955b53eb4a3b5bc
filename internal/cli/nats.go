package cli

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/natsembed"
)

// Reconnect policy shared by every binary: a lost server is retried for
// ever, with jitter so a fleet of relays and workers does not reconnect in
// lock step after a NATS restart.
const (
	reconnectWait      = 250 * time.Millisecond
	reconnectJitter    = 250 * time.Millisecond
	reconnectJitterTLS = time.Second
	// DefaultConnectTimeout is the default of --nats-connect-timeout.
	DefaultConnectTimeout = time.Minute
)

// ErrSecurityFlags is wrapped by every invalid combination of the NATS
// security flags.
var ErrSecurityFlags = errors.New("invalid NATS security flags")

// Security are the flags that authenticate a NATS connection and protect
// it with TLS. At most one of Creds, NKeySeed and User is used; files are
// read when the connection is made, and their content never appears in a
// log line or an error.
type Security struct {
	// Creds is a JWT user credentials file (nsc / decentralised auth).
	Creds string
	// NKeySeed is a file holding an nkey user seed (SU...).
	NKeySeed string
	// User and PasswordFile authenticate with a user name and a password
	// read from a file (so it is not visible in the process list).
	User, PasswordFile string
	// TLSCA is a PEM file of CAs trusted for the server certificate;
	// setting it (or TLSCert) requires TLS.
	TLSCA string
	// TLSCert and TLSKey are the client certificate and key (mutual TLS).
	TLSCert, TLSKey string
	// ConnectTimeout bounds the wait for the first connection (the server
	// may start after the binary); 0 means DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

// Register adds the security flags to fs (CKFRELAY_NATS_* through Parse).
func (s *Security) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.Creds, "nats-creds", "", "NATS user credentials file (JWT + nkey seed)")
	fs.StringVar(&s.NKeySeed, "nats-nkey", "", "file holding a NATS nkey user seed")
	fs.StringVar(&s.User, "nats-user", "", "NATS user name (with --nats-password-file)")
	fs.StringVar(&s.PasswordFile, "nats-password-file", "", "file holding the password of --nats-user")
	fs.StringVar(&s.TLSCA, "nats-tls-ca", "", "PEM file of CAs trusted for the NATS server certificate (turns TLS on)")
	fs.StringVar(&s.TLSCert, "nats-tls-cert", "", "PEM client certificate for NATS mutual TLS (with --nats-tls-key)")
	fs.StringVar(&s.TLSKey, "nats-tls-key", "", "PEM private key of --nats-tls-cert")
	fs.DurationVar(&s.ConnectTimeout, "nats-connect-timeout", DefaultConnectTimeout, "how long to wait for the first NATS connection before giving up (later losses are retried for ever)")
}

// Validate checks the combination of flags without reading any file.
func (s Security) Validate() error {
	n := 0
	for _, set := range []bool{s.Creds != "", s.NKeySeed != "", s.User != ""} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return fmt.Errorf("%w: use one of --nats-creds, --nats-nkey or --nats-user", ErrSecurityFlags)
	case s.User != "" && s.PasswordFile == "":
		return fmt.Errorf("%w: --nats-user needs --nats-password-file", ErrSecurityFlags)
	case s.User == "" && s.PasswordFile != "":
		return fmt.Errorf("%w: --nats-password-file needs --nats-user", ErrSecurityFlags)
	case (s.TLSCert == "") != (s.TLSKey == ""):
		return fmt.Errorf("%w: --nats-tls-cert and --nats-tls-key go together", ErrSecurityFlags)
	case s.ConnectTimeout < 0:
		return fmt.Errorf("%w: negative --nats-connect-timeout", ErrSecurityFlags)
	}
	return nil
}

// options reads the files the flags name and returns the nats.go options.
func (s Security) options() ([]nats.Option, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case s.Creds != "":
		if err := readable(s.Creds, "--nats-creds"); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(s.Creds))
	case s.NKeySeed != "":
		o, err := nats.NkeyOptionFromSeed(s.NKeySeed)
		if err != nil {
			// The nkeys error names the problem, never the seed.
			return nil, fmt.Errorf("--nats-nkey %s: %w", s.NKeySeed, err)
		}
		opts = append(opts, o)
	case s.User != "":
		b, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-password-file: %w", err)
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return nil, fmt.Errorf("%w: --nats-password-file %s is empty", ErrSecurityFlags, s.PasswordFile)
		}
		opts = append(opts, nats.UserInfo(s.User, pw))
	}
	if s.TLSCA != "" {
		if err := readable(s.TLSCA, "--nats-tls-ca"); err != nil {
			return nil, err
		}
		opts = append(opts, nats.RootCAs(s.TLSCA))
	}
	if s.TLSCert != "" {
		if _, err := tls.LoadX509KeyPair(s.TLSCert, s.TLSKey); err != nil {
			return nil, fmt.Errorf("--nats-tls-cert/--nats-tls-key: %w", err)
		}
		opts = append(opts, nats.ClientCert(s.TLSCert, s.TLSKey))
	}
	return opts, nil
}

func readable(path, flagName string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	return f.Close()
}

// RedactURL hides the credentials of every URL in a comma-separated NATS
// URL list: user:password@ becomes user:***@ and a bare token@ becomes
// ***@. A string that does not parse is replaced whole when it holds an @.
func RedactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "@") {
			parts[i] = p
			continue
		}
		u, err := url.Parse(p)
		if err != nil || u.User == nil {
			parts[i] = "<redacted url>"
			continue
		}
		if _, hasPw := u.User.Password(); hasPw {
			u.User = url.UserPassword(u.User.Username(), "***")
		} else {
			u.User = url.User("***") // a token
		}
		parts[i] = strings.Replace(u.String(), "%2A%2A%2A", "***", 1)
	}
	return strings.Join(parts, ",")
}

// ConnStats counts the asynchronous errors of a connection. Safe for
// concurrent use: the nats.go callbacks run on its own goroutine.
type ConnStats struct {
	SlowConsumers        atomic.Uint64
	PermissionViolations atomic.Uint64
	OtherErrors          atomic.Uint64

	mu      sync.Mutex
	lastErr error
	vec     *prometheus.CounterVec // nil until RegisterMetrics
}

// RegisterMetrics exposes the counts as ckf_nats_async_errors_total{kind}
// on reg; counts from before the call are carried over.
func (s *ConnStats) RegisterMetrics(reg prometheus.Registerer) error {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ckf_nats_async_errors_total",
		Help: "Asynchronous NATS errors by kind (slow_consumer, permission, other)."}, []string{"kind"})
	if err := reg.Register(vec); err != nil {
		return fmt.Errorf("nats metrics: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vec.WithLabelValues("slow_consumer").Add(float64(s.SlowConsumers.Load()))
	vec.WithLabelValues("permission").Add(float64(s.PermissionViolations.Load()))
	vec.WithLabelValues("other").Add(float64(s.OtherErrors.Load()))
	s.vec = vec
	return nil
}

func (s *ConnStats) record(err error) string {
	kind, c := "other", &s.OtherErrors
	switch {
	case errors.Is(err, nats.ErrSlowConsumer):
		kind, c = "slow_consumer", &s.SlowConsumers
	case errors.Is(err, nats.ErrPermissionViolation):
		kind, c = "permission", &s.PermissionViolations
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The series first: a reader that sees the atomic count move (they
	// are read without the lock) then finds the series moved too.
	if s.vec != nil {
		s.vec.WithLabelValues(kind).Inc()
	}
	c.Add(1)
	s.lastErr = err
	return kind
}

func (s *ConnStats) setLast(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

func (s *ConnStats) last() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// ErrNotConnected is returned when the first connection did not succeed
// within the connect timeout.
var ErrNotConnected = errors.New("no NATS connection")

// Dial connects to url (a comma-separated list) with the security flags,
// unbounded jittered reconnects and RetryOnFailedConnect: a server that is
// not up yet is waited for, up to s.ConnectTimeout. Errors and log lines
// carry the URL with its credentials redacted. extra options are applied
// last.
func Dial(rawURL, name string, s Security, log zerolog.Logger, extra ...nats.Option) (*nats.Conn, *ConnStats, error) {
	secure, err := s.options()
	if err != nil {
		return nil, nil, err
	}
	shown := RedactURL(rawURL)
	stats := &ConnStats{}
	connected := make(chan struct{}, 1)
	opts := append([]nats.Option{
		nats.Name(name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.ReconnectJitter(reconnectJitter, reconnectJitterTLS),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			kind := stats.record(err)
			ev := log.Warn().Err(err).Str("kind", kind)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats async error")
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				stats.setLast(err)
				log.Warn().Err(err).Msg("nats disconnected")
			}
		}),
		nats.ConnectHandler(func(*nats.Conn) {
			// Dial logs the connection itself: a callback may run after
			// the caller stopped using log's writer.
			select {
			case connected <- struct{}{}:
			default:
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats reconnected")
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				stats.setLast(err)
			}
		}),
	}, secure...)
	opts = append(opts, extra...)
	nc, err := nats.Connect(rawURL, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", shown, err)
	}
	if nc.IsConnected() {
		log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats connected")
		return nc, stats, nil
	}
	timeout := s.ConnectTimeout
	if timeout == 0 {
		timeout = DefaultConnectTimeout
	}
	log.Warn().Str("url", shown).Dur("timeout_ms", timeout).Msg("nats not reachable yet; retrying")
	select {
	case <-connected:
		log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats connected")
		return nc, stats, nil
	case <-time.After(timeout):
		nc.Close()
		if last := stats.last(); last != nil {
			return nil, nil, fmt.Errorf("connect %s: %w within %s: %w", shown, ErrNotConnected, timeout, last)
		}
		return nil, nil, fmt.Errorf("connect %s: %w within %s", shown, ErrNotConnected, timeout)
	}
}

// startEmbedded starts the embedded server (from --nats-config when given)
// and registers its shutdown on conn.
func (c *Common) startEmbedded(conn *Conn, name string, log zerolog.Logger) (*server.Server, string, error) {
	dir := c.StoreDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "ckfrelay-js-")
		if err != nil {
			return nil, "", err
		}
		dir = tmp
		conn.cleanup = append(conn.cleanup, func() { os.RemoveAll(tmp) })
	}
	srv, err := natsembed.RunEmbedded(natsembed.EmbeddedOptions{Port: c.NatsPort, StoreDir: dir, ServerName: name, ConfigFile: c.NatsConfig})
	if err != nil {
		return nil, "", fmt.Errorf("embedded nats-server: %w", err)
	}
	conn.cleanup = append(conn.cleanup, func() { srv.Shutdown(); srv.WaitForShutdown() })
	url := srv.ClientURL()
	// The process itself dials the loopback address even when the config
	// listens on every interface.
	url = strings.Replace(url, "://0.0.0.0:", "://127.0.0.1:", 1)
	ev := log.Info().Str("url", url).Str("store_dir", srv.StoreDir())
	if c.NatsConfig != "" {
		ev = ev.Str("config", c.NatsConfig)
	}
	ev.Msg("embedded nats-server started (JetStream on); other processes may join it with --nats-url")
	return srv, url, nil
}

// ValidateConnection checks the connection flags together: the security
// flags, and --nats-config only for the embedded server.
func (c *Common) ValidateConnection() error {
	if c.NatsURL != "" && c.NatsConfig != "" {
		return fmt.Errorf("%w: --nats-config configures the embedded server; it cannot be used with --nats-url", ErrSecurityFlags)
	}
	return c.Security.Validate()
}
