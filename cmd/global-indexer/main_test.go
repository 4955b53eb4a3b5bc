package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ckfrelay/ckfrelay/internal/cli"
	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/internal/routeflags"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/lanerules"
	"github.com/ckfrelay/ckfrelay/pkg/route"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// defaultOptions are the options with no flag and no environment.
func defaultOptions() options {
	return options{
		common: cli.Common{NatsPort: 4222, LogLevel: "info", LogFormat: "console", Tracing: cli.Tracing{SampleRatio: cli.DefaultSampleRatio}, Security: cli.Security{ConnectTimeout: cli.DefaultConnectTimeout}, JSReplicas: 1},
		domain: "default", httpAddr: "127.0.0.1:8080",
		workers: ckf.DefaultIngestionWorkers, queue: ckf.DefaultIngestionQueue,
		maxApplyLag: 100 * time.Millisecond, controlTimeout: ckf.DefaultControlTimeout,
		fetchTimeout: follow.DefaultSnapshotFetchTimeout,
		staleAfter:   follow.DefaultLaneStaleAfter, staleLanes: follow.StaleReport,
		http: httpserve.DefaultConfig(), maxMatches: queryapi.DefaultMaxConcurrentMatches,
		maxDomains: domains.DefaultMaxDomains, maxTableBytes: domains.DefaultMaxTableBytes,
		kv: kvrelayOptions{acceptLegacy: true, staleAfter: follow.DefaultKvRelayStaleAfter, frameTimeout: client.DefaultFrameTimeout},
	}
}

