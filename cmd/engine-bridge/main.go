// Command engine-bridge subscribes to the ZMQ KV-event streams of vLLM /
// SGLang engines (msgpack, array or map encoding) and publishes them as
// Dynamo RouterEvent JSON on kvevents.<domain>.<dc>.<worker_id>, the
// KVEVENTS input the relay-producer consumes. One bridge per DC.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/bridge"
	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/pkg/promx"
)

func main() {
	cli.Main(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Getenv, os.Stderr) })
}

// engineFlags collects repeated --engine values.
type engineFlags []bridge.EngineSpec

func (e *engineFlags) String() string {
	parts := make([]string, len(*e))
	for i, s := range *e {
		parts[i] = s.String()
	}
	return strings.Join(parts, " ")
}

// Set parses one value; whitespace separates several (so the environment
// variable CKFRELAY_ENGINE can list more than one).
func (e *engineFlags) Set(v string) error {
	for _, f := range strings.Fields(v) {
		s, err := bridge.ParseEngine(f)
		if err != nil {
			return err
		}
		*e = append(*e, s)
	}
	return nil
}

type options struct {
	common      cli.Common
	httpAddr    string
	enginesFile string
	engines     engineFlags
	cfg         bridge.Config
	getenv      func(string) string
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{getenv: getenv}
	fs := flag.NewFlagSet("engine-bridge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cli.Usage(fs, "subscribes to vLLM/SGLang ZMQ KV-event streams and publishes them as RouterEvent JSON on the DC's KVEVENTS input", map[string]string{"engine": cli.GroupConnection, "engines-file": cli.GroupConnection})
	o.common.Register(fs)
	fs.StringVar(&o.cfg.Domain, "domain", "default", "indexer domain (one logical KV index namespace)")
	fs.StringVar(&o.cfg.DC, "dc", "", "data center whose relay consumes this bridge's output (required)")
	fs.Var(&o.engines, "engine", "engine as WORKER_ID=PUB_ENDPOINT[,replay=REPLAY_ENDPOINT][,rank=N][,topic=PREFIX][,metrics=http://HOST:PORT/metrics], e.g. 7=tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558 (repeatable)")
	fs.StringVar(&o.enginesFile, "engines-file", "", "file with one --engine value per line (# comments allowed)")
	fs.IntVar(&o.cfg.BlockSize, "block-size", 0, "router kv_block_size: stores with another block_size are dropped (0 accepts each event's own)")
	fs.BoolVar(&o.cfg.IndexHostPinned, "index-host-pinned", false, "also index host-pinned (CPU) blocks; by default only device (GPU) blocks are indexed")
	fs.StringVar(&o.cfg.Bucket, "bucket", bridge.DefaultBucket, "JetStream KV bucket of the per-engine resume points")
	fs.DurationVar(&o.cfg.ReconnectMax, "reconnect-max", 5*time.Second, "longest backoff between two connection attempts to an engine")
	fs.DurationVar(&o.cfg.ReplayIdleTimeout, "replay-idle-timeout", 2*time.Second, "longest silence between two replay replies before a replay is abandoned")
	fs.IntVar(&o.cfg.MaxInFlight, "max-in-flight", 1024, "unacknowledged KVEVENTS publishes per engine")
	fs.DurationVar(&o.cfg.CheckpointInterval, "checkpoint-interval", 250*time.Millisecond, "period of resume-point writes")
	fs.DurationVar(&o.cfg.LoadInterval, "load-interval", bridge.DefaultLoadInterval, "period of the scrapes of the engines' metrics endpoints (an --engine's metrics=URL) and of the worker load reports on ckfload.<domain>.<dc>.worker.<worker_id>")
	fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:9091", "health, status and metrics listen address (empty disables)")
	if err := cli.Parse(fs, args, getenv); err != nil {
		return nil, err
	}
	if o.cfg.DC == "" {
		return nil, errors.New("--dc is required")
	}
	if o.enginesFile != "" {
		f, err := os.Open(o.enginesFile)
		if err != nil {
			return nil, fmt.Errorf("--engines-file: %w", err)
		}
		specs, err := bridge.ParseEngines(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("--engines-file %s: %w", o.enginesFile, err)
		}
		o.engines = append(o.engines, specs...)
	}
	o.cfg.Engines = o.engines
	if o.cfg.MaxInFlight <= 0 {
		return nil, errors.New("--max-in-flight must be positive")
	}
	if err := o.cfg.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	return cli.RunParsed(ctx, "engine-bridge", args, getenv, stderr, parse, serve)
}

// CommonFlags makes options a cli.Options.
func (o *options) CommonFlags() *cli.Common { return &o.common }

func serve(ctx context.Context, o *options, log zerolog.Logger) error {
	tp, shutdownTracing, err := o.common.Tracer(ctx, cli.Service{Name: "engine-bridge", Domain: o.cfg.Domain, DC: o.cfg.DC}, o.getenv)
	if err != nil {
		return err
	}
	defer cli.FlushTracing(shutdownTracing, log)
	conn, err := o.common.Connect("engine-bridge-"+o.cfg.DC, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	reg := promx.NewRegistry("engine-bridge", cli.Version())
	o.cfg.Logger, o.cfg.Tracer, o.cfg.Metrics = log, tp, reg
	b, err := bridge.New(o.cfg, conn.JS)
	if err != nil {
		return err
	}
	log.Info().Str("domain", o.cfg.Domain).Str("dc", o.cfg.DC).Int("engines", len(o.cfg.Engines)).
		Bool("index_host_pinned", o.cfg.IndexHostPinned).Msg("engine-bridge starting")
	run := func(ctx context.Context) error {
		if err := b.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
	if o.httpAddr == "" {
		return run(ctx)
	}
	// The same bounds (timeouts, connection cap) as the relay's and the
	// indexer's status servers; a dead endpoint stops the bridge.
	return httpserve.DefaultConfig().Serve(ctx, o.httpAddr, cli.TraceHTTP(b.Handler(reg), tp, "engine-bridge"), log, func(ctx context.Context, _ string) error { return run(ctx) })
}
