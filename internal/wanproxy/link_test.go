package wanproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer echoes every connection on a real loopback port and records,
// per connection, when each read arrived (for one-way latency) and how the
// connection ended.
type echoServer struct {
	ln      net.Listener
	mu      sync.Mutex
	arrived []time.Time
	ends    []error
	wg      sync.WaitGroup
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						s.mu.Lock()
						s.arrived = append(s.arrived, time.Now())
						s.mu.Unlock()
						if _, werr := c.Write(buf[:n]); werr != nil {
							err = werr
						}
					}
					if err != nil {
						s.mu.Lock()
						s.ends = append(s.ends, err)
						s.mu.Unlock()
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *echoServer) addr() string { return s.ln.Addr().String() }

func (s *echoServer) lastArrival() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.arrived[len(s.arrived)-1]
}

func (s *echoServer) endings() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ends)
}

func newLink(t *testing.T, targets ...string) *Link {
	t.Helper()
	var routes []Route
	for _, tg := range targets {
		routes = append(routes, Route{Listen: "127.0.0.1:0", Target: tg})
	}
	l, err := New(Config{Name: "test", Routes: routes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func dial(t *testing.T, l *Link) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", l.Routes()[0].Listen, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip writes one byte and waits for its echo.
func roundTrip(t *testing.T, c net.Conn) (sent time.Time, rtt time.Duration) {
	t.Helper()
	sent = time.Now()
	if _, err := c.Write([]byte{'p'}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatal(err)
	}
	return sent, time.Since(sent)
}

// refused dials l and expects the connection to be reset: the kernel
// completes the handshake, the proxy resets it, and the RST reaches the
// client either before its dial returns or on its first read.
func refused(l *Link) error {
	c, err := net.DialTimeout("tcp", l.Routes()[0].Listen, 2*time.Second)
	if errors.Is(err, syscall.ECONNRESET) {
		return nil
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %v, want the connection reset", err)
	}
	return nil
}

func TestForwardsBothWaysAndPassesTheHalfClose(t *testing.T) {
	echo := startEcho(t)
	l := newLink(t, echo.addr())
	c := dial(t, l)
	msg := bytes.Repeat([]byte("ckfrelay "), 20000) // 180 kB: several chunks
	go func() {
		_, _ = c.Write(msg)
		_ = c.CloseWrite()
	}()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c) // EOF: the echo server saw our FIN and closed
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echoed %d bytes, want %d identical", len(got), len(msg))
	}
	st := l.Stats()
	if st.BytesUp != int64(len(msg)) || st.BytesDown != int64(len(msg)) || st.Accepted != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestLatencyIsAppliedPerDirection(t *testing.T) {
	echo := startEcho(t)
	l := newLink(t, echo.addr())
	const up, down = 40 * time.Millisecond, 15 * time.Millisecond
	if err := l.SetLatency(Latency{Delay: Duration(up)}, Up); err != nil {
		t.Fatal(err)
	}
	if err := l.SetLatency(Latency{Delay: Duration(down)}, Down); err != nil {
		t.Fatal(err)
	}
	c := dial(t, l)
	var ups, downs []time.Duration
	for range 15 {
		sent, rtt := roundTrip(t, c)
		oneWay := echo.lastArrival().Sub(sent)
		ups, downs = append(ups, oneWay), append(downs, rtt-oneWay)
	}
	within(t, "up one-way", ups, up)
	within(t, "down one-way", downs, down)
}

// within checks measured delays against the configured one: none below it
// (a delay is never cut short) and the median within 10 ms above it. The
// worst is only bounded loosely (+250 ms): on a loaded 2-core machine
// under -race a goroutine may wait that long for a CPU.
func within(t *testing.T, what string, got []time.Duration, want time.Duration) {
	t.Helper()
	med, worst := Quantile(got, 0.5), slices.Max(got)
	if slices.Min(got) < want || med > want+10*time.Millisecond || worst > want+250*time.Millisecond {
		t.Errorf("%s: min %s median %s max %s, want ≥ %s, median ≤ +10ms, max ≤ +250ms", what, slices.Min(got), med, worst, want)
	}
}

// Quantile is the q-quantile (nearest rank) of d.
func Quantile(d []time.Duration, q float64) time.Duration {
	c := slices.Clone(d)
	slices.Sort(c)
	return c[min(max(int(q*float64(len(c))+0.5)-1, 0), len(c)-1)]
}

func TestJitterStaysWithinItsBounds(t *testing.T) {
	echo := startEcho(t)
	l := newLink(t, echo.addr())
	lat := Latency{Delay: Duration(30 * time.Millisecond), Jitter: Duration(10 * time.Millisecond)}
	if err := l.SetLatency(lat, Up, Down); err != nil {
		t.Fatal(err)
	}
	c := dial(t, l)
	var rtts []time.Duration
	for range 40 {
		_, rtt := roundTrip(t, c)
		rtts = append(rtts, rtt)
	}
	// Each way 20..40 ms: a round trip 40..80 ms, its median near 60 ms.
	if lo := slices.Min(rtts); lo < 40*time.Millisecond {
		t.Errorf("round trip %s under the 40ms floor", lo)
	}
	if med := Quantile(rtts, 0.5); med < 50*time.Millisecond || med > 75*time.Millisecond {
		t.Errorf("median round trip %s, want about 60ms", med)
	}
	if p90 := Quantile(rtts, 0.9); p90 > 80*time.Millisecond+10*time.Millisecond {
		t.Errorf("90th percentile round trip %s above the 80ms ceiling", p90)
	}
	// 40 draws from 40..80 ms: a spread under 10 ms means no jitter.
	if spread := Quantile(rtts, 0.9) - Quantile(rtts, 0.1); spread < 10*time.Millisecond {
		t.Errorf("round trips' 10-90%% spread is %s only: %v", spread, rtts)
	}
}

// receiveRate reads c to EOF and returns the rate from the first byte to
// the last, not counting the first read.
func receiveRate(c net.Conn) (float64, int, error) {
	buf := make([]byte, 64<<10)
	var first, last time.Time
	total, counted := 0, 0
	for {
		n, err := c.Read(buf)
		if n > 0 {
			now := time.Now()
			if first.IsZero() {
				first = now
			} else {
				counted += n
			}
			total += n
			last = now
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, total, err
		}
	}
	return float64(counted) / last.Sub(first).Seconds(), total, nil
}

func TestBandwidthCapHoldsWithinTwentyPercent(t *testing.T) {
	const rate = 256 << 10 // bytes/s
	const size = 320 << 10 // 1.25 s at the cap
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	l := newLink(t, sink.Addr().String())
	if err := l.SetBandwidth(rate, Up); err != nil {
		t.Fatal(err)
	}
	c := dial(t, l)
	go func() {
		_, _ = c.Write(make([]byte, size))
		_ = c.CloseWrite()
	}()
	s, err := sink.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, n, err := receiveRate(s)
	if err != nil || n != size {
		t.Fatalf("received %d of %d bytes: %v", n, size, err)
	}
	if got < 0.8*rate || got > 1.2*rate {
		t.Fatalf("measured %.0f B/s through a %d B/s cap (want ±20%%)", got, rate)
	}
	t.Logf("measured %.0f B/s through a %d B/s cap", got, rate)
}

func TestBandwidthCapIsSharedByTheLinksConnections(t *testing.T) {
	const rate = 256 << 10
	const each = 160 << 10 // two of them: 1.25 s at the cap
	srv, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() { // the target sends: the Down direction
		for range 2 {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write(make([]byte, each))
			}()
		}
	}()
	l := newLink(t, srv.Addr().String())
	if err := l.SetBandwidth(rate, Down); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		c := dial(t, l)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if n, err := io.Copy(io.Discard, c); err != nil || n != each {
				t.Errorf("received %d of %d: %v", n, each, err)
			}
		}()
	}
	wg.Wait()
	got := float64(2*each) / time.Since(start).Seconds()
	if got < 0.8*rate || got > 1.2*rate {
		t.Fatalf("two connections together got %.0f B/s through a %d B/s cap", got, rate)
	}
}

