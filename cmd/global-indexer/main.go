// Command global-indexer runs the ckfrelay global indexer: it follows every
// DC lane of one domain on NATS JetStream and serves prefix queries over
// HTTP (pkg/api) and a NATS micro endpoint. With no --nats-url it starts an
// embedded nats-server so one command runs the whole pipeline locally.
//
// Every flag can also be given as an environment variable CKFRELAY_<FLAG>
// (upper snake case, e.g. CKFRELAY_NATS_URL); a flag on the command line
// wins over the environment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/indexer"
	"github.com/ckfrelay/ckfrelay/pkg/metrics"
	"github.com/ckfrelay/ckfrelay/pkg/natsembed"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// EnvPrefix prefixes the environment variable of every flag.
const EnvPrefix = "CKFRELAY_"

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// shutdownTimeout bounds the HTTP server's graceful shutdown.
const shutdownTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the parsed flags.
type options struct {
	NatsURL        string
	NatsPort       int
	StoreDir       string
	Domain         string
	HTTPAddr       string
	ExpectedBlocks uint64
	LogLevel       zerolog.Level
	LogFormat      string
	Workers        int
	Queue          int
}

// errUsage marks a bad command line or environment (exit code 2).
var errUsage = errors.New("usage")

// parseFlags parses args over the environment (env returns "" for unset).
// flag.ErrHelp is returned for -h; other errors wrap errUsage.
func parseFlags(args []string, env func(string) string, out io.Writer) (options, error) {
	var o options
	var logLevel string
	fs := flag.NewFlagSet("global-indexer", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.NatsURL, "nats-url", "", "NATS server URL; empty starts an embedded nats-server")
	fs.IntVar(&o.NatsPort, "nats-port", 4222, "client port of the embedded nats-server (-1: random)")
	fs.StringVar(&o.StoreDir, "store-dir", "", "JetStream store directory of the embedded nats-server (default: a temporary directory)")
	fs.StringVar(&o.Domain, "domain", "default", "indexer domain")
	fs.StringVar(&o.HTTPAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address of the query API")
	fs.Uint64Var(&o.ExpectedBlocks, "expected-blocks", 0, "expected blocks per DC fixing the CKF format (0: learn it from the first snapshot)")
	fs.StringVar(&logLevel, "log-level", "info", "log level (trace, debug, info, warn, error)")
	fs.StringVar(&o.LogFormat, "log-format", "json", "log format (json or console)")
	fs.IntVar(&o.Workers, "workers", ckf.DefaultIngestionWorkers, "ingestion workers")
	fs.IntVar(&o.Queue, "queue", ckf.DefaultIngestionQueue, "queue capacity of each ingestion worker")

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(f.Name)
		v := env(name)
		if v == "" || envErr != nil {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			envErr = fmt.Errorf("%w: invalid value %q for %s: %w", errUsage, v, name, err)
		}
	})
	if envErr != nil {
		return options{}, envErr
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return options{}, err
		}
		return options{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	lvl, err := zerolog.ParseLevel(logLevel)
	if err != nil || logLevel == "" {
		return options{}, fmt.Errorf("%w: --log-level %q: want trace, debug, info, warn or error", errUsage, logLevel)
	}
	o.LogLevel = lvl
	switch {
	case o.LogFormat != "json" && o.LogFormat != "console":
		return options{}, fmt.Errorf("%w: --log-format %q: want json or console", errUsage, o.LogFormat)
	case o.NatsURL == "" && (o.NatsPort < -1 || o.NatsPort == 0 || o.NatsPort > 65535):
		return options{}, fmt.Errorf("%w: --nats-port %d: want 1..65535 or -1", errUsage, o.NatsPort)
	case o.Workers < 1:
		return options{}, fmt.Errorf("%w: --workers %d: want at least 1", errUsage, o.Workers)
	case o.Queue < 1:
		return options{}, fmt.Errorf("%w: --queue %d: want at least 1", errUsage, o.Queue)
	case o.HTTPAddr == "":
		return options{}, fmt.Errorf("%w: --http-addr is required", errUsage)
	}
	if _, err := o.config(zerolog.Nop(), nil); err != nil {
		return options{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	return o, nil
}

// EnvName is the environment variable of a flag: "nats-url" → CKFRELAY_NATS_URL.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// config builds the indexer config the options describe.
func (o options) config(log zerolog.Logger, reg *metrics.Registry) (indexer.Config, error) {
	pc := consumer.DefaultPoolConfig()
	pc.WorkerCount, pc.QueueCapacity = o.Workers, o.Queue
	cfg := indexer.Config{
		Domain:  o.Domain,
		Pool:    pc,
		Logger:  log,
		Metrics: reg,
		Tracer:  otel.GetTracerProvider(),
	}
	if o.ExpectedBlocks > 0 {
		f, err := ckf.NewConfig(o.ExpectedBlocks).Format()
		if err != nil {
			return indexer.Config{}, fmt.Errorf("--expected-blocks %d: %w", o.ExpectedBlocks, err)
		}
		cfg.Format = &f
	}
	return cfg, cfg.Validate()
}

func newLogger(o options, w io.Writer) zerolog.Logger {
	if o.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(o.LogLevel).With().Timestamp().Str("service", "global-indexer").Logger()
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, env, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "global-indexer: %v\n", err)
		return exitUsage
	}
	log := newLogger(o, stdout)
	if err := serve(ctx, o, log); err != nil {
		log.Error().Err(err).Msg("global-indexer failed")
		return exitError
	}
	return exitOK
}