func TestParseFlagsDefaultsEnvAndPrecedence(t *testing.T) {
	o, err := parseFlags(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := o.route.Settings()
	if err != nil {
		t.Fatal(err)
	}
	if rs.LoadMaxAge != follow.DefaultLoadMaxAge || rs.Route.BlockSize != follow.DefaultRouteBlockSize ||
		rs.Route.Policy.AffinityMargin != route.AffinityMarginDefault || rs.Route.Policy.Policy != route.Cost {
		t.Fatalf("route defaults %+v", rs)
	}
	o.route = routeflags.Flags{}
	if want := defaultOptions(); o != want {
		t.Fatalf("defaults %+v, want %+v", o, want)
	}
	if o.maxApplyLag == ckf.DefaultMaxDirtyToAppliedAge {
		t.Fatal("the binary must not default to the seed's 10ms apply lag")
	}
	// pkg/client's Mirror takes lanerules.Defaults() for a zero rule.
	if r := o.rules(); r != lanerules.Defaults() || r.WithDefaults() != (lanerules.Rules{}).WithDefaults() {
		t.Fatalf("the flags' lane rules %+v are not lanerules.Defaults() %+v", r, lanerules.Defaults())
	}

	env := envOf(map[string]string{
		"CKFRELAY_NATS_URL":               "nats://example:4222",
		"CKFRELAY_JS_DOMAIN":              "hub",
		"CKFRELAY_DOMAIN":                 "prod",
		"CKFRELAY_EXPECTED_BLOCKS":        "1000",
		"CKFRELAY_LOG_LEVEL":              "debug",
		"CKFRELAY_WORKERS":                "2",
		"CKFRELAY_MAX_APPLY_LAG":          "250ms",
		"CKFRELAY_CONTROL_TIMEOUT":        "3s",
		"CKFRELAY_SNAPSHOT_FETCH_TIMEOUT": "45s",
		"CKFRELAY_OTLP_ENDPOINT":          "collector:4318",
	})
	o, err = parseFlags([]string{"--domain", "staging", "--queue=16", "--log-format", "json", "--max-apply-lag", "40ms"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := defaultOptions()
	want.common.NatsURL, want.common.JSDomain, want.common.LogLevel, want.common.LogFormat = "nats://example:4222", "hub", "debug", "json"
	want.common.OTLPEndpoint = "collector:4318"
	want.domain, want.expectedBlocks, want.workers, want.queue = "staging", 1000, 2, 16
	want.maxApplyLag, want.controlTimeout, want.fetchTimeout = 40*time.Millisecond, 3*time.Second, 45*time.Second
	route := o.route
	o.route = routeflags.Flags{}
	if o != want {
		t.Fatalf("parsed %+v, want %+v (flags must win over the environment)", o, want)
	}
	o.route = route
	tp := noop.NewTracerProvider()
	cfg, err := o.config(zerolog.Nop(), nil, tp)
	if err != nil {
		t.Fatal(err)
	}
	wantFormat, _ := ckf.NewConfig(1000).Format()
	if cfg.Format == nil || *cfg.Format != wantFormat || cfg.Domain != "staging" {
		t.Fatalf("config %+v", cfg)
	}
	if p := cfg.Pool; p.WorkerCount != 2 || p.QueueCapacity != 16 || p.MaxDirtyToAppliedAge != 40*time.Millisecond || p.ControlTimeout != 3*time.Second {
		t.Fatalf("pool config %+v", p)
	}
	if cfg.SnapshotFetchTimeout != 45*time.Second {
		t.Fatalf("snapshot fetch timeout %s, want 45s", cfg.SnapshotFetchTimeout)
	}
	if cfg.Tracer != tp {
		t.Fatalf("tracer %v, want the one from cli.Common.Tracer", cfg.Tracer)
	}
	if cfg, _ := defaultOptions().config(zerolog.Nop(), nil, nil); cfg.Format != nil {
		t.Fatal("--expected-blocks 0 must learn the format from snapshots")
	}
}

func TestParseFlagsMaxApplyLagAndJSDomain(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		env      map[string]string
		lag      time.Duration
		jsDomain string
	}{
		{"default", nil, nil, 100 * time.Millisecond, ""},
		{"flag", []string{"--max-apply-lag", "1.5s"}, nil, 1500 * time.Millisecond, ""},
		{"flag equals", []string{"--max-apply-lag=10ms"}, nil, 10 * time.Millisecond, ""},
		{"env", nil, map[string]string{"CKFRELAY_MAX_APPLY_LAG": "2s"}, 2 * time.Second, ""},
		{"flag over env", []string{"--max-apply-lag", "5ms"}, map[string]string{"CKFRELAY_MAX_APPLY_LAG": "2s"}, 5 * time.Millisecond, ""},
		{"js domain flag", []string{"--nats-url", "nats://leaf:4222", "--js-domain", "hub"}, nil, 100 * time.Millisecond, "hub"},
		{"js domain env", nil, map[string]string{"CKFRELAY_NATS_URL": "nats://leaf:4222", "CKFRELAY_JS_DOMAIN": "hub"}, 100 * time.Millisecond, "hub"},
		{"js domain flag over env", []string{"--js-domain", "dc-a"}, map[string]string{"CKFRELAY_NATS_URL": "nats://leaf:4222", "CKFRELAY_JS_DOMAIN": "hub"}, 100 * time.Millisecond, "dc-a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, envOf(tc.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if o.maxApplyLag != tc.lag || o.common.JSDomain != tc.jsDomain {
				t.Fatalf("max-apply-lag %s js-domain %q, want %s %q", o.maxApplyLag, o.common.JSDomain, tc.lag, tc.jsDomain)
			}
			cfg, err := o.config(zerolog.Nop(), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Pool.MaxDirtyToAppliedAge != tc.lag {
				t.Fatalf("PoolConfig.MaxDirtyToAppliedAge %s, want %s", cfg.Pool.MaxDirtyToAppliedAge, tc.lag)
			}
		})
	}
}

func TestHelpDocumentsFlags(t *testing.T) {
	var help bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, envOf(nil), io.Discard, &help); code != exitOK {
		t.Fatalf("-h exit code %d, want 0", code)
	}
	for _, want := range []string{"-nats-url", "-js-domain", "-nats-port", "-store-dir", "-log-level", "-log-format",
		"-otlp-endpoint", "-trace-stdout", "-domain", "-http-addr", "-expected-blocks", "-workers", "-queue",
		"-max-apply-lag", "spuriously", "-control-timeout", "-snapshot-fetch-timeout"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, help.String())
		}
	}
}

func TestParseFlagsErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unknown flag", []string{"--nope"}, nil, "flag provided but not defined"},
		{"bad workers", []string{"--workers", "0"}, nil, `--workers "0"`},
		{"bad queue", []string{"--queue=-3"}, nil, `--queue "-3"`},
		{"non-numeric workers", []string{"--workers", "many"}, nil, "invalid value"},
		{"bad log level", []string{"--log-level", "loud"}, nil, "--log-level"},
		{"bad log format", []string{"--log-format", "xml"}, nil, "--log-format"},
		{"bad port", []string{"--nats-port", "70000"}, nil, "--nats-port"},
		{"zero port", []string{"--nats-port", "0"}, nil, "--nats-port"},
		{"bad domain", []string{"--domain", "a.b"}, nil, "domain"},
		{"overflowing expected blocks", []string{"--expected-blocks", "18446744073709551615"}, nil, "--expected-blocks"},
		{"positional", []string{"extra"}, nil, "unexpected argument"},
		{"bad env", nil, map[string]string{"CKFRELAY_WORKERS": "x"}, "CKFRELAY_WORKERS"},
		{"bad env workers value", nil, map[string]string{"CKFRELAY_WORKERS": "0"}, "CKFRELAY_WORKERS"},
		{"bad js replicas", []string{"--js-replicas", "6"}, nil, `--js-replicas "6"`},
		{"bad env level", nil, map[string]string{"CKFRELAY_LOG_LEVEL": "shout"}, "--log-level \"shout\" (from CKFRELAY_LOG_LEVEL)"},
		{"bad env format", nil, map[string]string{"CKFRELAY_LOG_FORMAT": "xml"}, "CKFRELAY_LOG_FORMAT"},
		{"empty http addr", []string{"--http-addr="}, nil, "--http-addr"},
		{"zero max apply lag", []string{"--max-apply-lag", "0"}, nil, "--max-apply-lag"},
		{"negative max apply lag", []string{"--max-apply-lag=-1s"}, nil, "--max-apply-lag"},
		{"unparsable max apply lag", []string{"--max-apply-lag", "soon"}, nil, "-max-apply-lag"},
		{"bad env max apply lag", nil, map[string]string{"CKFRELAY_MAX_APPLY_LAG": "100"}, "CKFRELAY_MAX_APPLY_LAG"},
		{"zero env max apply lag", nil, map[string]string{"CKFRELAY_MAX_APPLY_LAG": "0s"}, "(from CKFRELAY_MAX_APPLY_LAG)"},
		{"zero control timeout", []string{"--control-timeout", "0s"}, nil, "--control-timeout"},
		{"zero snapshot fetch timeout", []string{"--snapshot-fetch-timeout", "0s"}, nil, "--snapshot-fetch-timeout"},
		{"bad env control timeout", nil, map[string]string{"CKFRELAY_CONTROL_TIMEOUT": "never"}, "CKFRELAY_CONTROL_TIMEOUT"},
		{"js domain embedded", []string{"--js-domain", "hub"}, nil, "--js-domain"},
		{"js domain env embedded", nil, map[string]string{"CKFRELAY_JS_DOMAIN": "hub"}, "CKFRELAY_JS_DOMAIN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(tc.args, envOf(tc.env), io.Discard)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseFlags = %v, want a usage error mentioning %q", err, tc.want)
			}
			var stderr bytes.Buffer
			if code := run(context.Background(), tc.args, envOf(tc.env), io.Discard, &stderr); code != exitUsage {
				t.Fatalf("run exit code %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr.String(), "global-indexer:") || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr %q lacks a clear error mentioning %q", stderr.String(), tc.want)
			}
		})
	}
	// A port is irrelevant with an external server.
	if _, err := parseFlags([]string{"--nats-url", "nats://x", "--nats-port", "0"}, envOf(nil), io.Discard); err != nil {
		t.Fatalf("--nats-port with --nats-url: %v", err)
	}
	if _, err := parseFlags([]string{"-h"}, envOf(nil), io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h = %v, want flag.ErrHelp", err)
	}
}

