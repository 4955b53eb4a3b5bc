package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/httpserve"
)

// pprofWriteTimeout lets a 30 s CPU profile (the pprof tool's default)
// finish writing; the other bounds are httpserve's defaults.
const pprofWriteTimeout = 2 * time.Minute

// PprofAddr resolves --pprof-addr: empty is off; a port without a host
// (":6060" or "6060") binds loopback only, since profiles expose memory
// contents and cost CPU; an explicit host is the operator's choice.
func PprofAddr(flagValue string) (string, error) {
	if flagValue == "" {
		return "", nil
	}
	if _, _, err := net.SplitHostPort(flagValue); err != nil {
		flagValue = ":" + flagValue
	}
	host, port, err := net.SplitHostPort(flagValue)
	if err != nil {
		return "", fmt.Errorf("invalid --pprof-addr %q: %w", flagValue, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		return "", fmt.Errorf("invalid --pprof-addr %q: bad port", flagValue)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// pprofHandler serves net/http/pprof's endpoints under /debug/pprof/ on a
// mux of its own, so nothing registers them on the API servers.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// startPprof serves the profiling endpoints on addr (resolved by
// PprofAddr) until the returned stop is called.
func startPprof(addr string, log zerolog.Logger) (stop func(), err error) {
	cfg := httpserve.DefaultConfig()
	cfg.WriteTimeout = pprofWriteTimeout
	cfg.MaxConns = 4
	srv, err := cfg.Start(addr, pprofHandler(), log)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	log.Info().Str("addr", srv.Addr().String()).Msg("serving profiles at /debug/pprof/")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			log.Warn().Err(err).Msg("pprof server")
		}
	}, nil
}