// serve runs the indexer until ctx ends.
func serve(ctx context.Context, o options, log zerolog.Logger) error {
	url := o.NatsURL
	if url == "" {
		srv, cleanup, err := startEmbedded(o, log)
		if err != nil {
			return err
		}
		defer cleanup()
		url = srv
	}
	nc, err := nats.Connect(url, nats.Name("ckf-global-indexer"), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	reg := metrics.NewRegistry()
	cfg, err := o.config(log, reg)
	if err != nil {
		return err
	}
	svc, err := indexer.New(nc, js, cfg)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", o.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http listen: %w", err)
	}
	hs := &http.Server{Handler: api.Handler(svc, svc.APIMetrics(), reg), ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	httpErr := make(chan error, 1)
	go func() {
		err := hs.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			cancel() // a dead API ends the process
		}
		httpErr <- err
	}()
	log.Info().Str("http_addr", ln.Addr().String()).Str("nats_url", url).Str("domain", o.Domain).
		Str("match_subject", indexer.MatchSubject(o.Domain)).Msg("global-indexer serving")

	runErr := svc.Run(ctx)
	shutCtx, stop := context.WithTimeout(context.Background(), shutdownTimeout)
	defer stop()
	shutErr := hs.Shutdown(shutCtx)
	if err := <-httpErr; err != nil {
		return fmt.Errorf("http: %w", err)
	}
	if runErr != nil {
		return runErr
	}
	if shutErr != nil {
		return fmt.Errorf("http shutdown: %w", shutErr)
	}
	log.Info().Msg("global-indexer stopped")
	return nil
}

// startEmbedded starts the embedded nats-server and returns its URL and a
// cleanup that stops it (and removes a temporary store).
func startEmbedded(o options, log zerolog.Logger) (string, func(), error) {
	dir, tmp := o.StoreDir, false
	if dir == "" {
		d, err := os.MkdirTemp("", "ckf-indexer-js-")
		if err != nil {
			return "", nil, fmt.Errorf("embedded nats store: %w", err)
		}
		dir, tmp = d, true
	}
	var srv *server.Server
	opts, err := natsembed.EmbeddedOptions{Host: natsembed.DefaultHost, Port: o.NatsPort, StoreDir: dir}.ServerOptions()
	if err == nil {
		// Full-size deltas need the relay transport's 8 MiB, not NATS's 1 MiB default.
		opts.MaxPayload = wire.MaxMessageBytes
		srv, err = natsembed.RunOptions(opts, nil, natsembed.DefaultReadyTimeout)
	}
	if err != nil {
		if tmp {
			os.RemoveAll(dir)
		}
		return "", nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	log.Info().Str("store_dir", dir).Str("url", srv.ClientURL()).Msg("embedded nats-server started")
	return srv.ClientURL(), func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		if tmp {
			os.RemoveAll(dir)
		}
	}, nil
}