// syncBuffer collects the JSON log lines run writes.
type syncBuffer struct{ testenv.LogBuffer }

// field returns the first value of a log field, if logged.
func (b *syncBuffer) field(name string) (string, bool) {
	for _, line := range strings.Split(b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if v, ok := m[name].(string); ok {
			return v, true
		}
	}
	return "", false
}

// runInBackground starts run with JSON logs and returns, once it serves,
// its log and a stop function that cancels it and returns the exit code.
func runInBackground(t *testing.T, args []string) (*syncBuffer, func() int) {
	t.Helper()
	out, done, stop := startInBackground(t, args)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		select {
		case code := <-done:
			t.Fatalf("run exited early with %d: %s", code, out.String())
		default:
		}
		// match_url is only in the serving line, logged after httpserve's
		// own "serving HTTP" line, which also carries an addr.
		if _, ok := out.field("match_url"); !ok {
			return errors.New("not serving yet")
		}
		return nil
	})
	return out, stop
}

// startInBackground starts run without waiting for it to serve; done
// receives its exit code unless stop already took it.
func startInBackground(t *testing.T, args []string) (*syncBuffer, <-chan int, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan int, 1)
	args = append([]string{"--log-format", "json"}, args...)
	go func() { done <- run(ctx, args, envOf(nil), io.Discard, out) }()
	stopped := false
	var code int
	stop := func() int {
		if !stopped {
			stopped = true
			cancel()
			select {
			case code = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("run did not return after cancel; goroutines:\n%s", testenv.Goroutines())
			}
		}
		return code
	}
	t.Cleanup(func() { stop() })
	return out, done, stop
}

// mustField returns a logged field or fails the test.
func mustField(t *testing.T, out *syncBuffer, name string) string {
	t.Helper()
	v, ok := out.field(name)
	if !ok {
		t.Fatalf("%s not logged: %s", name, out.String())
	}
	return v
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// checkMatchSubject asks the logged NATS micro subject; without lanes the
// indexer answers 503, which proves the endpoint lives there.
func checkMatchSubject(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	var msg *nats.Msg
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		var err error
		msg, err = nc.Request(subject, []byte(`{"local_hashes":[1,2]}`), 5*time.Second)
		return err // no responders until Run has started the endpoint
	})
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "503" {
		t.Fatalf("%s error code %q, want 503 (%s)", subject, code, msg.Data)
	}
}

func TestRunServesAndShutsDownGracefully(t *testing.T) {
	srv := testenv.StartServer(t)
	out, stop := runInBackground(t, []string{"--nats-url", srv.URL(), "--http-addr", "127.0.0.1:0", "--domain", "maintest"})
	base := "http://" + mustField(t, out, "addr")
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d %s", code, body)
	}
	if code, _ := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d without lanes, want 503", code)
	}
	if code, body := get(t, base+"/v1/lanes"); code != http.StatusOK || !strings.Contains(body, `"lanes":[]`) {
		t.Fatalf("/v1/lanes %d %s", code, body)
	}
	if code, body := get(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, "ckf_api_requests_total") {
		t.Fatalf("/metrics %d", code)
	}
	if got := mustField(t, out, "match_subject"); got != "ckfq.maintest.match" {
		t.Fatalf("match_subject %q", got)
	}
	checkMatchSubject(t, srv.Connect(t), mustField(t, out, "match_subject"))
	if _, ok := out.field("join_with"); ok {
		t.Fatal("join hint logged for an external server")
	}
	if got := mustField(t, out, "service"); got != "global-indexer" {
		t.Fatalf("service %q", got)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit code %d after cancel, want 0", code)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("HTTP still served after shutdown")
	}
	if !strings.Contains(out.String(), `"reason":"context canceled","time":`) || !strings.Contains(out.String(), `"message":"global-indexer stopped"`) {
		t.Fatalf("no graceful stop with its reason logged: %s", out.String())
	}
}

