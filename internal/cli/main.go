package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Exit codes of every ckfrelay binary.
const (
	ExitOK    = 0
	ExitError = 1 // the service failed while running
	ExitUsage = 2 // bad flags or environment
)

// Main is the whole main function of a service binary: run gets a context
// that ends on SIGINT or SIGTERM, and its result is the exit code.
func Main(run func(ctx context.Context) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx)
	stop()
	os.Exit(code)
}

// Run is the life of a service binary after flag parsing was set up: parse
// (returning the binary's Common flags), then build the logger, then serve
// until it returns. --help exits 0, and so does --check-config (Common.CheckConfig)
// once parse and the logger succeeded, before serving; a parse or logger error exits 2 with
// "name: error" on stderr, and a serve error is logged ("name failed" with
// the error) and exits 1. serve returns nil when ctx ended normally; Run
// then logs "name stopped" with the reason (the signal, or why ctx ended),
// so every service's log says how it ended.
func Run(ctx context.Context, name string, stderr io.Writer, parse func() (*Common, error), serve func(zerolog.Logger) error) int {
	c, err := parse()
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitUsage
	}
	log, err := c.Logger(stderr, name)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitUsage
	}
	pprofAddr, err := PprofAddr(c.PprofAddr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitUsage
	}
	if c.CheckConfig {
		fmt.Fprintf(stderr, "%s: configuration ok\n", name)
		return ExitOK
	}
	if pprofAddr != "" {
		stop, err := startPprof(pprofAddr, log)
		if err != nil {
			log.Error().Err(err).Msg(name + " failed")
			return ExitError
		}
		defer stop()
	}
	if err := serve(log); err != nil {
		log.Error().Err(err).Msg(name + " failed")
		return ExitError
	}
	log.Info().Str("reason", StopReason(ctx)).Msg(name + " stopped")
	return ExitOK
}

// Options is a binary's parsed flags: they carry the Common ones.
type Options interface {
	CommonFlags() *Common
}

// RunParsed is Run for a binary whose parse returns its Options from args,
// the environment lookup and stderr: serve gets the parsed options.
func RunParsed[O Options](ctx context.Context, name string, args []string, getenv func(string) string, stderr io.Writer,
	parse func([]string, func(string) string, io.Writer) (O, error), serve func(context.Context, O, zerolog.Logger) error) int {
	var o O
	return Run(ctx, name, stderr, func() (*Common, error) {
		var err error
		if o, err = parse(args, getenv, stderr); err != nil {
			return nil, err
		}
		return o.CommonFlags(), nil
	}, func(log zerolog.Logger) error { return serve(ctx, o, log) })
}

// StopReason says why a service whose run context is ctx stopped: the
// signal Main received ("interrupt signal received"), another cause of
// ctx's end, or "finished" when ctx is still live (the work was done).
func StopReason(ctx context.Context) string {
	if ctx.Err() == nil {
		return "finished"
	}
	return context.Cause(ctx).Error()
}

// traceFlushTimeout bounds the final export of spans at exit.
const traceFlushTimeout = 5 * time.Second

// FlushTracing runs the tracer shutdown returned by Common.Tracer with a
// bounded wait, logging rather than dropping its error: the process is
// exiting, and lost spans are worth a warning, not a failed exit.
func FlushTracing(shutdown func(context.Context) error, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		log.Warn().Err(err).Msg("trace flush failed")
	}
}
