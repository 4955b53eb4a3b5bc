package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
)

// Server is an HTTP server started by Start: its Serve runs on a goroutine
// the Server owns, and its error is kept rather than dropped.
//
// Concurrency: every method is safe to call from any goroutine; Shutdown
// should be called once.
type Server struct {
	hs   *http.Server
	ln   net.Listener
	done chan struct{}
	err  error // Serve's error; written before done is closed
}

// Start listens on addr with the config's connection bound and serves h
// with the config's timeouts until Shutdown. A listen error is returned at
// once; a later Serve failure closes Done and is reported by Err and
// Shutdown.
func (c Config) Start(addr string, h http.Handler, logger zerolog.Logger) (*Server, error) {
	ln, err := c.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("http listen %s: %w", addr, err)
	}
	return c.serve(ln, h, logger), nil
}

func (c Config) serve(ln net.Listener, h http.Handler, logger zerolog.Logger) *Server {
	s := &Server{hs: c.Server(h, logger), ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = fmt.Errorf("http serve %s: %w", ln.Addr(), err)
		}
	}()
	return s
}

// Addr is the address the server listens on (with the port the kernel
// chose for ":0").
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Done is closed when Serve has returned, after Shutdown or a failure.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is Serve's failure once Done is closed; nil while serving and after
// a clean Shutdown.
func (s *Server) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Watch returns a context that ends with parent or as soon as the server
// fails, so a process whose API died stops instead of running blind.
func (s *Server) Watch(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Shutdown stops accepting, waits for requests in progress until ctx ends,
// and returns the shutdown error joined with any earlier Serve failure.
func (s *Server) Shutdown(ctx context.Context) error {
	shutErr := s.hs.Shutdown(ctx)
	if shutErr != nil {
		shutErr = fmt.Errorf("http shutdown: %w", shutErr)
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return errors.Join(shutErr, ctx.Err())
	}
	return errors.Join(s.err, shutErr)
}

// ShutdownTimeout bounds the wait for requests in progress when Serve
// shuts a server down.
const ShutdownTimeout = 5 * time.Second

// Serve runs run(ctx, bound) beside an HTTP server for h on addr (bound is
// the address it listens on, with the port chosen for ":0"): the server
// starts first (a listen error is returned before run starts), a server
// failure cancels run's context, and once run returns the server is shut
// down within ShutdownTimeout. It returns run's error joined with the
// server's.
func (c Config) Serve(ctx context.Context, addr string, h http.Handler, logger zerolog.Logger, run func(ctx context.Context, bound string) error) error {
	srv, err := c.Start(addr, h, logger)
	if err != nil {
		return err
	}
	logger.Info().Str("addr", srv.Addr().String()).Msg("serving HTTP")
	wctx, cancel := srv.Watch(ctx)
	defer cancel()
	runErr := run(wctx, srv.Addr().String())
	sctx, stop := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer stop()
	return errors.Join(runErr, srv.Shutdown(sctx))
}
