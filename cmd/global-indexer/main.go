// Command global-indexer runs the ckfrelay global indexer: it follows every
// DC lane of one domain on NATS JetStream and serves prefix queries over
// HTTP (pkg/api) and a NATS micro endpoint. With no --nats-url it starts an
// embedded nats-server so one command runs the whole pipeline locally.
//
// Every flag can also be given as an environment variable CKFRELAY_<FLAG>
// (upper snake case, e.g. CKFRELAY_NATS_URL); a flag on the command line
// wins over the environment. The connection, logging and tracing flags are
// those of internal/cli, shared with the other ckfrelay binaries.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/internal/routeflags"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/lanerules"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/promx"
)

// Exit codes.
const (
	exitOK    = cli.ExitOK
	exitError = cli.ExitError
	exitUsage = cli.ExitUsage
)

const (
	// serviceName names the process in logs, traces and NATS connections.
	serviceName = "global-indexer"
	// natsName is the NATS connection (and embedded server) name.
	natsName = "ckf-global-indexer"
)

func main() {
	cli.Main(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr) })
}

// options are the parsed flags.
type options struct {
	common         cli.Common
	domain         string
	httpAddr       string
	expectedBlocks uint64
	workers        int
	queue          int
	maxApplyLag    time.Duration
	staleAfter     time.Duration
	staleLanes     string
	controlTimeout time.Duration
	fetchTimeout   time.Duration
	http           httpserve.Config
	maxMatches     int
	kv             kvrelayOptions
	route          routeflags.Flags
	printRoute     bool
	domainsFrom    string
	domainAllow    string
	maxDomains     int
	maxTableBytes  uint64
}

// domainsFromLaneMap is the --domains-from value that serves every domain
// with a lane map in the lease bucket.
const domainsFromLaneMap = "lanemap"