func TestRunWithEmbeddedNATS(t *testing.T) {
	out, stop := runInBackground(t, []string{"--nats-port", "-1", "--store-dir", t.TempDir(), "--http-addr", "127.0.0.1:0"})
	addr := mustField(t, out, "addr")
	if code, body := get(t, fmt.Sprintf("http://%s/healthz", addr)); code != http.StatusOK {
		t.Fatalf("/healthz %d %s", code, body)
	}
	// Where to join: the URL cli.Connect logged, repeated with the domain.
	url := mustField(t, out, "url")
	if got := mustField(t, out, "nats_url"); got != url {
		t.Fatalf("nats_url %q, embedded url %q", got, url)
	}
	if hint := mustField(t, out, "join_with"); hint != "--nats-url "+url+" --domain default" {
		t.Fatalf("join_with %q", hint)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Full-size deltas need the relay transport's limit, not NATS's 1 MiB.
	if got := nc.MaxPayload(); got != wire.MaxMessageBytes {
		t.Fatalf("embedded max payload %d, want %d", got, wire.MaxMessageBytes)
	}
	checkMatchSubject(t, nc, mustField(t, out, "match_subject"))
	if code := stop(); code != exitOK {
		t.Fatalf("exit code %d, want 0", code)
	}
	if _, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil {
		t.Fatal("embedded nats-server still running after shutdown")
	}
}

func TestRunWithJetStreamDomain(t *testing.T) {
	srv := testenv.StartServer(t, testenv.WithDomain("hub"))
	out, stop := runInBackground(t, []string{"--nats-url", srv.URL(), "--js-domain", "hub", "--http-addr", "127.0.0.1:0"})
	if got := mustField(t, out, "js_domain"); got != "hub" {
		t.Fatalf("js_domain %q", got)
	}
	if code, body := get(t, "http://"+mustField(t, out, "addr")+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d %s", code, body)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit code %d, want 0", code)
	}
}

func TestRunFailsOnUnreachableNATS(t *testing.T) {
	code := run(context.Background(), []string{"--nats-url", "nats://127.0.0.1:1", "--nats-connect-timeout", "300ms", "--http-addr", "127.0.0.1:0"}, envOf(nil), io.Discard, io.Discard)
	if code != exitError {
		t.Fatalf("exit code %d, want %d", code, exitError)
	}
}

// A NATS server that starts after the indexer is waited for (any start
// order in a deployment converges) instead of failing the process.
func TestRunWaitsForALateNATSServer(t *testing.T) {
	port := testenv.FreePort(t)
	out, _, stop := startInBackground(t, []string{"--nats-url", fmt.Sprintf("nats://127.0.0.1:%d", port), "--http-addr", "127.0.0.1:0"})
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		if o := out.String(); !strings.Contains(o, "start-up step failed; retrying") && !strings.Contains(o, "nats not reachable yet; retrying") {
			return errors.New("no retry logged yet")
		}
		return nil
	})
	srv := testenv.StartServer(t, testenv.WithPort(port))
	js := srv.JetStream(t)
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.Stream(ctx, streams.LaneStream)
		return err
	})
	if code := stop(); code != exitOK {
		t.Fatalf("exit code %d, want %d: %s", code, exitOK, out.String())
	}
}

