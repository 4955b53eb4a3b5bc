package servertest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
)

// Serve serves a server of pub (nil: pools are added later) with cfg on
// loopback until the test ends, and returns it and its address; the
// server's end is checked at cleanup.
func Serve(t testing.TB, pub server.Publication, cfg server.Config) (*server.Server, string) {
	t.Helper()
	srv, err := server.New(pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("kvrelay server: %v", err)
		}
	})
	return srv, ln.Addr().String()
}
