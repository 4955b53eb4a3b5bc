package enginetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/ckfrelay/ckfrelay/internal/engine"
)

var cleared = engine.Event{Kind: engine.KindCleared}

func TestLiveFramingAndReplayLayouts(t *testing.T) {
	for _, layout := range []ReplayLayout{LayoutA, LayoutB} {
		e, err := Start(Config{Topic: "kv@pod-a@m", Layout: layout, Format: Format{Map: true}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sub := zmq4.NewSub(ctx, zmq4.WithLogger(quietLogger()))
		if err := sub.Dial(e.PubEndpoint()); err != nil {
			t.Fatal(err)
		}
		if err := sub.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
			t.Fatal(err)
		}
		if err := e.WaitSubscribed(ctx); err != nil {
			t.Fatal(err)
		}
		e.Drop(1)
		for range 3 {
			if _, err := e.Publish(cleared); err != nil {
				t.Fatal(err)
			}
		}
		want := AppendBatch(nil, 0, 0, []engine.Event{cleared}, Format{Map: true})
		for _, seq := range []uint64{1, 2} { // 0 was dropped
			msg, err := sub.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if len(msg.Frames) != 3 || string(msg.Frames[0]) != "kv@pod-a@m" || binary.BigEndian.Uint64(msg.Frames[1]) != seq {
				t.Fatalf("live frames %q", msg.Frames)
			}
			if !bytes.Equal(msg.Frames[2][10:], want[10:]) { // past the timestamp
				t.Fatalf("payload %x", msg.Frames[2])
			}
		}
		dealer := zmq4.NewDealer(ctx, zmq4.WithLogger(quietLogger()))
		if err := dealer.Dial(e.ReplayEndpoint()); err != nil {
			t.Fatal(err)
		}
		if err := dealer.SendMulti(zmq4.NewMsgFrom([]byte{}, []byte{0, 0, 0, 0, 0, 0, 0, 0})); err != nil {
			t.Fatal(err)
		}
		for seq := uint64(0); seq <= 3; seq++ {
			msg, err := dealer.Recv()
			if err != nil {
				t.Fatal(err)
			}
			frames := msg.Frames
			if len(frames[0]) != 0 {
				t.Fatalf("reply without empty delimiter: %q", frames)
			}
			frames = frames[1:]
			if layout == LayoutB {
				if len(frames) != 3 {
					t.Fatalf("layout B reply %q", msg.Frames)
				}
				if seq < 3 && string(frames[0]) != "kv@pod-a@m" {
					t.Fatalf("layout B topic %q", frames[0])
				}
				frames = frames[1:]
			}
			if len(frames) != 2 {
				t.Fatalf("reply %q", msg.Frames)
			}
			got := binary.BigEndian.Uint64(frames[0])
			if seq == 3 {
				if got != ^uint64(0) || len(frames[1]) != 0 {
					t.Fatalf("end marker %q", msg.Frames)
				}
				continue
			}
			if got != seq || len(frames[1]) == 0 {
				t.Fatalf("replayed %d, want %d", got, seq)
			}
		}
		_ = dealer.Close()
		_ = sub.Close()
		cancel()
		e.Close()
	}
}

func TestLoseAndRestart(t *testing.T) {
	e, err := Start(Config{BufferSteps: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.Lose(1)
	for range 5 {
		if _, err := e.Publish(cleared); err != nil {
			t.Fatal(err)
		}
	}
	e.mu.Lock()
	ring := e.bufferedLocked()
	e.mu.Unlock()
	if len(ring) != 2 || ring[0].seq != 3 || ring[1].seq != 4 {
		t.Fatalf("ring %+v", ring)
	}
	ep := e.PubEndpoint()
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	if e.Sequence() != 0 || e.PubEndpoint() != ep {
		t.Fatalf("after restart seq=%d ep=%s (was %s)", e.Sequence(), e.PubEndpoint(), ep)
	}
}