func TestRunFailsWhenHTTPAddressIsTaken(t *testing.T) {
	srv := testenv.StartServer(t)
	out, _ := runInBackground(t, []string{"--nats-url", srv.URL(), "--http-addr", "127.0.0.1:0"})
	taken := mustField(t, out, "addr")
	var log bytes.Buffer
	code := run(context.Background(), []string{"--nats-url", srv.URL(), "--http-addr", taken, "--log-format", "json"}, envOf(nil), io.Discard, &log)
	if code != exitError || !strings.Contains(log.String(), taken) {
		t.Fatalf("exit code %d (want %d), log %s", code, exitError, log.String())
	}
}

// Every JSON log line of a real run (on stderr) follows the shared schema:
// millisecond UTC timestamps, the service name, the shared field names, and
// durations as numbers under *_ms keys.
func TestRunLogsFollowTheSharedSchema(t *testing.T) {
	srv := testenv.StartServer(t)
	out, stop := runInBackground(t, []string{"--nats-url", srv.URL(), "--http-addr", "127.0.0.1:0", "--domain", "logtest"})
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if !strings.Contains(out.String(), "indexer started") {
			return errors.New("indexer not started yet")
		}
		return nil
	})
	stop()
	ts := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		lines++
		if s, _ := m["time"].(string); !ts.MatchString(s) {
			t.Errorf("time %v is not UTC with milliseconds: %s", m["time"], line)
		}
		if m["service"] != serviceName || m["level"] == nil || m["message"] == nil {
			t.Errorf("service, level or message missing: %s", line)
		}
		if d, ok := m["domain"]; ok && d != "logtest" {
			t.Errorf("domain %v: %s", d, line)
		}
		for k, v := range m {
			if strings.HasSuffix(k, "_ms") {
				if _, ok := v.(float64); !ok {
					t.Errorf("%s is not a number: %s", k, line)
				}
			}
			for _, old := range []string{"http_addr", "took", "wait", "consumer_instance", "max_apply_lag"} {
				if k == old {
					t.Errorf("key %q left from the old schema: %s", k, line)
				}
			}
		}
	}
	if lines < 3 {
		t.Fatalf("%d log lines", lines)
	}
	for _, f := range []string{"addr", "instance", "max_apply_lag_ms"} {
		if !strings.Contains(out.String(), `"`+f+`":`) {
			t.Errorf("no %s logged: %s", f, out.String())
		}
	}
}

// Credentials in --nats-url never reach the log (issue: the indexer
// logged the URL with the password).
func TestURLCredentialsAreRedactedInLogs(t *testing.T) {
	srv := testenv.StartServer(t) // no auth: the server ignores the credentials
	url := strings.Replace(srv.URL(), "nats://", "nats://alice:pa55-w0rd@", 1)
	out, stop := runInBackground(t, []string{"--nats-url", url, "--http-addr", "127.0.0.1:0"})
	if got := mustField(t, out, "nats_url"); !strings.Contains(got, "alice:***@") {
		t.Fatalf("nats_url %q, want the redacted URL", got)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit code %d", code)
	}
	if strings.Contains(out.String(), "pa55-w0rd") {
		t.Fatalf("the password reached the log:\n%s", out.String())
	}
}

// The HTTP and security flags are registered and validated.
func TestSecurityAndHTTPFlags(t *testing.T) {
	o, err := parseFlags([]string{"--nats-user", "indexer", "--nats-password-file", "/run/pw", "--http-max-conns", "10", "--http-max-matches", "3"}, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.common.Security.User != "indexer" || o.http.MaxConns != 10 || o.maxMatches != 3 {
		t.Fatalf("parsed %+v", o)
	}
	for _, args := range [][]string{
		{"--nats-user", "indexer"},
		{"--nats-url", "nats://x", "--nats-config", "server.conf"},
		{"--http-idle-timeout", "0s"},
		{"--http-max-matches", "0"},
	} {
		if _, err := parseFlags(args, envOf(nil), io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}
