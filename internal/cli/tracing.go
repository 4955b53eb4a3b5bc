package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// DefaultSampleRatio is the share of root spans (input messages arriving
// without a sampled trace context) that start a trace. A message carrying a
// W3C traceparent follows its parent's decision, so an upstream that traces
// a request gets the whole path.
const DefaultSampleRatio = 0.01

// Tracing holds the trace export flags. Unset flags leave the standard
// OTEL_* variables in charge; a flag wins over its variable.
type Tracing struct {
	// OTLPEndpoint is host:port (plain HTTP, or TLS when a CA or client
	// certificate is given) or a URL: https:// for TLS, http:// for plain;
	// /v1/traces is appended to a URL without a path.
	OTLPEndpoint string
	// OTLPCAFile, OTLPCertFile and OTLPKeyFile configure TLS to the
	// collector (CA bundle; client certificate and key for mTLS).
	OTLPCAFile, OTLPCertFile, OTLPKeyFile string
	// TraceStdout writes spans to stderr as JSON.
	TraceStdout bool
	// SampleRatio is the parent-based ratio sampler's ratio for root spans.
	SampleRatio float64
	// ratioSet records that --trace-sample-ratio (or its variable) was
	// given, so an unset flag yields to OTEL_TRACES_SAMPLER.
	ratioSet bool
}

func (t *Tracing) register(fs *flag.FlagSet) {
	t.SampleRatio = DefaultSampleRatio
	fs.StringVar(&t.OTLPEndpoint, "otlp-endpoint", "", "OTLP/HTTP trace collector: host:port, or an http:// or https:// URL (empty: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, else no export)")
	fs.StringVar(&t.OTLPCAFile, "otlp-ca-file", "", "PEM CA bundle to verify the collector's TLS certificate (turns TLS on for a host:port endpoint)")
	fs.StringVar(&t.OTLPCertFile, "otlp-cert-file", "", "PEM client certificate for mutual TLS to the collector")
	fs.StringVar(&t.OTLPKeyFile, "otlp-key-file", "", "PEM key of --otlp-cert-file")
	fs.BoolVar(&t.TraceStdout, "trace-stdout", false, "write OpenTelemetry spans to stderr")
	fs.Func("trace-sample-ratio", "share of root spans traced, a `ratio` within 0..1; a message with a traceparent follows its parent (unset: OTEL_TRACES_SAMPLER[_ARG], else "+strconv.FormatFloat(DefaultSampleRatio, 'g', -1, 64)+")", func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0 || v > 1 {
			return errors.New("want a ratio within 0..1")
		}
		t.SampleRatio, t.ratioSet = v, true
		return nil
	})
}

// Service identifies the process in trace resources.
type Service struct {
	// Name is the default service.name (OTEL_SERVICE_NAME overrides it).
	Name string
	// Instance is service.instance.id (default: host name and process id).
	Instance string
	// Domain and DC become ckf.domain and ckf.dc when set.
	Domain, DC string
}

// Tracer builds the tracer provider the flags and the OTEL_* variables
// (read with getenv, and by the OTLP exporter from the process
// environment) ask for; shutdown flushes it. With no exporter it returns a
// no-op provider.
func (t *Tracing) Tracer(ctx context.Context, svc Service, getenv func(string) string) (trace.TracerProvider, func(context.Context) error, error) {
	var opts []sdktrace.TracerProviderOption
	exp, err := t.otlpExporter(ctx, getenv)
	if err != nil {
		return nil, nil, err
	}
	if exp != nil {
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	if t.TraceStdout {
		exp, err := stdouttrace.New(stdouttrace.WithWriter(os.Stderr))
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	if len(opts) == 0 {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	sampler, err := t.sampler(getenv)
	if err != nil {
		return nil, nil, err
	}
	res, err := svc.resource(ctx)
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res), sdktrace.WithSampler(sampler))...)
	return tp, tp.Shutdown, nil
}

func (t *Tracing) otlpExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	var opts []otlptracehttp.Option
	tlsFlags := t.OTLPCAFile != "" || t.OTLPCertFile != ""
	switch ep := t.OTLPEndpoint; {
	case ep == "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			if tlsFlags {
				return nil, errors.New("--otlp-ca-file/--otlp-cert-file need an endpoint (--otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)")
			}
			return nil, nil
		}
		// The exporter reads the endpoint, headers, TLS files, timeout
		// and compression from OTEL_EXPORTER_OTLP_* itself.
	case strings.Contains(ep, "://"):
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("invalid --otlp-endpoint %q: want host:port or an http(s)://host:port URL", ep)
		}
		if u.Scheme == "http" && tlsFlags {
			return nil, fmt.Errorf("--otlp-endpoint %q is plain http but TLS files are given", ep)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	default:
		opts = append(opts, otlptracehttp.WithEndpoint(ep))
		if !tlsFlags {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	if tlsFlags {
		cfg, err := t.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithTLSClientConfig(cfg))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	return exp, nil
}

func (t *Tracing) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.OTLPCAFile != "" {
		pem, err := os.ReadFile(t.OTLPCAFile)
		if err != nil {
			return nil, fmt.Errorf("--otlp-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--otlp-ca-file %s: no PEM certificate in it", t.OTLPCAFile)
		}
		cfg.RootCAs = pool
	}
	if (t.OTLPCertFile == "") != (t.OTLPKeyFile == "") {
		return nil, errors.New("--otlp-cert-file and --otlp-key-file go together")
	}
	if t.OTLPCertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.OTLPCertFile, t.OTLPKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--otlp-cert-file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// sampler is parent-based: a span with a parent follows the parent's
// sampling decision; root spans are sampled at the flag's ratio, or as
// OTEL_TRACES_SAMPLER says when the flag is unset.
func (t *Tracing) sampler(getenv func(string) string) (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	if t.ratioSet || name == "" {
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.SampleRatio)), nil
	}
	arg := 1.0
	if s := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")); s != "" && strings.HasSuffix(name, "traceidratio") {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0 || v > 1 {
			return nil, fmt.Errorf("invalid OTEL_TRACES_SAMPLER_ARG %q: want a ratio within 0..1", s)
		}
		arg = v
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(arg), nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(arg)), nil
	}
	return nil, fmt.Errorf("unsupported OTEL_TRACES_SAMPLER %q (want always_on, always_off, traceidratio or their parentbased_ forms)", name)
}

// resource layers, later winning: the binary's defaults, then
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, then the version and what
// the command line fixed (domain, dc).
func (s Service) resource(ctx context.Context) (*resource.Resource, error) {
	instance := s.Instance
	if instance == "" {
		host, _ := os.Hostname()
		instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	fixed := []attribute.KeyValue{semconv.ServiceVersion(Version())}
	if s.Domain != "" {
		fixed = append(fixed, attribute.String("ckf.domain", s.Domain))
	}
	if s.DC != "" {
		fixed = append(fixed, attribute.String("ckf.dc", s.DC))
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(s.Name), semconv.ServiceInstanceID(instance)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
		resource.WithAttributes(fixed...),
	)
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return res, nil
}
