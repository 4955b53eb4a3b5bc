package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Link is a TCP relay standing in for the WAN between a DC's leaf server
// and the hub: Cut drops every connection through it and refuses new ones
// (a partition), Heal lets them through again. The target is dialled per
// connection, so a restarted hub on the same port is reached again.
type Link struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewLink listens on a random 127.0.0.1 port and forwards to target
// (host:port); t.Cleanup closes it.
func NewLink(t testing.TB, target string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: link listen: %v", err)
	}
	l := &Link{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	t.Cleanup(l.close)
	return l
}

// Addr is the host:port to dial instead of the target.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Cut closes every open connection and refuses new ones until Heal.
func (l *Link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for c := range l.conns {
		c.Close()
	}
}

// Heal lets new connections through again.
func (l *Link) Heal() {
	l.mu.Lock()
	l.cut = false
	l.mu.Unlock()
}

func (l *Link) close() {
	l.ln.Close()
	l.Cut()
	l.wg.Wait()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // listener closed
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.forward(c)
		}()
	}
}

// track registers c unless the link is cut; it reports whether it did.
func (l *Link) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return false
	}
	for _, c := range cs {
		l.conns[c] = struct{}{}
	}
	return true
}

func (l *Link) untrack(cs ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cs {
		delete(l.conns, c)
		c.Close()
	}
}

func (l *Link) forward(in net.Conn) {
	out, err := net.Dial("tcp", l.target)
	if err != nil {
		in.Close()
		return
	}
	if !l.track(in, out) {
		in.Close()
		out.Close()
		return
	}
	defer l.untrack(in, out)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // a cut or a closed peer ends the copy either way
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}
