package server

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
)

// Config sets the server's limits and timers. DefaultConfig has §8.4's
// defaults.
type Config struct {
	// DrtInstanceID and Incarnation form RelayIdentity. 0: random (the
	// incarnation is masked to 63 bits, §3.2).
	DrtInstanceID uint64
	Incarnation   uint64

	PoolHeartbeat      time.Duration // pool_heartbeat_interval_ms
	CatalogHeartbeat   time.Duration // catalog_heartbeat_interval_ms
	ReadinessHeartbeat time.Duration // readiness_heartbeat_interval_ms
	LoadWindow         time.Duration // load_window_ms

	MaxMessageBytes int // max encode and decode message size

	MaxCatalogSubscribers     int
	MaxPoolStreams            int // max_pool_streams_total
	MaxSubscribersPerPool     int
	MaxReadinessSubscribers   int
	MaxLoadSubscribers        int
	MaxServingLoadSubscribers int

	// Queue bounds each pool subscriber's queue of unsent deltas.
	Queue QueueLimits
	// SnapshotProgress bounds how long the transport may take one snapshot
	// chunk (snapshot_progress_timeout_ms): a client that stops reading
	// during its bootstrap gets RESOURCE_EXHAUSTED /
	// SNAPSHOT_PROGRESS_TIMEOUT and frees its pool-stream slot.
	SnapshotProgress time.Duration

	KeepaliveInterval time.Duration
	KeepaliveTimeout  time.Duration
	// ShutdownGrace bounds how long Shutdown lets handlers send their final
	// status before it force-closes the connections.
	ShutdownGrace time.Duration

	// TLS, when set, serves TLS (mTLS when it requires client
	// certificates, see LoadTLS); nil serves plaintext.
	TLS *tls.Config

	Logger zerolog.Logger
	// Metrics receives the server's series (nil: a private registry).
	Metrics prometheus.Registerer
}

// DefaultConfig returns §8.4's defaults: 10 s heartbeats, 1 s load windows,
// 8 MiB messages, 64 subscribers of each kind, 16 frames / 16 MiB per pool
// subscriber, keepalive 20 s / 10 s, plaintext.
func DefaultConfig() Config {
	return Config{
		PoolHeartbeat:             10 * time.Second,
		CatalogHeartbeat:          10 * time.Second,
		ReadinessHeartbeat:        10 * time.Second,
		LoadWindow:                time.Second,
		MaxMessageBytes:           8 << 20,
		MaxCatalogSubscribers:     64,
		MaxPoolStreams:            64,
		MaxSubscribersPerPool:     64,
		MaxReadinessSubscribers:   64,
		MaxLoadSubscribers:        64,
		MaxServingLoadSubscribers: 64,
		Queue:                     QueueLimits{Frames: 16, Bytes: 16 << 20},
		SnapshotProgress:          60 * time.Second,
		KeepaliveInterval:         20 * time.Second,
		KeepaliveTimeout:          10 * time.Second,
		ShutdownGrace:             time.Second,
		Logger:                    zerolog.Nop(),
	}
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("kvrelay server: invalid config")

// maxInterval is §8.4's upper bound for every interval (one year).
const maxInterval = 365 * 24 * time.Hour

// Validate applies §8.4 / §8.2 scenario 21: positive limits and intervals of
// at most a year, messages of at least a full CBI1 frame + 64 KiB.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error { return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...)) }
	for _, iv := range []struct {
		name string
		d    time.Duration
	}{{"pool heartbeat", c.PoolHeartbeat}, {"catalog heartbeat", c.CatalogHeartbeat}, {"readiness heartbeat", c.ReadinessHeartbeat},
		{"load window", c.LoadWindow}, {"keepalive interval", c.KeepaliveInterval}, {"keepalive timeout", c.KeepaliveTimeout},
		{"shutdown grace", c.ShutdownGrace}, {"snapshot progress timeout", c.SnapshotProgress}} {
		if iv.d < time.Millisecond || iv.d > maxInterval {
			return bad("%s %s must be within 1ms..1y", iv.name, iv.d)
		}
	}
	for _, l := range []struct {
		name string
		n    int
	}{{"catalog subscribers", c.MaxCatalogSubscribers}, {"pool streams", c.MaxPoolStreams}, {"subscribers per pool", c.MaxSubscribersPerPool},
		{"readiness subscribers", c.MaxReadinessSubscribers}, {"load subscribers", c.MaxLoadSubscribers},
		{"serving load subscribers", c.MaxServingLoadSubscribers}, {"queue frames", c.Queue.Frames}} {
		if l.n <= 0 {
			return bad("max %s must be positive", l.name)
		}
	}
	if minMsg := cbi1.MaxFrameBytes + 64<<10; c.MaxMessageBytes < minMsg {
		return bad("max message bytes %d is below %d (a full CBI1 frame + 64 KiB)", c.MaxMessageBytes, minMsg)
	}
	if minQ := cbi1.MaxFrameBytes + frameOverhead; c.Queue.Bytes < minQ {
		return bad("queue bytes %d is below %d (one full frame)", c.Queue.Bytes, minQ)
	}
	return nil
}

func (c *Config) identity() (drt, inc uint64) {
	drt, inc = c.DrtInstanceID, c.Incarnation
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	if drt == 0 {
		drt = binary.LittleEndian.Uint64(b[:8])
	}
	if inc == 0 {
		inc = binary.LittleEndian.Uint64(b[8:]) & 0x7FFF_FFFF_FFFF_FFFF
	}
	return drt, inc
}

// LoadTLS builds a server TLS config from a certificate and key file; with
// clientCA set, clients must present a certificate signed by it (mTLS).
func LoadTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("kvrelay server: tls certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("kvrelay server: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kvrelay server: client CA %s: no PEM certificate", clientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
