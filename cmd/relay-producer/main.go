// Command relay-producer runs one DC's relay: it consumes worker KV events
// from JetStream (kvevents.<domain>.<dc>.<worker_id>) and publishes the
// pool's CKF lane (snapshots, deltas, drain markers) under a fenced lease.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/internal/pools"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/promx"
)

func main() {
	cli.Main(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Getenv, os.Stderr) })
}

type options struct {
	common        cli.Common
	httpAddr      string
	http          httpserve.Config
	mode          string
	inputJSDomain string
	cfg           relay.Config
	kv            kvrelayOptions
	getenv        func(string) string
	poolsFile     string
	pools         *pools.File
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{cfg: relay.DefaultConfig("default", ""), http: httpserve.DefaultConfig(), getenv: getenv}
	fs := flag.NewFlagSet("relay-producer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cli.Usage(fs, "consumes one DC's worker KV events from JetStream and publishes the pool's CKF lane under a fenced lease", nil)
	o.common.Register(fs)
	fs.StringVar(&o.cfg.Domain, "domain", "default", "indexer domain (one logical KV index namespace)")
	fs.StringVar(&o.cfg.DC, "dc", "", "this relay's data center name (required)")
	fs.StringVar(&o.cfg.Instance, "instance", o.cfg.Instance, "relay instance id used in leases")
	fs.Uint64Var(&o.cfg.CKF.ExpectedBlocksPerDC, "expected-blocks", o.cfg.CKF.ExpectedBlocksPerDC, "expected distinct blocks in this DC's pool (sizes the filter; all DCs of a domain must agree)")
	fs.Uint64Var(&o.cfg.CKF.Seed, "seed", ckf.DefaultSeed, "CKF addressing seed (all DCs of a domain must agree)")
	fs.StringVar(&o.mode, "mode", "canonical", "hash mode: canonical (resolve engine parent chains) or verbatim (1.4.0: block_hash as-is)")
	fs.DurationVar(&o.cfg.PublishInterval, "publish-interval", o.cfg.PublishInterval, "longest wait before applied events are published")
	fs.DurationVar(&o.cfg.SnapshotInterval, "snapshot-interval", o.cfg.SnapshotInterval, "period of barrier snapshots")
	fs.DurationVar(&o.cfg.CheckpointInterval, "checkpoint-interval", o.cfg.CheckpointInterval, "period of exact-state checkpoints to the object store (a restart replays only the input after the latest); 0 disables")
	fs.Uint64Var(&o.cfg.MaxTrackedBlocks, "max-tracked-blocks", 0, "bound on the distinct blocks the relay tracks; past it stored events are refused and the tracked_blocks fault is reported (0: 4 × --expected-blocks)")
	fs.DurationVar(&o.cfg.Streams.EventMaxAge, "input-max-age", o.cfg.Streams.EventMaxAge, "max age of the KVEVENTS input stream when this relay creates it (0: unlimited); at least twice --checkpoint-interval")
	fs.Int64Var(&o.cfg.Streams.EventMaxBytes, "input-max-bytes", o.cfg.Streams.EventMaxBytes, "max size in bytes of the KVEVENTS input stream when this relay creates it (0: unlimited)")
	fs.DurationVar(&o.cfg.HeartbeatInterval, "heartbeat-interval", o.cfg.HeartbeatInterval, "period of drain markers / heartbeats")
	fs.Uint64Var(&o.cfg.KVCapacityBlocks, "kv-capacity-blocks", 0, "the pool's KV capacity in blocks (sum over its workers) for the load windows' occupancy (0: the capacities the workers declare in their load reports; none: occupancy unknown)")
	fs.DurationVar(&o.cfg.LoadInterval, "load-interval", relay.DefaultLoadInterval, "period of the pool's load windows on ckfload.<domain>.<dc>.pool")
	fs.DurationVar(&o.cfg.WorkerLoadFresh, "worker-load-fresh", relay.DefaultWorkerLoadFresh, "how long a worker's load report counts; serving load is published only while every known worker's report is this fresh")
	fs.DurationVar(&o.cfg.LeaseTTL, "lease-ttl", o.cfg.LeaseTTL, "producer lease time-to-live")
	fs.StringVar(&o.inputJSDomain, "input-js-domain", "", "JetStream domain of the input stream KVEVENTS (the DC's own, so workers publish locally and a WAN cut loses nothing); empty: the same as --js-domain")
	fs.Int64Var(&o.cfg.UploadMinRate, "upload-min-rate", relay.DefaultUploadMinRate, "slowest rate in bytes/s a snapshot body may reach the object store at: its put times out after 30 s plus its size at this rate (size it below the WAN link's share for the relay)")
	fs.IntVar(&o.cfg.Streams.EventReplicas, "input-js-replicas", 0, "replicas of the KVEVENTS input stream when this relay creates it (1..5; 0: the same as --js-replicas). A DC's single-node leaf needs 1 while the hub's cluster takes 3")
	fs.StringVar(&o.poolsFile, "pools-file", "", "YAML file of the pools (one per domain) this process runs for --dc, and the domains that may appear on their first event; replaces --domain")
	fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:9090", "health and metrics listen address (empty disables)")
	o.http.Register(fs)
	o.kv.register(fs)
	if err := cli.Parse(fs, args, getenv); err != nil {
		return nil, err
	}
	if o.cfg.DC == "" {
		return nil, errors.New("--dc is required")
	}
	if err := o.common.ValidateConnection(); err != nil {
		return nil, err
	}
	if err := o.http.Validate(); err != nil {
		return nil, err
	}
	mode, err := ckf.ParseHashMode(o.mode)
	if err != nil {
		return nil, err
	}
	o.cfg.CKF.Mode = mode
	if err := o.common.ValidateReplicas(); err != nil {
		return nil, err
	}
	o.cfg.Streams.Replicas = o.common.JSReplicas
	if r := o.cfg.Streams.EventReplicas; r < 0 || r > 5 {
		return nil, fmt.Errorf("invalid --input-js-replicas %d (want 0..5; 0: the same as --js-replicas)", r)
	}
	if err := o.kv.validate(&o.cfg, o.poolsFile != ""); err != nil {
		return nil, err
	}
	if err := o.cfg.Validate(); err != nil {
		return nil, err
	}
	if o.poolsFile != "" {
		f, err := o.readPools()
		if err != nil {
			return nil, err
		}
		o.pools = &f
	}
	return o, nil
}

// readPools reads and checks --pools-file, at start and on SIGHUP.
func (o *options) readPools() (pools.File, error) {
	f, err := pools.ReadFile(o.poolsFile)
	if err != nil {
		return pools.File{}, fmt.Errorf("--pools-file: %w", err)
	}
	if len(f.Pools) == 0 && len(f.Allow) == 0 {
		return pools.File{}, fmt.Errorf("--pools-file %s: declares no pool and allows none", o.poolsFile)
	}
	if err := o.kv.checkPools(f); err != nil {
		return pools.File{}, fmt.Errorf("--pools-file %s: %w", o.poolsFile, err)
	}
	return f, nil
}

// reloadOnHangup applies the pools file anew on each SIGHUP until ctx
// ends. The caller has registered hup with signal.Notify.
func reloadOnHangup(ctx context.Context, o *options, m *pools.Manager, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			// The manager logs and counts the outcome.
			_, _ = m.ReloadFile(o.readPools)
		}
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	return cli.RunParsed(ctx, "relay-producer", args, getenv, stderr, parse, serve)
}

