package httpserve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestStartServesAndShutsDownCleanly(t *testing.T) {
	s, err := DefaultConfig().Start("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + s.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Fatalf("body %q", b)
	}
	if s.Err() != nil {
		t.Fatalf("Err while serving: %v", s.Err())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("clean shutdown reported %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Shutdown")
	}
}

func TestStartReportsAListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := DefaultConfig().Start(ln.Addr().String(), http.NotFoundHandler(), zerolog.Nop()); err == nil {
		t.Fatal("listening on a taken port succeeded")
	}
}

// failingListener fails its first Accept with a permanent error, as a
// listener whose descriptor was closed under the server would.
type failingListener struct{ net.Listener }

var errBroken = errors.New("accept: broken listener")

func (failingListener) Accept() (net.Conn, error) { return nil, errBroken }

// A Serve failure is kept: Done closes, Err and Shutdown return it, and
// Watch's context ends so the process stops.
func TestServeFailureIsReportedAndEndsTheWatchContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := DefaultConfig().serve(failingListener{ln}, http.NotFoundHandler(), zerolog.Nop())
	ctx, cancel := s.Watch(context.Background())
	defer cancel()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Watch context still alive after Serve failed")
	}
	if !errors.Is(s.Err(), errBroken) {
		t.Fatalf("Err = %v, want the accept error", s.Err())
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := s.Shutdown(sctx); !errors.Is(err, errBroken) {
		t.Fatalf("Shutdown = %v, want the accept error", err)
	}
}

// Serve runs the work beside the server and stops the work when the
// server dies, reporting both.
func TestServeRunsBesideTheServerAndJoinsTheirErrors(t *testing.T) {
	ran := false
	err := DefaultConfig().Serve(context.Background(), "127.0.0.1:0", http.NotFoundHandler(), zerolog.Nop(), func(ctx context.Context, bound string) error {
		ran = bound != "127.0.0.1:0" && strings.HasPrefix(bound, "127.0.0.1:")
		return errors.New("work failed")
	})
	if !ran || err == nil || err.Error() != "work failed" {
		t.Fatalf("ran %v, err %v", ran, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = DefaultConfig().Serve(context.Background(), ln.Addr().String(), http.NotFoundHandler(), zerolog.Nop(), func(context.Context, string) error {
		t.Fatal("work started although the server could not listen")
		return nil
	})
	if err == nil {
		t.Fatal("a taken port was not reported")
	}
}
