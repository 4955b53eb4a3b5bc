// Command ckf-health is the healthcheck of the FROM scratch images (which
// have no shell or curl): it GETs each URL and exits 0 only when every one
// answers 2xx within the timeout.
//
//	ckf-health http://127.0.0.1:8080/readyz
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/cli"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stderr))
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("ckf-health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Bool("version", false, "print the version and exit")
	timeout := fs.Duration("timeout", 2*time.Second, "bound on each request")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && cli.HandleVersion(fs) != nil {
		return 0
	}
	if err != nil || fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: ckf-health [--timeout 2s] URL...")
		return 2
	}
	client := &http.Client{Timeout: *timeout}
	for _, url := range fs.Args() {
		if err := check(ctx, client, url); err != nil {
			fmt.Fprintf(stderr, "ckf-health: %s: %v\n", url, err)
			return 1
		}
	}
	return 0
}

// errStatus is a non-2xx answer.
type errStatus int

func (e errStatus) Error() string { return fmt.Sprintf("status %d", int(e)) }

func check(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errStatus(resp.StatusCode)
	}
	return nil
}
