package httpserve

import (
	"bufio"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// start serves h with c on a random loopback port and returns its address.
func start(t *testing.T, c Config, h http.Handler) string {
	t.Helper()
	ln, err := c.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := c.Server(h, zerolog.Nop())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte("ok"))
	})
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends one keep-alive GET on c and reads the response.
func get(t *testing.T, c net.Conn, r *bufio.Reader) error {
	t.Helper()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// closedWithin reports whether the server closes c within d (any answer
// it writes first is read and ignored).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 512)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

func TestIdleConnectionClosedAfterIdleTimeout(t *testing.T) {
	c := DefaultConfig()
	c.IdleTimeout = 200 * time.Millisecond
	addr := start(t, c, okHandler())
	conn := dial(t, addr)
	if err := get(t, conn, bufio.NewReader(conn)); err != nil {
		t.Fatal(err)
	}
	// Without an idle timeout this keep-alive connection stays open for
	// ReadTimeout at least (10s): 3s tells the two apart.
	if !closedWithin(conn, 3*time.Second) {
		t.Fatal("idle keep-alive connection still open after IdleTimeout")
	}
}

func TestSlowBodyCutByReadTimeout(t *testing.T) {
	c := DefaultConfig()
	c.ReadTimeout = 300 * time.Millisecond
	var handled atomic.Bool
	addr := start(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		handled.Store(err == nil)
	}))
	conn := dial(t, addr)
	if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Dribble one byte every 50ms: the 1000-byte body would take 50s.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	if !closedWithin(conn, 5*time.Second) {
		t.Fatal("slow-body request still open after ReadTimeout")
	}
	if handled.Load() {
		t.Fatal("the handler read a whole body that could not have arrived")
	}
}

func TestConnectionLimitEnforced(t *testing.T) {
	c := DefaultConfig()
	c.MaxConns = 2
	addr := start(t, c, okHandler())
	var held []net.Conn
	for range 2 {
		conn := dial(t, addr)
		if err := get(t, conn, bufio.NewReader(conn)); err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	// A third connection is not accepted while two are open: its request
	// gets no answer.
	third := dial(t, addr)
	r3 := bufio.NewReader(third)
	if _, err := io.WriteString(third, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := r3.Peek(1); err == nil {
		t.Fatal("third connection served while the limit of 2 is reached")
	}
	// Closing one admits it.
	held[0].Close()
	_ = third.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(r3, nil)
	if err != nil {
		t.Fatalf("third connection after a slot freed: %v", err)
	}
	resp.Body.Close()
}

func TestLimitListenerCloseUnblocksAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitListener(ln, 1)
	c := dial(t, ln.Addr().String())
	first, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	defer c.Close()
	errs := make(chan error, 1)
	go func() { _, err := l.Accept(); errs <- err }() // blocks: no slot
	l.Close()
	select {
	case err := <-errs:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("err %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still blocked after Close")
	}
}

func TestFlagsAndValidate(t *testing.T) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.Register(fs)
	if err := fs.Parse([]string{"--http-idle-timeout", "7s", "--http-max-conns", "9"}); err != nil {
		t.Fatal(err)
	}
	if c.IdleTimeout != 7*time.Second || c.MaxConns != 9 {
		t.Fatalf("parsed %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.MaxConns = 0
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err %v, want ErrInvalidConfig", err)
	}
	if !strings.Contains(c.Validate().Error(), "max-conns") {
		t.Fatal("error does not name the flag")
	}
}
