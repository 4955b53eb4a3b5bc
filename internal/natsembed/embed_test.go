package natsembed

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestServerOptionsValidation(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		o    EmbeddedOptions
		ok   bool
	}{
		{"minimal", EmbeddedOptions{StoreDir: dir}, true},
		{"no store dir", EmbeddedOptions{}, false},
		{"last valid port", EmbeddedOptions{StoreDir: dir, Port: 65535}, true},
		{"port too large", EmbeddedOptions{StoreDir: dir, Port: 65536}, false},
		{"port below -1", EmbeddedOptions{StoreDir: dir, Port: -2}, false},
		{"leaf port too large", EmbeddedOptions{StoreDir: dir, LeafNodePort: 70000}, false},
		{"negative timeout", EmbeddedOptions{StoreDir: dir, ReadyTimeout: -time.Second}, false},
		{"remote without host", EmbeddedOptions{StoreDir: dir, LeafRemotes: []string{"nats-leaf://"}}, false},
		{"remote unparsable", EmbeddedOptions{StoreDir: dir, LeafRemotes: []string{"::bad"}}, false},
		{"remote ok", EmbeddedOptions{StoreDir: dir, LeafRemotes: []string{"nats-leaf://127.0.0.1:7422"}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := tc.o.ServerOptions()
			if tc.ok {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if opts.Host != DefaultHost || !opts.JetStream || opts.StoreDir != dir {
					t.Fatalf("defaults not applied: host=%q js=%v store=%q", opts.Host, opts.JetStream, opts.StoreDir)
				}
				return
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("err = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

func TestServerOptionsDefaults(t *testing.T) {
	opts, err := EmbeddedOptions{StoreDir: t.TempDir(), LeafNodePort: -1}.ServerOptions()
	if err != nil {
		t.Fatal(err)
	}
	if opts.Port != 4222 {
		t.Fatalf("port = %d, want NATS default 4222", opts.Port)
	}
	if opts.LeafNode.Host != DefaultHost || opts.LeafNode.Port != -1 {
		t.Fatalf("leafnode = %s:%d, want %s:-1", opts.LeafNode.Host, opts.LeafNode.Port, DefaultHost)
	}
	if !opts.NoLog || !opts.NoSigs {
		t.Fatalf("NoLog=%v NoSigs=%v, want both true", opts.NoLog, opts.NoSigs)
	}
}

func TestRunEmbeddedJetStream(t *testing.T) {
	s, err := RunEmbedded(EmbeddedOptions{Port: -1, StoreDir: t.TempDir(), LeafNodePort: -1, JetStreamDomain: "dc-x"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })

	if p := ClientPort(s); p <= 0 {
		t.Fatalf("client port = %d", p)
	}
	u, err := LeafNodeURL(s)
	if err != nil || !strings.HasPrefix(u, "nats-leaf://127.0.0.1:") {
		t.Fatalf("leafnode url = %q, %v", u, err)
	}

	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := js.AccountInfo(ctx)
	if err != nil {
		t.Fatalf("account info: %v", err)
	}
	if info.Domain != "dc-x" {
		t.Fatalf("domain = %q, want dc-x", info.Domain)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("x")); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func TestRunEmbeddedNoLeafListener(t *testing.T) {
	s, err := RunEmbedded(EmbeddedOptions{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if _, err := LeafNodeURL(s); err == nil {
		t.Fatal("LeafNodeURL succeeded without a leafnode listener")
	}
}

func TestRunEmbeddedPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	var (
		mu     sync.Mutex
		levels = map[string]int{}
	)
	start := time.Now()
	_, err = RunEmbedded(EmbeddedOptions{
		Port:         port,
		StoreDir:     t.TempDir(),
		ReadyTimeout: 30 * time.Second,
		LogWriter: LineFunc(func(level, line string) {
			mu.Lock()
			levels[level]++
			mu.Unlock()
		}),
	})
	if !errors.Is(err, ErrNotReady) {
		t.Fatalf("err = %v, want ErrNotReady", err)
	}
	// The fatal listen error must end the wait, not the ready timeout.
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("took %s: fatal error did not short-cut the ready wait", d)
	}
	if !strings.Contains(err.Error(), "listen") {
		t.Fatalf("error does not say why: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if levels["fatal"] == 0 {
		t.Fatalf("fatal line not forwarded to LogWriter: %v", levels)
	}
}
