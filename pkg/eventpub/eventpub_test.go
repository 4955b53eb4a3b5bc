package eventpub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// storedPayloads reads every message of the event stream in order.
func storedPayloads(t *testing.T, ctx context.Context, js jetstream.JetStream) []string {
	t.Helper()
	s, err := js.Stream(ctx, streams.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		out = append(out, string(m.Data))
	}
	return out
}

func ensureStreams(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	if _, err := streams.Ensure(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
}

func requireInOrder(t *testing.T, got []string, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("stream holds %d messages, want exactly %d (lost or duplicated)", len(got), n)
	}
	for i, g := range got {
		if g != strconv.Itoa(i) {
			t.Fatalf("message %d is %q, want %q (out of order, lost or duplicated)", i, g, strconv.Itoa(i))
		}
	}
}

// Events published while the server is down and restarting are all
// stored once, in order, and every Publish call returns nil.
func TestEventsSurviveServerRestart(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	js := srv.JetStream(t)
	ensureStreams(t, ctx, js)
	p, err := New(js, Config{AckTimeout: 500 * time.Millisecond, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, MaxWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := wire.WorkerEventsSubject("d", "dc-a", 1)
	const n, pauseAt = 200, 50
	paused, down := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		for i := range n {
			if i == pauseAt {
				close(paused)
				<-down
			}
			if err := p.Publish(ctx, subj, []byte(strconv.Itoa(i))); err != nil {
				errs <- fmt.Errorf("publish %d: %w", i, err)
				return
			}
		}
		errs <- nil
	}()
	<-paused
	srv.Shutdown()
	close(down)
	// The publisher is now failing against a dead server: restart only
	// once it has retried, so the outage really overlapped a publish.
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if p.Stats().Retries == 0 {
			return errors.New("no retry yet")
		}
		return nil
	})
	srv.Restart(t)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	requireInOrder(t, storedPayloads(t, ctx, js), n)
	if st := p.Stats(); st.Published != n || st.Failed != 0 {
		t.Fatalf("stats %+v, want %d published and none failed", st, n)
	}
}

// A message whose ack is lost after the stream stored it is sent again
// with the same Nats-Msg-Id, and JetStream keeps one copy.
func TestLostAckIsNotStoredTwice(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	js := srv.JetStream(t)
	ensureStreams(t, ctx, js)
	p, err := New(js, Config{InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p.lostAck = func(attempt int) bool { return attempt == 1 }
	const n = 20
	for i := range n {
		ev := []routerevent.RouterEvent{{WorkerID: 7, Event: routerevent.KvCacheEvent{EventID: uint64(i), Data: routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{}}}}}
		if err := p.PublishEvents(ctx, "d", "dc-a", 7, ev); err != nil {
			t.Fatal(err)
		}
	}
	got := storedPayloads(t, ctx, js)
	if len(got) != n {
		t.Fatalf("stream holds %d messages, want %d: a retried message was stored twice", len(got), n)
	}
	if st := p.Stats(); st.Duplicates != n || st.Retries != n {
		t.Fatalf("stats %+v, want %d retries each acknowledged as a duplicate", st, n)
	}
}

// With the stream unreachable for longer than MaxWait, Publish returns a
// clear, typed error instead of blocking or dropping the event silently.
func TestUnreachableStreamGivesClearError(t *testing.T) {
	ctx := testCtx(t)
	srv := testenv.StartServer(t)
	js := srv.JetStream(t)
	ensureStreams(t, ctx, js)
	p, err := New(js, Config{AckTimeout: 100 * time.Millisecond, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxWait: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	start := time.Now()
	err = p.Publish(ctx, "kvevents.d.dc-a.1", []byte("x"))
	var pe *PublishError
	if !errors.Is(err, ErrUnacknowledged) || !errors.As(err, &pe) || pe.Attempts < 2 {
		t.Fatalf("err %v, want a *PublishError wrapping ErrUnacknowledged after several attempts", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("gave up after %s, want about MaxWait", took)
	}
	if p.Stats().Failed != 1 {
		t.Fatalf("stats %+v, want one failure", p.Stats())
	}
}

func TestInvalidConfig(t *testing.T) {
	if _, err := New(nil, Config{InitialBackoff: time.Second, MaxBackoff: time.Millisecond}); err == nil {
		t.Fatal("MaxBackoff < InitialBackoff accepted")
	}
}
