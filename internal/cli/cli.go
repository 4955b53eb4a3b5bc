// Package cli holds what both binaries share: flags that fall back to
// CKFRELAY_* environment variables, logger and tracer set-up, and the NATS
// connection (external by URL, or an embedded server).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// EnvPrefix prefixes the environment variable of every flag.
const EnvPrefix = "CKFRELAY_"

// EnvName is the environment variable backing flag name: --nats-url is
// CKFRELAY_NATS_URL.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args, then fills every flag not given on the command line
// from its environment variable (looked up with getenv). A bad value names
// its source.
//
// Every command gets --version: Parse adds it when Usage did not, prints
// the version to fs.Output() and returns ErrVersion (which matches
// flag.ErrHelp).
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	addVersionFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := HandleVersion(fs); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || notFromEnv[f.Name] {
			return
		}
		env := EnvName(f.Name)
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("invalid value %q for %s: %w", v, env, err))
			}
		}
	})
	return errors.Join(errs...)
}

// Common are the flags both binaries take.
type Common struct {
	NatsURL   string
	JSDomain  string
	NatsPort  int
	StoreDir  string
	LogLevel  string
	LogFormat string
	Tracing
	// NatsConfig is a nats-server config file for the embedded server.
	NatsConfig string
	// Security authenticates the connection and turns TLS on (nats.go).
	Security Security
	// JSReplicas is the replica count of every stream, KV and Object Store
	// bucket the binary creates (1..5; production runs 3 on a clustered
	// JetStream).
	JSReplicas int
	// PprofAddr serves net/http/pprof when set (see PprofAddr).
	PprofAddr string
	// CheckConfig makes Run stop after the flags and the files they name
	// were checked: a pre-flight for a deployment's arguments (the Helm
	// chart's check runs every container's arguments this way).
	CheckConfig bool
}

// Register adds the common flags to fs.
func (c *Common) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.NatsURL, "nats-url", "", "NATS server URL; empty starts an embedded nats-server with JetStream")
	fs.StringVar(&c.JSDomain, "js-domain", "", "JetStream domain holding the ckfrelay streams (e.g. the hub's, when connected through a leaf node)")
	fs.IntVar(&c.NatsPort, "nats-port", 4222, "client port of the embedded nats-server (127.0.0.1 only; -1 picks a free port)")
	fs.StringVar(&c.StoreDir, "store-dir", "", "JetStream store directory of the embedded server (default: a new temporary directory)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "console", "log format: console or json")
	c.Tracing.register(fs)
	fs.StringVar(&c.NatsConfig, "nats-config", "", "nats-server config file (accounts, users, permissions, TLS) for the embedded server; without it the embedded server listens on 127.0.0.1 only")
	c.Security.Register(fs)
	fs.StringVar(&c.PprofAddr, "pprof-addr", "", "serve Go profiles at /debug/pprof/ on this address (off when empty; a bare port binds 127.0.0.1)")
	fs.BoolVar(&c.CheckConfig, checkConfigFlag, false, "check the flags and the files they name (pools, engines), print \"configuration ok\" and exit 0 without connecting or serving")
	fs.IntVar(&c.JSReplicas, "js-replicas", 1, "replicas of every stream, KV and Object Store bucket created (1..5; production: 3 on a clustered JetStream); existing ones keep theirs")
}

// ValidateReplicas reports a --js-replicas outside 1..5.
func (c *Common) ValidateReplicas() error {
	if c.JSReplicas < 1 || c.JSReplicas > 5 {
		return fmt.Errorf("invalid --js-replicas %d (want 1..5)", c.JSReplicas)
	}
	return nil
}

// Conn is a NATS connection, plus the embedded server when one was started.
type Conn struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Embedded *server.Server
	// URL is the server URL with its credentials redacted (safe to log).
	URL string
	// Stats counts the connection's asynchronous errors.
	Stats   *ConnStats
	cleanup []func()
}

// Close drains the connection and stops the embedded server.
func (c *Conn) Close() {
	if c.NC != nil {
		_ = c.NC.Drain()
	}
	for i := len(c.cleanup) - 1; i >= 0; i-- {
		c.cleanup[i]()
	}
}

// Connect dials NatsURL, or starts an embedded server when it is empty.
func (c *Common) Connect(name string, log zerolog.Logger) (*Conn, error) {
	if err := c.ValidateConnection(); err != nil {
		return nil, err
	}
	raw := c.NatsURL
	conn := &Conn{}
	if c.NatsURL == "" {
		srv, url, err := c.startEmbedded(conn, name, log)
		if err != nil {
			conn.Close()
			return nil, err
		}
		conn.Embedded, raw = srv, url
	}
	conn.URL = RedactURL(raw)
	nc, stats, err := Dial(raw, name, c.Security, log)
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.NC, conn.Stats = nc, stats
	var js jetstream.JetStream
	if c.JSDomain != "" {
		js, err = jetstream.NewWithDomain(nc, c.JSDomain)
	} else {
		js, err = jetstream.New(nc)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.JS = js
	return conn, nil
}
