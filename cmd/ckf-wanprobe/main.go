// Command ckf-wanprobe measures one DC's event → queryable latency end to
// end, as a router would see it (internal/wanprobe): each probe publishes
// a Stored event of a fresh block to the DC's NATS (acknowledged by its
// JetStream, as a worker's event is) and polls the global indexer until
// the DC's lane answers it. With --load-rate it also offers a paced load
// of single-block events and reports whether the relay kept up.
//
//	ckf-wanprobe --nats-url nats://nats.dc-b.local:4222 --dc dc-b --domain demo \
//	  --indexer-url http://indexer-1:8080 --probes 200
//	ckf-wanprobe … --load-rate 10000 --load-duration 20s
//
// docs/chaos.md has the figures and the commands that made them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/internal/wanprobe"
	"github.com/ckfrelay/ckfrelay/pkg/client"
)

func main() {
	cli.Main(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr) })
}

type options struct {
	common     cli.Common
	indexerURL string
	domain, dc string
	worker     uint64
	probes     int
	gap        time.Duration
	timeout    time.Duration
	poll       time.Duration
	load       wanprobe.LoadConfig
	loadDelay  time.Duration
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("ckf-wanprobe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cli.Usage(fs, "measures a DC's event → queryable latency end to end (probe blocks through the DC's NATS, answered by the indexer), optionally under a paced load", nil)
	fs.StringVar(&o.common.NatsURL, "nats-url", "nats://127.0.0.1:4222", "the DC's NATS server (its leaf), holding KVEVENTS in its own JetStream domain")
	o.common.Security.Register(fs)
	fs.StringVar(&o.indexerURL, "indexer-url", "http://127.0.0.1:8080", "global-indexer HTTP API")
	fs.StringVar(&o.domain, "domain", "default", "indexer domain")
	fs.StringVar(&o.dc, "dc", "", "the DC probed (its relay consumes the DC's KVEVENTS)")
	fs.Uint64Var(&o.worker, "worker", 9000, "simulated worker id of the probes (the load uses the next ones)")
	fs.IntVar(&o.probes, "probes", 100, "number of probes")
	fs.DurationVar(&o.gap, "probe-gap", 50*time.Millisecond, "time between two probes' starts")
	fs.DurationVar(&o.timeout, "probe-timeout", 30*time.Second, "bound on one probe")
	fs.DurationVar(&o.poll, "probe-poll", 2*time.Millisecond, "pause between a probe's queries (its resolution; each probe in flight costs the indexer 1/poll queries a second)")
	fs.Float64Var(&o.load.Rate, "load-rate", 0, "offered load in events/s beside the probes (0: none)")
	fs.DurationVar(&o.load.Duration, "load-duration", 20*time.Second, "how long the load is offered")
	fs.IntVar(&o.load.Live, "load-live", 16384, "blocks the load keeps stored (each further Stored is followed by the oldest's Removed)")
	fs.DurationVar(&o.loadDelay, "load-probe-delay", 2*time.Second, "wait after the load starts before probing")
	fs.StringVar(&o.common.LogLevel, "log-level", "warn", "log level: debug, info, warn, error")
	fs.StringVar(&o.common.LogFormat, "log-format", "console", "log format: console or json")
	if err := cli.Parse(fs, args, getenv); err != nil {
		return nil, err
	}
	switch {
	case o.dc == "":
		return nil, errors.New("--dc is required")
	case o.probes < 0 || o.gap <= 0 || o.timeout <= 0 || o.poll <= 0 || o.load.Rate < 0:
		return nil, errors.New("--probes and --load-rate must be ≥ 0, --probe-gap, --probe-timeout and --probe-poll > 0")
	case o.load.Rate > 0 && o.load.Duration <= 0:
		return nil, errors.New("--load-duration must be positive")
	}
	return o, o.common.Security.Validate()
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return cli.RunParsed(ctx, "ckf-wanprobe", args, getenv, stderr, parse, func(ctx context.Context, o *options, log zerolog.Logger) error {
		return measure(ctx, o, log, stdout)
	})
}

// CommonFlags makes options a cli.Options.
func (o *options) CommonFlags() *cli.Common { return &o.common }

func measure(ctx context.Context, o *options, log zerolog.Logger, stdout io.Writer) error {
	nc, _, err := cli.Dial(o.common.NatsURL, "ckf-wanprobe", o.common.Security, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	hc, err := client.NewHTTP(o.indexerURL, &http.Client{Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	p, err := wanprobe.New(wanprobe.Config{JS: js, Indexer: hc, Domain: o.domain, DC: o.dc, Worker: o.worker, Timeout: o.timeout, Poll: o.poll})
	if err != nil {
		return err
	}
	// One probe first: the lane is up and answering.
	if _, _, err := p.Probe(ctx); err != nil {
		return fmt.Errorf("first probe: %w", err)
	}
	var wg sync.WaitGroup
	var res wanprobe.LoadResult
	var loadErr error
	if o.load.Rate > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, loadErr = p.Load(ctx, o.load)
		}()
		select {
		case <-time.After(o.loadDelay):
		case <-ctx.Done():
		}
	}
	st := p.Probes(ctx, o.probes, o.gap)
	wg.Wait()
	under := ""
	if o.load.Rate > 0 {
		under = fmt.Sprintf(" under %.0f events/s", o.load.Rate)
	}
	fmt.Fprintf(stdout, "%s%s: %s\n", o.dc, under, st)
	if o.load.Rate > 0 {
		fmt.Fprintf(stdout, "%s load: %s\n", o.dc, res)
	}
	if loadErr != nil {
		return loadErr
	}
	if st.Failed > 0 {
		return fmt.Errorf("%d of %d probes failed", st.Failed, st.Failed+st.N)
	}
	return ctx.Err()
}
