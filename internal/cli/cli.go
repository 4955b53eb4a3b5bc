// Package cli holds what both binaries share: flags that fall back to
// CKFRELAY_* environment variables, logger and tracer set-up, and the NATS
// connection (external by URL, or an embedded server).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/pkg/natsembed"
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
	if err := handleVersion(fs); err != nil {
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
}

// Conn is a NATS connection, plus the embedded server when one was started.
type Conn struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Embedded *server.Server
	URL      string
	cleanup  []func()
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
	conn := &Conn{URL: c.NatsURL}
	if c.NatsURL == "" {
		dir := c.StoreDir
		if dir == "" {
			tmp, err := os.MkdirTemp("", "ckfrelay-js-")
			if err != nil {
				return nil, err
			}
			dir = tmp
			conn.cleanup = append(conn.cleanup, func() { os.RemoveAll(tmp) })
		}
		srv, err := natsembed.RunEmbedded(natsembed.EmbeddedOptions{Port: c.NatsPort, StoreDir: dir, ServerName: name})
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("embedded nats-server: %w", err)
		}
		conn.Embedded = srv
		conn.URL = srv.ClientURL()
		conn.cleanup = append(conn.cleanup, func() { srv.Shutdown(); srv.WaitForShutdown() })
		log.Info().Str("url", conn.URL).Str("store_dir", dir).Msg("embedded nats-server started (JetStream on); other processes may join it with --nats-url")
	}
	nc, err := nats.Connect(conn.URL, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info().Str("url", nc.ConnectedUrl()).Msg("nats reconnected") }))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect %s: %w", conn.URL, err)
	}
	conn.NC = nc
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
