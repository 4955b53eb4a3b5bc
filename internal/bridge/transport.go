package bridge

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// MaxFrameBytes bounds one ZMQ frame from an engine. zmq4 allocates a
// frame's body from the length on the wire before reading it, so a
// hostile or corrupt peer could otherwise make it allocate up to 2^63
// bytes. The largest real batch (thousands of blocks of tokens) is a few
// MiB.
const MaxFrameBytes = 64 << 20

// ErrFrameTooLarge is returned (and ends the connection) when a peer
// announces a frame above MaxFrameBytes.
var ErrFrameTooLarge = errors.New("bridge: ZMQ frame larger than the limit")

// The bridge reaches engines through its own transports: TCP / IPC with a
// buffered reader (zmq4 reads every frame header and body with separate
// syscalls) that checks each ZMTP frame length before zmq4 allocates it.
const (
	schemeTCP = "ckftcp"
	schemeIPC = "ckfipc"
)

var registerOnce sync.Once

// registerTransports adds the guarded transports to zmq4's registry (a
// process-wide table in the library; registered once).
func registerTransports() {
	registerOnce.Do(func() {
		_ = zmq4.RegisterTransport(schemeTCP, guarded{inner: transport.New("tcp"), network: "tcp"})
		_ = zmq4.RegisterTransport(schemeIPC, guarded{inner: transport.New("unix"), network: "unix"})
	})
}

// guardedEndpoint rewrites tcp:// and ipc:// to the guarded transports.
func guardedEndpoint(ep string) string {
	registerTransports()
	if rest, ok := strings.CutPrefix(ep, "tcp://"); ok {
		return schemeTCP + "://" + rest
	}
	if rest, ok := strings.CutPrefix(ep, "ipc://"); ok {
		return schemeIPC + "://" + rest
	}
	return ep
}

type guarded struct {
	inner   transport.Transport
	network string
}

func (g guarded) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := g.inner.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	return newFrameGuard(c, MaxFrameBytes), nil
}

func (g guarded) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := g.inner.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return guardedListener{l}, nil
}

func (g guarded) Addr(ep string) (string, error) { return g.inner.Addr(ep) }

type guardedListener struct{ net.Listener }

func (l guardedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newFrameGuard(c, MaxFrameBytes), nil
}

// frameGuard is a buffered net.Conn that follows the ZMTP 3 stream it
// reads: a 64-byte greeting, then frames of [flags, size (1 or 8 bytes),
// body]. It fails a read that would deliver a header announcing a body
// above max.
type frameGuard struct {
	net.Conn
	r   *bufio.Reader
	max uint64

	greeting int    // greeting bytes still to pass
	hdr      []byte // header bytes seen of the current frame
	body     uint64 // body bytes still to pass
	err      error
}

func newFrameGuard(c net.Conn, max uint64) *frameGuard {
	return &frameGuard{Conn: c, r: bufio.NewReaderSize(c, 64<<10), max: max, greeting: 64, hdr: make([]byte, 0, 9)}
}

func (g *frameGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	if verr := g.track(p[:n]); verr != nil {
		g.err = verr
		return 0, verr
	}
	return n, err
}

// track advances the ZMTP state machine over bytes about to be returned.
func (g *frameGuard) track(b []byte) error {
	for len(b) > 0 {
		switch {
		case g.greeting > 0:
			k := min(g.greeting, len(b))
			g.greeting -= k
			b = b[k:]
		case g.body > 0:
			k := uint64(len(b))
			if k > g.body {
				k = g.body
			}
			g.body -= k
			b = b[k:]
		default:
			g.hdr = append(g.hdr, b[0])
			b = b[1:]
			long := g.hdr[0]&0x02 != 0
			need := 2
			if long {
				need = 9
			}
			if len(g.hdr) < need {
				continue
			}
			var size uint64
			if long {
				size = binary.BigEndian.Uint64(g.hdr[1:9])
			} else {
				size = uint64(g.hdr[1])
			}
			g.hdr = g.hdr[:0]
			if size > g.max {
				return fmt.Errorf("%w: %d > %d bytes", ErrFrameTooLarge, size, g.max)
			}
			g.body = size
		}
	}
	return nil
}