// domainList is --domain split at commas.
func (o options) domainList() []string {
	var out []string
	for _, d := range strings.Split(o.domain, ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// errUsage marks a bad command line or environment (exit code 2).
var errUsage = errors.New("usage")

// parseFlags parses args over the environment (env returns "" for unset).
// flag.ErrHelp is returned for -h; other errors wrap errUsage and name the
// flag, or the environment variable when the value came from there.
func parseFlags(args []string, env func(string) string, out io.Writer) (options, error) {
	o := options{http: httpserve.DefaultConfig()}
	fs := flag.NewFlagSet(serviceName, flag.ContinueOnError)
	fs.SetOutput(out)
	cli.Usage(fs, "follows every DC lane of a domain and answers prefix-match queries over HTTP and NATS", map[string]string{"http-addr": cli.GroupConnection})
	o.common.Register(fs)
	fs.StringVar(&o.domain, "domain", "default", "indexer domain (one logical KV index namespace, one per model); a comma-separated list serves several, the first being the default of queries that name no model")
	fs.StringVar(&o.domainsFrom, "domains-from", "", "\"lanemap\": also serve every domain a relay registers in the lease bucket's lane maps (filtered by --domain-allow)")
	fs.StringVar(&o.domainAllow, "domain-allow", "", "with --domains-from: a shell pattern (path.Match) a discovered domain must match (empty: any)")
	fs.IntVar(&o.maxDomains, "max-domains", domains.DefaultMaxDomains, "domains served at most; one more is refused (logged, ckf_indexer_domains_refused_total)")
	fs.Uint64Var(&o.maxTableBytes, "max-table-bytes", domains.DefaultMaxTableBytes, "sum of the domains' tables (16 lanes x buckets x 8 bytes each) at most; a domain whose table passes it is refused")
	fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address of the query API, health and metrics")
	// The lane rules' defaults are lanerules', shared with pkg/client's
	// Mirror.
	def := lanerules.Defaults()
	fs.Uint64Var(&o.expectedBlocks, "expected-blocks", def.ExpectedBlocks, "expected blocks per DC fixing the CKF format (0: learn it from the first snapshot)")
	fs.IntVar(&o.workers, "workers", def.Workers, "ingestion workers")
	fs.IntVar(&o.queue, "queue", def.Queue, "queue capacity of each ingestion worker")
	fs.DurationVar(&o.maxApplyLag, "max-apply-lag", def.MaxApplyLag,
		fmt.Sprintf("retire a lane whose oldest admitted delta is not applied within this age; the seed's %s (still the library default) retires lanes spuriously on a loaded host", ckf.DefaultMaxDirtyToAppliedAge))
	fs.DurationVar(&o.controlTimeout, "control-timeout", def.ControlTimeout, "bound on each ingestion pool control operation (assign, snapshot install, drain)")
	fs.DurationVar(&o.staleAfter, "lane-stale-after", def.LaneStaleAfter,
		"mark a lane stale when it has not heard from its relay (heartbeats included) for this long")
	fs.StringVar(&o.staleLanes, "stale-lanes", def.StaleLanes,
		"what a stale lane does: report (kept in answers, marked stale, never best) or exclude (left out of answers and /readyz)")
	fs.DurationVar(&o.fetchTimeout, "snapshot-fetch-timeout", def.SnapshotFetchTimeout,
		fmt.Sprintf("base deadline of one snapshot body read from the Object Store (plus 1s per %d MiB of body); a read that times out is retried %d times", follow.SnapshotFetchBytesPerSecond>>20, follow.DefaultSnapshotFetchAttempts-1))

	o.kv.register(fs)
	o.route.Register(fs)
	fs.BoolVar(&o.printRoute, "print-route-config", false, "print the effective route configuration (the --route-*, --dc-* and --load-max-age flags) as JSON and exit")
	o.http.Register(fs)
	fs.IntVar(&o.maxMatches, "http-max-matches", queryapi.DefaultMaxConcurrentMatches, "HTTP match requests in progress at most; more are answered 429 with Retry-After")
	if err := cli.Parse(fs, args, env); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return options{}, err
		}
		return options{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	// Values set from the environment are not visited: name their variable.
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	bad := func(name, format string, a ...any) error {
		src := ""
		if !onCommandLine[name] && env(cli.EnvName(name)) != "" {
			src = " (from " + cli.EnvName(name) + ")"
		}
		return fmt.Errorf("%w: --%s %q%s: %s", errUsage, name, fs.Lookup(name).Value.String(), src, fmt.Sprintf(format, a...))
	}

	if err := logFlagsError(o.common); err != nil {
		return options{}, bad(err.name, "%s", err.want)
	}
	if err := o.common.ValidateConnection(); err != nil {
		return options{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := o.http.Validate(); err != nil {
		return options{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	if o.maxMatches < 1 {
		return options{}, bad("http-max-matches", "want at least 1")
	}
	embedded := o.common.NatsURL == ""
	switch {
	case embedded && (o.common.NatsPort < -1 || o.common.NatsPort == 0 || o.common.NatsPort > 65535):
		return options{}, bad("nats-port", "want 1..65535, or -1 for a free port")
	case embedded && o.common.JSDomain != "":
		return options{}, bad("js-domain", "needs --nats-url: the embedded nats-server has no JetStream domain")
	case o.common.JSReplicas < 1 || o.common.JSReplicas > 5:
		return options{}, bad("js-replicas", "want 1..5")
	case o.workers < 1:
		return options{}, bad("workers", "want at least 1")
	case o.queue < 1:
		return options{}, bad("queue", "want at least 1")
	case o.maxApplyLag <= 0:
		return options{}, bad("max-apply-lag", "want a positive duration")
	case o.controlTimeout <= 0:
		return options{}, bad("control-timeout", "want a positive duration")
	case o.fetchTimeout <= 0:
		return options{}, bad("snapshot-fetch-timeout", "want a positive duration")
	case o.httpAddr == "":
		return options{}, fmt.Errorf("%w: --http-addr is required", errUsage)
	case o.domainsFrom != "" && o.domainsFrom != domainsFromLaneMap:
		return options{}, bad("domains-from", "want %s or empty", domainsFromLaneMap)
	case o.domainAllow != "" && o.domainsFrom == "" && o.kv.models == "":
		return options{}, bad("domain-allow", "needs --domains-from or --kvrelay-models")
	case o.maxDomains < 1:
		return options{}, bad("max-domains", "want at least 1")
	case o.maxTableBytes == 0:
		return options{}, bad("max-table-bytes", "want at least 1")
	case len(o.domainList()) == 0 && o.domainsFrom == "" && o.kv.models == "":
		return options{}, bad("domain", "want a domain, or --domains-from, or --kvrelay-models")
	case len(o.domainList()) > o.maxDomains:
		return options{}, bad("domain", "%d domains, more than --max-domains %d", len(o.domainList()), o.maxDomains)
	}
	if _, err := path.Match(o.domainAllow, ""); err != nil {
		return options{}, bad("domain-allow", "%v", err)
	}
	seen := map[string]bool{}
	for _, d := range o.domainList() {
		if seen[d] {
			return options{}, bad("domain", "%q given twice", d)
		}
		seen[d] = true
		if _, err := (options{domain: d}).indexerConfigOnly(); err != nil {
			return options{}, bad("domain", "%v", err)
		}
	}
	if o.expectedBlocks > 0 {
		if _, err := ckf.NewConfig(o.expectedBlocks).Format(); err != nil {
			return options{}, bad("expected-blocks", "%v", err)
		}
	}
	if _, err := o.route.Settings(); err != nil {
		var fe *routeflags.FlagError
		if errors.As(err, &fe) {
			return options{}, bad(fe.Flag, "%v", fe.Err)
		}
		return options{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	base, err := o.config(zerolog.Nop(), nil, nil)
	if err != nil {
		return options{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	if o.kv.models != "" {
		rc, err := o.registryConfig(base, nil, zerolog.Nop())
		if err == nil {
			err = rc.KvRelay.Validate(base)
		}
		if err != nil {
			return options{}, bad("kvrelay-models", "%v", err)
		}
	}
	return o, nil
}

// logFlagError is an invalid logging flag.
type logFlagError struct{ name, want string }

// logFlagsError checks the logging flags one at a time (cli.Common.Logger
// reports the first bad one without saying which) so the error can name the
// flag's source.
func logFlagsError(c cli.Common) *logFlagError {
	lvl := c
	lvl.LogFormat = "json"
	if _, err := lvl.Logger(io.Discard, ""); err != nil {
		return &logFlagError{"log-level", "want trace, debug, info, warn or error"}
	}
	if _, err := c.Logger(io.Discard, ""); err != nil {
		return &logFlagError{"log-format", "want console or json"}
	}
	return nil
}

// rules are the lane rules the options describe.
func (o options) rules() lanerules.Rules {
	return lanerules.Rules{
		ExpectedBlocks: o.expectedBlocks, Workers: o.workers, Queue: o.queue,
		MaxApplyLag: o.maxApplyLag, ControlTimeout: o.controlTimeout,
		LaneStaleAfter: o.staleAfter, StaleLanes: o.staleLanes, SnapshotFetchTimeout: o.fetchTimeout,
	}
}

// config builds the indexer config the options describe. tp may be nil (no
// tracing).
func (o options) config(log zerolog.Logger, reg *prometheus.Registry, tp trace.TracerProvider) (follow.Config, error) {
	cfg, err := follow.Config{
		Domain:  o.defaultDomain(),
		Logger:  log,
		Metrics: reg,
		Tracer:  tp,
	}.WithRules(o.rules())
	if err != nil {
		return follow.Config{}, err
	}
	// The indexer learns its NATS lanes from the lane map at run time, so
	// a collision with one is refused there (logged, counted); here the
	// sources' own names are checked (follow.Config.Validate).
	kv, err := o.kv.config()
	if err != nil {
		return follow.Config{}, err
	}
	if o.kv.models == "" {
		// With --kvrelay-models the sources feed the models' domains
		// (registryConfig), not the default domain.
		cfg.KvRelay = kv
	}
	rs, err := o.route.Settings()
	if err != nil {
		return follow.Config{}, err
	}
	cfg.LoadMaxAge, cfg.Route = rs.LoadMaxAge, rs.Route
	cfg.Streams.Replicas = o.common.JSReplicas
	cfg.LeaseOptions = append(cfg.LeaseOptions, lease.WithReplicas(o.common.JSReplicas))
	return cfg, cfg.Validate()
}

// defaultDomain is the first --domain, or "default" with none (discovery
// only; the registry then replaces it per domain).
func (o options) defaultDomain() string {
	if l := o.domainList(); len(l) > 0 {
		return l[0]
	}
	return "default"
}

// indexerConfigOnly validates the domain name as an indexer config would.
func (o options) indexerConfigOnly() (follow.Config, error) {
	cfg := follow.Config{Domain: o.domain}
	return cfg, cfg.Validate()
}

// registryConfig is the pkg/domains config of the process, whatever
// the number of its domains.
func (o options) registryConfig(base follow.Config, reg prometheus.Registerer, log zerolog.Logger) (domains.Config, error) {
	c := domains.Config{Base: base, Domains: o.domainList(), Discover: o.domainsFrom == domainsFromLaneMap,
		MaxDomains: o.maxDomains, MaxTableBytes: o.maxTableBytes, Registerer: reg, Logger: log,
		// A fixed set of domains that loses one is a broken process: exit.
		StopOnFailure: o.domainsFrom == "" && o.kv.models == ""}
	if o.domainAllow != "" {
		pattern := o.domainAllow
		c.Allow = func(d string) bool { ok, _ := path.Match(pattern, d); return ok }
	}
	if o.kv.models != "" {
		kv, err := o.kv.config()
		if err != nil {
			return domains.Config{}, err
		}
		c.KvRelay = o.kv.modelDomains(kv)
	}
	return c, nil
}

// run is main without the process: it returns the exit code. Logs go to
// stdout; usage errors to stderr.
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	o, perr := parseFlags(args, env, stderr)
	if perr == nil && o.printRoute {
		return printRouteConfig(o, stdout, stderr)
	}
	return cli.Run(ctx, serviceName, stderr, func() (*cli.Common, error) {
		if perr != nil {
			return nil, perr
		}
		return &o.common, nil
	}, func(log zerolog.Logger) error { return serve(ctx, o, log, env) })
}

// printRouteConfig writes the effective route configuration as JSON
// (--print-route-config).
func printRouteConfig(o options, stdout, stderr io.Writer) int {
	rs, err := o.route.Settings()
	var b []byte
	if err == nil {
		b, err = rs.JSON()
	}
	if err == nil {
		_, err = stdout.Write(b)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", serviceName, err)
		return exitError
	}
	return exitOK
}

// serve runs the indexer until ctx ends.
func serve(ctx context.Context, o options, log zerolog.Logger, env func(string) string) error {
	tp, shutdownTracing, err := o.common.Tracer(ctx, cli.Service{Name: serviceName, Domain: o.domain}, env)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	// Registered first so it runs last: spans of the final lane applies are
	// flushed after the indexer and the connection have stopped.
	defer cli.FlushTracing(shutdownTracing, log)
	conn, err := o.common.Connect(natsName, log)
	if err != nil {
		return err
	}
	defer conn.Close()

	reg := promx.NewRegistry(serviceName, cli.Version())
	if err := conn.Stats.RegisterMetrics(reg); err != nil {
		return err
	}
	cfg, err := o.config(log, reg, tp)
	if err != nil {
		return err
	}
	// One domain or many, the process is a registry of domains (a host of
	// one is a host all the same). Each domain's series carry
	// domain="<name>"; the HTTP endpoint's, shared by every domain,
	// domain="".
	rc, err := o.registryConfig(cfg, reg, log)
	if err != nil {
		return err
	}
	// Every domain answers on its NATS micro endpoint too.
	rc.Base.Attach = indexer.Attach
	backend, err := domains.New(conn.NC, conn.JS, rc)
	if err != nil {
		return err
	}
	apiM, err := queryapi.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"domain": ""}, reg))
	if err != nil {
		return err
	}
	runner := backend.Run

	h := cli.TraceHTTP(queryapi.Handler(backend, apiM, reg, queryapi.WithLimits(queryapi.Limits{MaxConcurrentMatches: o.maxMatches}),
		queryapi.WithStatusInfo(queryapi.StatusInfo{Domain: o.domain, Version: cli.Version()})), tp, serviceName)
	// A dead API ends the process; cli.Run logs the stop line.
	return o.http.Serve(ctx, o.httpAddr, h, log, func(ctx context.Context, bound string) error {
		logServing(log, o, conn, bound)
		return runner(ctx)
	})
}

// logServing says where to query the indexer and, with the embedded server,
// how the other binaries join it (cli.Connect already logged its URL).
func logServing(log zerolog.Logger, o options, conn *cli.Conn, httpAddr string) {
	ev := log.Info().
		Str("addr", httpAddr).
		Str("match_url", "http://"+httpAddr+"/v1/match").
		Str("match_subject", indexer.MatchSubject(o.defaultDomain())).
		Str("micro_service", indexer.MicroServiceName).
		Str("nats_url", conn.URL).
		Str("domain", o.domain).
		Dur("max_apply_lag_ms", o.maxApplyLag)
	if o.common.JSDomain != "" {
		ev = ev.Str("js_domain", o.common.JSDomain)
	}
	if conn.Embedded != nil {
		ev = ev.Str("join_with", fmt.Sprintf("--nats-url %s --domain %s", conn.URL, o.domain))
	}
	ev.Msg("global-indexer serving: POST queries to match_url, or NATS requests to match_subject")
}
