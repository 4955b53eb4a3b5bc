// Command ckf-nats-exporter serves the NATS servers' own monitoring as
// Prometheus metrics. NATS monitoring is JSON (/varz, /jsz); on every
// scrape of /metrics this reads each named server's endpoints and turns
// them into ckf_nats_server_* series labelled by server (the name given on the
// command line). A server that does not answer reports ckf_nats_server_up 0 and
// nothing else, so one down server never hides the others.
//
//	ckf-nats-exporter --listen :7777 hub=http://nats-hub:8222 dc-a=http://nats-dc-a:8222
//
// It stands in for prometheus-nats-exporter, which the Go module proxy
// does not serve here; the series are named after the monitoring fields.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/pkg/promx"
)

func main() {
	cli.Main(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Stderr) })
}

// target is one NATS server's monitoring endpoint.
type target struct {
	name string
	base string // http://host:8222, no trailing slash
}

func parseTargets(args []string) ([]target, error) {
	if len(args) == 0 {
		return nil, errors.New("no server: want one or more NAME=http://host:8222")
	}
	seen := map[string]bool{}
	out := make([]target, 0, len(args))
	for _, a := range args {
		name, raw, ok := strings.Cut(a, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want NAME=http://host:8222", a)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%q: want an http(s)://host:port URL", raw)
		}
		if seen[name] {
			return nil, fmt.Errorf("server name %q given twice", name)
		}
		seen[name] = true
		out = append(out, target{name: name, base: strings.TrimRight(raw, "/")})
	}
	return out, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("ckf-nats-exporter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Bool("version", false, "print the version and exit")
	listen := fs.String("listen", ":7777", "address serving /metrics")
	timeout := fs.Duration("timeout", 3*time.Second, "bound on each monitoring request")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && cli.HandleVersion(fs) != nil {
		return 0
	}
	var targets []target
	if err == nil {
		targets, err = parseTargets(fs.Args())
	}
	if err != nil {
		fmt.Fprintf(stderr, "ckf-nats-exporter: %v\nusage: ckf-nats-exporter [--listen :7777] [--timeout 3s] NAME=http://host:8222 ...\n", err)
		return 2
	}
	reg := promx.NewRegistry("ckf-nats-exporter", cli.Version())
	reg.MustRegister(newCollector(targets, &http.Client{Timeout: *timeout}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promx.Handler(reg))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintf(stderr, "ckf-nats-exporter: serving /metrics on %s for %d servers\n", *listen, len(targets))
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "ckf-nats-exporter: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "ckf-nats-exporter: stopped (%s)\n", cli.StopReason(ctx))
	return 0
}

// The monitoring fields read; names as in nats-server's monitor.go.
type varz struct {
	ServerName    string  `json:"server_name"`
	Connections   float64 `json:"connections"`
	Subscriptions float64 `json:"subscriptions"`
	SlowConsumers float64 `json:"slow_consumers"`
	Leafnodes     float64 `json:"leafnodes"`
	InMsgs        float64 `json:"in_msgs"`
	OutMsgs       float64 `json:"out_msgs"`
	InBytes       float64 `json:"in_bytes"`
	OutBytes      float64 `json:"out_bytes"`
	Mem           float64 `json:"mem"`
	CPU           float64 `json:"cpu"`
}

type jsz struct {
	Disabled  bool    `json:"disabled"`
	Memory    float64 `json:"memory"`
	Storage   float64 `json:"storage"`
	Streams   float64 `json:"streams"`
	Consumers float64 `json:"consumers"`
	Messages  float64 `json:"messages"`
	Bytes     float64 `json:"bytes"`
	API       struct {
		Total  float64 `json:"total"`
		Errors float64 `json:"errors"`
	} `json:"api"`
	Config struct {
		Domain string `json:"domain"`
	} `json:"config"`
	Accounts []struct {
		Name    string `json:"name"`
		Streams []struct {
			Name  string `json:"name"`
			State struct {
				Messages  float64 `json:"messages"`
				Bytes     float64 `json:"bytes"`
				Consumers float64 `json:"consumer_count"`
			} `json:"state"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

type desc struct {
	*prometheus.Desc
	typ prometheus.ValueType
}

func newDesc(name, help string, typ prometheus.ValueType, labels ...string) desc {
	return desc{prometheus.NewDesc(name, help, append([]string{"server"}, labels...), nil), typ}
}

type collector struct {
	targets []target
	client  *http.Client

	up                                                 desc
	connections, subscriptions, leafnodes, mem, cpu    desc
	slow, inMsgs, outMsgs, inBytes, outBytes           desc
	jsEnabled, jsStreams, jsConsumers, jsMsgs, jsBytes desc
	jsMemory, jsStorage, jsAPI, jsAPIErrors            desc
	streamMsgs, streamBytes, streamConsumers           desc
}

func newCollector(targets []target, client *http.Client) *collector {
	g, c := prometheus.GaugeValue, prometheus.CounterValue
	return &collector{
		targets:         targets,
		client:          client,
		up:              newDesc("ckf_nats_server_up", "1 when the server's monitoring endpoint answered this scrape.", g),
		connections:     newDesc("ckf_nats_server_connections", "Client connections (varz connections).", g),
		subscriptions:   newDesc("ckf_nats_server_subscriptions", "Active subscriptions (varz subscriptions).", g),
		leafnodes:       newDesc("ckf_nats_server_leafnodes", "Connected leaf node links (varz leafnodes).", g),
		mem:             newDesc("ckf_nats_server_memory_bytes", "Resident memory of the server (varz mem).", g),
		cpu:             newDesc("ckf_nats_server_cpu_percent", "CPU use of the server (varz cpu).", g),
		slow:            newDesc("ckf_nats_server_slow_consumers_total", "Clients disconnected as slow consumers since start.", c),
		inMsgs:          newDesc("ckf_nats_server_in_msgs_total", "Messages received (clients, routes, gateways, leaves).", c),
		outMsgs:         newDesc("ckf_nats_server_out_msgs_total", "Messages sent (clients, routes, gateways, leaves).", c),
		inBytes:         newDesc("ckf_nats_server_in_bytes_total", "Bytes received.", c),
		outBytes:        newDesc("ckf_nats_server_out_bytes_total", "Bytes sent.", c),
		jsEnabled:       newDesc("ckf_nats_server_jetstream_enabled", "1 when JetStream is enabled on the server; domain is its JetStream domain.", g, "domain"),
		jsStreams:       newDesc("ckf_nats_server_jetstream_streams", "Streams held (jsz streams).", g),
		jsConsumers:     newDesc("ckf_nats_server_jetstream_consumers", "Consumers held (jsz consumers).", g),
		jsMsgs:          newDesc("ckf_nats_server_jetstream_messages", "Messages stored over all streams (jsz messages).", g),
		jsBytes:         newDesc("ckf_nats_server_jetstream_bytes", "Bytes stored over all streams (jsz bytes).", g),
		jsMemory:        newDesc("ckf_nats_server_jetstream_memory_bytes", "Memory used by JetStream (jsz memory).", g),
		jsStorage:       newDesc("ckf_nats_server_jetstream_storage_bytes", "Storage used by JetStream (jsz storage).", g),
		jsAPI:           newDesc("ckf_nats_server_jetstream_api_requests_total", "JetStream API requests served.", c),
		jsAPIErrors:     newDesc("ckf_nats_server_jetstream_api_errors_total", "JetStream API requests that failed.", c),
		streamMsgs:      newDesc("ckf_nats_server_stream_messages", "Messages in one stream.", g, "account", "stream"),
		streamBytes:     newDesc("ckf_nats_server_stream_bytes", "Bytes in one stream.", g, "account", "stream"),
		streamConsumers: newDesc("ckf_nats_server_stream_consumers", "Consumers of one stream.", g, "account", "stream"),
	}
}

func (c *collector) all() []desc {
	return []desc{c.up, c.connections, c.subscriptions, c.leafnodes, c.mem, c.cpu, c.slow, c.inMsgs, c.outMsgs,
		c.inBytes, c.outBytes, c.jsEnabled, c.jsStreams, c.jsConsumers, c.jsMsgs, c.jsBytes, c.jsMemory,
		c.jsStorage, c.jsAPI, c.jsAPIErrors, c.streamMsgs, c.streamBytes, c.streamConsumers}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.all() {
		ch <- d.Desc
	}
}

// Collect reads every server at once; each scrape is bounded by the
// client's timeout.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	var wg sync.WaitGroup
	for _, t := range c.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.collectOne(ch, t)
		}()
	}
	wg.Wait()
}

func (c *collector) collectOne(ch chan<- prometheus.Metric, t target) {
	emit := func(d desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d.Desc, d.typ, v, append([]string{t.name}, labels...)...)
	}
	var v varz
	if err := c.get(t.base+"/varz", &v); err != nil {
		emit(c.up, 0)
		return
	}
	var j jsz
	jsErr := c.get(t.base+"/jsz?accounts=true&streams=true", &j)
	emit(c.up, 1)
	emit(c.connections, v.Connections)
	emit(c.subscriptions, v.Subscriptions)
	emit(c.leafnodes, v.Leafnodes)
	emit(c.mem, v.Mem)
	emit(c.cpu, v.CPU)
	emit(c.slow, v.SlowConsumers)
	emit(c.inMsgs, v.InMsgs)
	emit(c.outMsgs, v.OutMsgs)
	emit(c.inBytes, v.InBytes)
	emit(c.outBytes, v.OutBytes)
	if jsErr != nil || j.Disabled {
		emit(c.jsEnabled, 0, "")
		return
	}
	emit(c.jsEnabled, 1, j.Config.Domain)
	emit(c.jsStreams, j.Streams)
	emit(c.jsConsumers, j.Consumers)
	emit(c.jsMsgs, j.Messages)
	emit(c.jsBytes, j.Bytes)
	emit(c.jsMemory, j.Memory)
	emit(c.jsStorage, j.Storage)
	emit(c.jsAPI, j.API.Total)
	emit(c.jsAPIErrors, j.API.Errors)
	for _, a := range j.Accounts {
		for _, s := range a.Streams {
			emit(c.streamMsgs, s.State.Messages, a.Name, s.Name)
			emit(c.streamBytes, s.State.Bytes, a.Name, s.Name)
			emit(c.streamConsumers, s.State.Consumers, a.Name, s.Name)
		}
	}
}

// maxBody bounds one monitoring answer (a /jsz with many streams is the
// largest).
const maxBody = 8 << 20

func (c *collector) get(u string, into any) error {
	resp, err := c.client.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: status %d", u, resp.StatusCode)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(into)
}
