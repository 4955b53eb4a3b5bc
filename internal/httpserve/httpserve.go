// Package httpserve builds the HTTP servers of the relay and the indexer
// with bounded resources: read, write and idle timeouts, a header size
// limit, and a listener that holds at most MaxConns connections, so slow
// or idle HTTP clients can never take the file descriptors (and with them
// the NATS connection or the embedded NATS server) of the process.
package httpserve

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Config bounds one HTTP server.
type Config struct {
	// ReadHeaderTimeout bounds reading the request headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included: a
	// slow-body client is cut off.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing the response.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request headers.
	MaxHeaderBytes int
	// MaxConns bounds open connections; more wait in the kernel's accept
	// backlog, holding no descriptor of this process.
	MaxConns int
}

// DefaultConfig returns the defaults of the flags.
func DefaultConfig() Config {
	return Config{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    16 << 10,
		MaxConns:          256,
	}
}

// ErrInvalidConfig is wrapped by every Validate error.
var ErrInvalidConfig = errors.New("httpserve: invalid config")

// Register adds --http-read-timeout, --http-write-timeout,
// --http-idle-timeout, --http-max-header-bytes and --http-max-conns.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.DurationVar(&c.ReadTimeout, "http-read-timeout", c.ReadTimeout, "bound on reading one HTTP request, body included")
	fs.DurationVar(&c.WriteTimeout, "http-write-timeout", c.WriteTimeout, "bound on writing one HTTP response")
	fs.DurationVar(&c.IdleTimeout, "http-idle-timeout", c.IdleTimeout, "close keep-alive HTTP connections idle this long")
	fs.IntVar(&c.MaxHeaderBytes, "http-max-header-bytes", c.MaxHeaderBytes, "bound on HTTP request headers")
	fs.IntVar(&c.MaxConns, "http-max-conns", c.MaxConns, "open HTTP connections at most (more wait in the accept backlog)")
}

// Validate reports a clear error for an unusable config.
func (c Config) Validate() error {
	if c.ReadHeaderTimeout <= 0 || c.ReadTimeout <= 0 || c.WriteTimeout <= 0 || c.IdleTimeout <= 0 {
		return fmt.Errorf("%w: HTTP timeouts must be positive", ErrInvalidConfig)
	}
	if c.MaxHeaderBytes <= 0 || c.MaxConns <= 0 {
		return fmt.Errorf("%w: --http-max-header-bytes and --http-max-conns must be positive", ErrInvalidConfig)
	}
	return nil
}

// Server returns an http.Server for h with the config's bounds. Its error
// log goes to logger at debug level (timeouts of hostile clients are not
// the operator's problem).
func (c Config) Server(h http.Handler, logger zerolog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(c.ReadHeaderTimeout, c.ReadTimeout),
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          log.New(debugWriter{logger}, "", 0),
	}
}

// debugWriter logs each net/http error line at debug level.
type debugWriter struct{ l zerolog.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.l.Debug().Str("component", "http").Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Listen opens a TCP listener on addr holding at most c.MaxConns
// connections at once.
func (c Config) Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return LimitListener(ln, c.MaxConns), nil
}

// LimitListener returns a listener that accepts at most n connections at
// once: Accept waits for a connection to close before taking the next one
// from the kernel.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
