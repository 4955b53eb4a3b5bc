// Command ckf-wanproxy is a TCP fault proxy for one WAN link (a DC leaf ↔
// the hub cluster): it forwards each route's listen address to its target
// and applies the link's toxics (latency with jitter per direction, a
// bandwidth cap, reset, stall, cut/heal), set at start by flags and at
// run time through a small HTTP control API (internal/wanproxy):
//
//	ckf-wanproxy --name dc-a \
//	  --routes 0.0.0.0:7422=nats-hub-1:7422,0.0.0.0:7423=nats-hub-2:7422 \
//	  --http-addr 0.0.0.0:8474
//	curl -X POST localhost:8474/v1/latency -d '{"delay":"75ms","jitter":"10ms"}'
//
// docs/chaos.md lists the API and why this is not toxiproxy.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/internal/wanproxy"
)

func main() {
	cli.Main(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Getenv, os.Stderr) })
}

type options struct {
	common    cli.Common
	name      string
	routes    []wanproxy.Route
	httpAddr  string
	latency   wanproxy.Latency
	bandwidth int64
	dial      time.Duration
	queue     int
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{}
	var routes string
	var delay, jitter time.Duration
	fs := flag.NewFlagSet("ckf-wanproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cli.Usage(fs, "a TCP fault proxy for one WAN link: latency with jitter, bandwidth cap, reset, stall, cut/heal, set over HTTP", map[string]string{
		"routes": cli.GroupConnection, "name": cli.GroupIdentity,
	})
	fs.StringVar(&o.name, "name", "wan", "link name (e.g. the DC) in logs and in GET /v1/link")
	fs.StringVar(&routes, "routes", "", "listen=target pairs, comma-separated (e.g. 0.0.0.0:7422=nats-hub-1:7422); all share the link's toxics")
	fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8474", "control API and /healthz listen address")
	fs.DurationVar(&delay, "latency", 0, "initial one-way delay, both directions (a round trip is twice it)")
	fs.DurationVar(&jitter, "jitter", 0, "initial jitter (± uniform) of the one-way delay")
	fs.Int64Var(&o.bandwidth, "bandwidth", 0, "initial cap in bytes/s, each direction (0: none)")
	fs.DurationVar(&o.dial, "dial-timeout", 5*time.Second, "bound on dialling a target")
	fs.IntVar(&o.queue, "queue-bytes", 16<<20, "bytes read but not yet written per direction of a connection before the proxy stops reading (must hold rate × delay)")
	fs.StringVar(&o.common.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.common.LogFormat, "log-format", "console", "log format: console or json")
	if err := cli.Parse(fs, args, getenv); err != nil {
		return nil, err
	}
	rs, err := wanproxy.ParseRoutes(routes)
	if err != nil {
		return nil, fmt.Errorf("--routes: %w", err)
	}
	o.routes = rs
	o.latency = wanproxy.Latency{Delay: wanproxy.Duration(delay), Jitter: wanproxy.Duration(jitter)}
	if err := o.latency.Validate(); err != nil {
		return nil, err
	}
	if o.bandwidth < 0 || o.dial <= 0 || o.queue <= 0 {
		return nil, errors.New("--bandwidth must be ≥ 0, --dial-timeout and --queue-bytes > 0")
	}
	return o, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	return cli.RunParsed(ctx, "ckf-wanproxy", args, getenv, stderr, parse, serve)
}

// CommonFlags makes options a cli.Options.
func (o *options) CommonFlags() *cli.Common { return &o.common }

func serve(ctx context.Context, o *options, log zerolog.Logger) error {
	log = log.With().Str("link", o.name).Logger()
	l, err := wanproxy.New(wanproxy.Config{Name: o.name, Routes: o.routes, DialTimeout: o.dial, QueueBytes: o.queue, Log: log})
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.SetLatency(o.latency, wanproxy.Up, wanproxy.Down); err != nil {
		return err
	}
	if err := l.SetBandwidth(o.bandwidth, wanproxy.Up, wanproxy.Down); err != nil {
		return err
	}
	srv, err := httpserve.DefaultConfig().Start(o.httpAddr, wanproxy.NewHandler(l), log)
	if err != nil {
		return err
	}
	for _, r := range l.Routes() {
		log.Info().Str("addr", r.Listen).Str("target", r.Target).Msg("forwarding")
	}
	log.Info().Str("addr", srv.Addr().String()).Msg("control API listening")
	sctx, cancel := srv.Watch(ctx)
	defer cancel()
	<-sctx.Done()
	shut, done := context.WithTimeout(context.Background(), 3*time.Second)
	defer done()
	_ = srv.Shutdown(shut)
	if ctx.Err() != nil {
		return nil
	}
	return srv.Err()
}