// CommonFlags makes options a cli.Options.
func (o *options) CommonFlags() *cli.Common { return &o.common }

func serve(ctx context.Context, o *options, log zerolog.Logger) error {
	tp, shutdownTracing, err := o.common.Tracer(ctx, cli.Service{Name: "relay-producer", Instance: o.cfg.Instance, Domain: o.cfg.Domain, DC: o.cfg.DC}, o.getenv)
	if err != nil {
		return err
	}
	defer cli.FlushTracing(shutdownTracing, log)
	conn, err := o.common.Connect("relay-producer-"+o.cfg.DC, log)
	if err != nil {
		return err
	}
	defer conn.Close()
	reg := promx.NewRegistry("relay-producer", cli.Version())
	if err := conn.Stats.RegisterMetrics(reg); err != nil {
		return err
	}
	o.cfg.Logger, o.cfg.Tracer, o.cfg.Metrics = log, tp, reg
	if o.inputJSDomain != "" {
		if o.cfg.InputJS, err = jetstream.NewWithDomain(conn.NC, o.inputJSDomain); err != nil {
			return fmt.Errorf("--input-js-domain %q: %w", o.inputJSDomain, err)
		}
	}
	// One domain or many, the process runs a pools manager: without
	// --pools-file it is a manager of the one pool --domain names, which
	// exits when that pool fails.
	f, fixed := o.pools, o.pools == nil
	if fixed {
		spec := pools.PoolSpec{Domain: o.cfg.Domain}
		if o.kv.listen != "" {
			spec.KvRelay = &pools.KvRelayBlock{Model: o.kv.model, SourcePath: o.kv.source, Aliases: o.kv.aliases}
		}
		f = &pools.File{MaxPools: 1, Pools: []pools.PoolSpec{spec}}
	}
	return servePools(ctx, o, *f, fixed, log, conn.NC, conn.JS, reg, tp)
}

// servePools runs the pools of f (one relay per domain) on one connection
// until ctx ends; fixed: f is --domain's one pool, not --pools-file.
func servePools(ctx context.Context, o *options, f pools.File, fixed bool, log zerolog.Logger, nc *nats.Conn, js jetstream.JetStream, reg *prometheus.Registry, tp trace.TracerProvider) error {
	pc := pools.Config{Base: o.cfg, File: f, Registerer: reg, StopOnFailure: fixed, Logger: log}
	if o.kv.listen != "" {
		pc.KvRelay = &o.kv.text
	}
	m, err := pools.New(nc, js, pc)
	if err != nil {
		return err
	}
	if o.kv.listen != "" {
		// One catalog for every pool: a pool is in it while it publishes
		// (it holds its lease), so a pool this process stands by for is
		// absent and one it takes over appears.
		srv, stopKv, err := o.kv.start(nil, reg, log)
		if err != nil {
			return err
		}
		defer stopKv()
		m.OnPool(func(domain string, r *relay.Relay) {
			if pub := r.Publication(); pub != nil {
				srv.AddPool(domain, pub)
			}
		}, func(domain string) { srv.RemovePool(domain) })
	}
	if !fixed {
		// SIGHUP reloads the pools file (pools.Manager.Reload).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go reloadOnHangup(ctx, o, m, hup)
	}
	log.Info().Str("dc", o.cfg.DC).Strs("pools", m.Domains()).Strs("allow", f.Allow).Int("max_pools", f.MaxPools).
		Uint64("expected_blocks", o.cfg.CKF.ExpectedBlocksPerDC).Str("js_domain", o.common.JSDomain).Str("input_js_domain", o.inputJSDomain).
		Msg("relay-producer starting")
	if o.httpAddr == "" {
		return m.Run(ctx)
	}
	return o.http.Serve(ctx, o.httpAddr, cli.TraceHTTP(m.Handler(reg), tp, "relay-producer"), log, func(ctx context.Context, _ string) error { return m.Run(ctx) })
}
