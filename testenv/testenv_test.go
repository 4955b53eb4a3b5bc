package testenv

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStartServerRestartKeepsJetStreamState(t *testing.T) {
	ctx := testCtx(t)
	s := StartServer(t)
	url := s.URL()
	js := s.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep.>"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, "keep.x", fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}

	s.Restart(t)
	if s.URL() != url {
		t.Fatalf("url after restart = %s, want %s", s.URL(), url)
	}
	// The old connection reconnects to the same port; JetStream state is on
	// disk. Each attempt gets its own deadline: a request in flight while
	// the connection dropped never gets a reply.
	Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "KEEP")
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 3 {
			return fmt.Errorf("stream has %d messages, want 3", info.State.Msgs)
		}
		return nil
	})
}

func TestShutdownIsIdempotent(t *testing.T) {
	s := StartServer(t)
	nc := s.Connect(t)
	s.Shutdown()
	s.Shutdown()
	if s.NATS().Running() {
		t.Fatal("server still running after Shutdown")
	}
	if err := nc.Publish("x", nil); err == nil {
		// Publishing buffers while reconnecting; flush must fail.
		if err := nc.FlushTimeout(200 * time.Millisecond); err == nil {
			t.Fatal("flush succeeded against a stopped server")
		}
	}
}

func TestLeafMessageReachesHub(t *testing.T) {
	tp := StartHubWithLeaves(t, "dc-a", "dc-b")
	hubNC := tp.Hub().Connect(t)
	sub, err := hubNC.SubscribeSync("ckf.test.dc-a.delta")
	if err != nil {
		t.Fatal(err)
	}
	if err := hubNC.Flush(); err != nil {
		t.Fatal(err)
	}
	// Wait until the hub's interest has propagated to the leaf, so the
	// publish below cannot race it.
	leaf := tp.Leaf(t, "dc-a")
	Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !leaf.NATS().GlobalAccount().SubscriptionInterest("ckf.test.dc-a.delta") {
			return errors.New("no interest on leaf yet")
		}
		return nil
	})

	leafNC := leaf.Connect(t)
	if err := leafNC.Publish("ckf.test.dc-a.delta", []byte("hello from dc-a")); err != nil {
		t.Fatal(err)
	}
	if err := leafNC.Flush(); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("hub did not receive the leaf message: %v", err)
	}
	if string(msg.Data) != "hello from dc-a" {
		t.Fatalf("payload = %q", msg.Data)
	}
}

func TestDCDomainReachableFromHub(t *testing.T) {
	ctx := testCtx(t)
	tp := StartHubWithLeaves(t, "dc-a")
	if got := tp.DCs(); len(got) != 1 || got[0] != "dc-a" {
		t.Fatalf("DCs = %q", got)
	}
	leafJS := tp.Leaf(t, "dc-a").JetStream(t)
	if _, err := leafJS.CreateStream(ctx, jetstream.StreamConfig{Name: "LANE", Subjects: []string{"ckf.d.dc-a.>"}}); err != nil {
		t.Fatalf("create stream in dc-a: %v", err)
	}
	if _, err := leafJS.Publish(ctx, "ckf.d.dc-a.delta", []byte("local")); err != nil {
		t.Fatalf("publish in dc-a: %v", err)
	}

	hubNC := tp.Hub().Connect(t)
	remote, err := jetstream.NewWithDomain(hubNC, "dc-a")
	if err != nil {
		t.Fatal(err)
	}
	// Reach dc-a's JetStream API from the hub; the domain import may need a
	// moment after the leaf connection is counted.
	var stream jetstream.Stream
	Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var err error
		stream, err = remote.Stream(ctx, "LANE")
		return err
	})
	msg, err := stream.GetLastMsgForSubject(ctx, "ckf.d.dc-a.delta")
	if err != nil {
		t.Fatalf("get from hub: %v", err)
	}
	if string(msg.Data) != "local" {
		t.Fatalf("payload = %q, want local", msg.Data)
	}
	info, err := remote.AccountInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Domain != "dc-a" {
		t.Fatalf("remote domain = %q, want dc-a", info.Domain)
	}

	// The hub's own domain does not hold the DC's stream.
	hubJS, err := jetstream.New(hubNC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hubJS.Stream(ctx, "LANE"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("hub domain stream lookup err = %v, want ErrStreamNotFound", err)
	}
	hubInfo, err := hubJS.AccountInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if hubInfo.Domain != HubDomain {
		t.Fatalf("hub domain = %q, want %q", hubInfo.Domain, HubDomain)
	}
}

func TestHubRestartLeavesReconnect(t *testing.T) {
	tp := StartHubWithLeaves(t, "dc-a")
	tp.Hub().Restart(t)
	tp.WaitLeavesConnected(t)
}

func TestConnectOptionsApply(t *testing.T) {
	s := StartServer(t)
	nc := s.Connect(t, nats.Name("probe"))
	if nc.Opts.Name != "probe" {
		t.Fatalf("name = %q", nc.Opts.Name)
	}
}

func TestGoroutinesListsTheCaller(t *testing.T) {
	if s := Goroutines(); !strings.Contains(s, "TestGoroutinesListsTheCaller") {
		t.Fatalf("stacks lack the calling test:\n%s", s)
	}
}

// fatalTB records a Fatalf and ends its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	WaitFor(t, time.Second, "third call", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
}

func TestWaitForFailsWithWhatAfterTheDeadline(t *testing.T) {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		WaitFor(f, 50*time.Millisecond, "the moon turned blue", func() bool { return false })
	}()
	<-done
	if !strings.Contains(f.msg, "the moon turned blue") || !strings.Contains(f.msg, "50ms") {
		t.Fatalf("failure message %q", f.msg)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("gave up before the deadline")
	}
}

// cleanupTB keeps the cleanups and the Errorf messages of the code under
// test, so a test can run them and read them.
type cleanupTB struct {
	testing.TB
	cleanups []func()
	errs     []string
}

func (c *cleanupTB) Cleanup(f func()) { c.cleanups = append(c.cleanups, f) }
func (c *cleanupTB) Errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func TestBackgroundCancelsRunWhenTheTestEndsAndReportsItsError(t *testing.T) {
	for _, tc := range []struct {
		ret     error
		wantErr bool
	}{{context.Canceled, false}, {nil, false}, {errors.New("boom"), true}} {
		c := &cleanupTB{TB: t}
		stopped := make(chan struct{})
		Background(c, func(ctx context.Context) error {
			<-ctx.Done()
			close(stopped)
			return tc.ret
		})
		select {
		case <-stopped:
			t.Fatal("run stopped before the test ended")
		case <-time.After(10 * time.Millisecond):
		}
		for _, f := range c.cleanups {
			f()
		}
		<-stopped
		if got := len(c.errs) != 0; got != tc.wantErr {
			t.Errorf("run returned %v: errors %q, want some: %v", tc.ret, c.errs, tc.wantErr)
		}
	}
}
