package bridge

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
)

// TestFrameGuardRejectsOversizedFrames feeds a ZMTP stream (greeting, a
// short frame, a long frame within the limit, then a long frame header
// above it) through the guard.
func TestFrameGuardRejectsOversizedFrames(t *testing.T) {
	var stream bytes.Buffer
	stream.Write(make([]byte, 64))               // greeting
	stream.Write([]byte{0x01, 3, 'a', 'b', 'c'}) // short frame, more
	stream.Write([]byte{0x02, 0, 0, 0, 0, 0, 0, 1, 0})
	stream.Write(make([]byte, 256))                          // long frame of 256 bytes
	stream.Write([]byte{0x02, 0x7f, 0xff, 0, 0, 0, 0, 0, 0}) // announces ~2^63 bytes
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		_, _ = server.Write(stream.Bytes())
		server.Close()
	}()
	g := newFrameGuard(client, 1024)
	got, err := io.ReadAll(io.LimitReader(readerFunc(func(p []byte) (int, error) {
		// Read in small pieces so headers straddle reads.
		return g.Read(p[:min(len(p), 7)])
	}), 1<<20))
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err=%v after %d bytes", err, len(got))
	}
	// zmq4 reads the 2-byte header, then the 8-byte length, then
	// allocates the body: the guard fails before the length's last byte.
	if want := 64 + 5 + 9 + 256 + 8; len(got) > want {
		t.Fatalf("passed %d bytes, want at most %d (not the whole oversized header)", len(got), want)
	}
	// The accepted frames passed through intact.
	if !bytes.Equal(got[64:69], []byte{0x01, 3, 'a', 'b', 'c'}) {
		t.Fatalf("short frame %x", got[64:69])
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