func TestResetIsSeenByBothSides(t *testing.T) {
	echo := startEcho(t)
	l := newLink(t, echo.addr())
	c := dial(t, l)
	roundTrip(t, c)
	if n := l.Reset(); n != 1 {
		t.Fatalf("reset %d connections, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read after reset: %v, want ECONNRESET", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(echo.endings()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ends := echo.endings(); len(ends) != 1 || !errors.Is(ends[0], syscall.ECONNRESET) {
		t.Fatalf("target side ended with %v, want ECONNRESET", ends)
	}
	if st := l.Stats(); st.Resets != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestStallHoldsTheBytesWithoutClosingAndHealResumes(t *testing.T) {
	echo := startEcho(t)
	l := newLink(t, echo.addr())
	c := dial(t, l)
	roundTrip(t, c)
	if err := l.Stall(0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 4)
	_, err := c.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read during the stall: %v, want a timeout (nothing forwarded, nothing closed)", err)
	}
	if len(echo.endings()) != 0 || l.Stats().OpenConns != 1 {
		t.Fatalf("the stall closed something: ends %v, stats %+v", echo.endings(), l.Stats())
	}
	l.Heal()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after heal: %q, %v", buf, err)
	}
	roundTrip(t, c) // and it keeps flowing
}

func TestStallWithATimeoutClosesTheStalledConnections(t *testing.T) {
	echo := startEcho(t)
	l := newLink(t, echo.addr())
	c := dial(t, l)
	roundTrip(t, c)
	start := time.Now()
	if err := l.Stall(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read: %v, want EOF once the stall timed out", err)
	}
	if took := time.Since(start); took < 100*time.Millisecond || took > 2*time.Second {
		t.Fatalf("closed after %s, want about 100ms", took)
	}
	l.Heal()
}

func TestCutClosesAndRefusesUntilHeal(t *testing.T) {
	echo := startEcho(t)
	l := newLink(t, echo.addr())
	c := dial(t, l)
	roundTrip(t, c)
	l.Cut()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("open connection survived the cut")
	}
	if err := refused(l); err != nil {
		t.Fatalf("connection during the cut: %v", err)
	}
	if st := l.Stats(); st.Refused != 1 {
		t.Fatalf("stats %+v", st)
	}
	l.Heal()
	roundTrip(t, dial(t, l))
}

func TestRoutesShareTheLinksToxics(t *testing.T) {
	a, b := startEcho(t), startEcho(t)
	l := newLink(t, a.addr(), b.addr())
	if err := l.SetLatency(Latency{Delay: Duration(20 * time.Millisecond)}, Up, Down); err != nil {
		t.Fatal(err)
	}
	for _, r := range l.Routes() {
		c, err := net.Dial("tcp", r.Listen)
		if err != nil {
			t.Fatal(err)
		}
		if _, rtt := roundTrip(t, c); rtt < 40*time.Millisecond {
			t.Errorf("route %s: round trip %s, want ≥ 40ms", r.Listen, rtt)
		}
		c.Close()
	}
}

func TestTargetDownResetsTheClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLink(t, ln.Addr().String()) // listening first: never on ln's port
	ln.Close()
	if err := refused(l); err != nil {
		t.Fatalf("target down: %v", err)
	}
	if st := l.Stats(); st.DialErrors != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestInvalidSettingsAreTyped(t *testing.T) {
	l := newLink(t, "127.0.0.1:1")
	for name, err := range map[string]error{
		"negative delay":  l.SetLatency(Latency{Delay: -1}, Up),
		"jitter > delay":  l.SetLatency(Latency{Delay: Duration(time.Millisecond), Jitter: Duration(2 * time.Millisecond)}, Up),
		"negative rate":   l.SetBandwidth(-1, Up),
		"negative stall":  l.Stall(-time.Second),
		"no route":        func() error { _, err := New(Config{}); return err }(),
		"bad route":       func() error { _, err := ParseRoutes("127.0.0.1:1"); return err }(),
		"bad direction":   func() error { _, err := ParseDirections("sideways"); return err }(),
		"route host:port": func() error { _, err := ParseRoutes("a=b"); return err }(),
	} {
		var ie *InvalidError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &ie) {
			t.Errorf("%s: %v, want an *InvalidError", name, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
}

func TestParseRoutes(t *testing.T) {
	got, err := ParseRoutes("0.0.0.0:7422=nats-hub-1:7422, 0.0.0.0:7423=nats-hub-2:7422")
	if err != nil {
		t.Fatal(err)
	}
	want := []Route{{"0.0.0.0:7422", "nats-hub-1:7422"}, {"0.0.0.0:7423", "nats-hub-2:7422"}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestACappedDirectionQueuesLittleAndPushesBack(t *testing.T) {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	l := newLink(t, sink.Addr().String())
	const rate = 64 << 10
	if err := l.SetBandwidth(rate, Up); err != nil {
		t.Fatal(err)
	}
	c := dial(t, l)
	go func() {
		_ = c.SetWriteDeadline(time.Now().Add(3 * time.Second))
		_, _ = c.Write(make([]byte, 32<<20)) // far beyond any socket buffer
	}()
	s, err := sink.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go func() { _, _ = io.Copy(io.Discard, s) }()
	time.Sleep(time.Second)
	// The queue holds about CapBuffer at the rate (at least 64 KiB), plus
	// the read in progress: the rest waits in the sender's socket.
	if q := l.Stats().Queued; q <= 0 || q > minCapQueue+32<<10 {
		t.Fatalf("queued %d bytes at a %d B/s cap", q, rate)
	}
	// Lifting the cap drains at once.
	if err := l.SetBandwidth(0, Up); err != nil {
		t.Fatal(err)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats().Queued != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if q := l.Stats().Queued; q != 0 {
		t.Fatalf("%d bytes still queued", q)
	}
}
