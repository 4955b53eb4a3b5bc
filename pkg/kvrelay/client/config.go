package client

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// Defaults of zero Config fields.
const (
	// DefaultBackoffMin and DefaultBackoffMax are Dynamo's reconnect
	// schedule (§4.4): 500 ms doubling to 30 s, equal jitter.
	DefaultBackoffMin = 500 * time.Millisecond
	DefaultBackoffMax = 30 * time.Second
	// DefaultFrameTimeout is how long a pool stream may send nothing before
	// it counts as stalled: three of the relay's default 10 s heartbeats.
	DefaultFrameTimeout = 30 * time.Second
	// DefaultMaxRecvBytes is §2.3's client receive limit (8 MiB: a full
	// snapshot chunk is 4 194 368 bytes of CBI1 plus framing).
	DefaultMaxRecvBytes = 8 << 20
	// DefaultSubscriberBase prefixes the subscriber ids (<base>/catalog,
	// <base>/ckf).
	DefaultSubscriberBase = "ckfrelay-indexer"
)

// maxSubscriberBase keeps "<base>/catalog" within the 128-byte id limit,
// as Dynamo does (≤ 118 bytes).
const maxSubscriberBase = 118

// Config configures a Follower. Name, Addr, Model and Sink are required.
type Config struct {
	// Name names the source (the lane) in logs, metrics and status.
	Name string
	// Addr is the relay's HOST:PORT.
	Addr string
	// Model is the canonical model id (or an alias) whose pool is followed.
	Model string
	// AcceptLegacy lets the Follower select a descriptor whose roles are
	// only LEGACY (a role-less card, which Dynamo's legacy fallback serves
	// as aggregated) when no AGGREGATED descriptor registers the model.
	// ckfrelay's own relay declares LEGACY.
	AcceptLegacy bool
	// Sink receives the lane.
	Sink LaneSink
	// Load, when set, receives the followed pool's load from the relay's
	// load streams (load.go); nil does not subscribe them.
	Load LoadSink
	// SubscriberBase prefixes the subscriber ids (default
	// DefaultSubscriberBase; at most 118 bytes).
	SubscriberBase string
	// TLS, when set, dials with TLS (mTLS when it holds a certificate);
	// nil dials plaintext, the protocol's default (§1.2).
	TLS *tls.Config
	// DialOptions are appended to the Follower's own (tests, custom
	// dialers).
	DialOptions []grpc.DialOption
	// MaxRecvBytes is the gRPC receive limit (default 8 MiB, the minimum
	// §2.3 allows; a larger frame ends the stream with ReasonResourceLimit).
	MaxRecvBytes int
	// FrameTimeout: see DefaultFrameTimeout.
	FrameTimeout time.Duration
	// BackoffMin and BackoffMax bound the resubscribe backoff.
	BackoffMin, BackoffMax time.Duration
	// After returns a channel that receives after d (default time.After);
	// every backoff wait goes through it, so tests inject one that records
	// the waits and fires at once.
	After func(d time.Duration) <-chan time.Time
	// Rand returns a value in [0, n) for the backoff jitter (default
	// math/rand/v2).
	Rand func(n int64) int64
	// Now is the clock of epochs and frame ages (default time.Now).
	Now func() time.Time
	// Metrics receives the follower's series (nil: none are kept).
	Metrics *Metrics
	Logger  zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.SubscriberBase == "" {
		c.SubscriberBase = DefaultSubscriberBase
	}
	if c.MaxRecvBytes == 0 {
		c.MaxRecvBytes = DefaultMaxRecvBytes
	}
	if c.FrameTimeout == 0 {
		c.FrameTimeout = DefaultFrameTimeout
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(DefaultBackoffMax, c.BackoffMin)
	}
	if c.After == nil {
		c.After = time.After
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks c with its defaults applied; errors wrap ErrConfig.
func (c Config) Validate() error { return c.validate(true) }

// validate checks c; lane is false for WatchModels, which needs no sink or
// model.
func (c Config) validate(lane bool) error {
	c = c.withDefaults()
	bad := func(format string, a ...any) error { return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...)) }
	switch {
	case c.Name == "":
		return bad("a source name is required")
	case lane && c.Sink == nil:
		return bad("source %s: a sink is required", c.Name)
	case lane && c.Model == "":
		return bad("source %s: a model is required", c.Name)
	case len(c.SubscriberBase) > maxSubscriberBase:
		return bad("source %s: subscriber base of %d bytes, at most %d", c.Name, len(c.SubscriberBase), maxSubscriberBase)
	case c.MaxRecvBytes < DefaultMaxRecvBytes:
		return bad("source %s: receive limit %d is below the 8 MiB §2.3 requires", c.Name, c.MaxRecvBytes)
	case c.FrameTimeout < 0 || c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin:
		return bad("source %s: negative timeout or backoff max below min", c.Name)
	}
	if err := kvrelay.ValidateSubscriberID(c.SubscriberBase + "/catalog"); err != nil {
		return bad("source %s: subscriber base %q: %v", c.Name, c.SubscriberBase, err)
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return bad("source %s: address %q: want HOST:PORT: %v", c.Name, c.Addr, err)
	}
	return nil
}

// dialOptions are the gRPC options of a Follower: credentials, the 8 MiB
// receive limit, the protocol's keepalive (§1.2: 20 s ping, 10 s timeout),
// then c.DialOptions.
func (c Config) dialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if c.TLS != nil {
		creds = credentials.NewTLS(c.TLS)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.MaxRecvBytes)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 20 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	}
	return append(opts, c.DialOptions...)
}

// LoadTLS builds a client TLS config: caFile verifies the relay (empty: the
// system roots), certFile and keyFile are the client certificate for mTLS
// (both or neither), serverName overrides the name verified (empty: the
// host of the address).
func LoadTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, NextProtos: []string{"h2"}}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("kvrelay client: CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kvrelay client: CA %s: no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%w: a client certificate needs both a certificate and a key file", ErrConfig)
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("kvrelay client: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
