package bridge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ErrReplay is wrapped by replay failures (no answer, bad framing).
var ErrReplay = errors.New("bridge: replay failed")

func quietLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// bindMode reports whether the bridge binds an endpoint (the engine then
// connects): the same rule vLLM applies to its own side, mirrored.
func bindMode(ep string) bool {
	return strings.Contains(ep, "*") || strings.Contains(ep, "::")
}

type recvResult struct {
	msg zmq4.Msg
	err error
}

// replayer is one engine's DEALER to its replay ROUTER. It is used by the
// source goroutine only. A request that times out closes the socket, so a
// late reply can never be mistaken for the next request's.
type replayer struct {
	ep      string
	idle    time.Duration
	overall time.Duration

	cancel context.CancelFunc
	sock   zmq4.Socket
	recv   chan recvResult
	done   chan struct{}
}

func (r *replayer) open(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	sock := zmq4.NewDealer(sctx, zmq4.WithLogger(quietLogger()), zmq4.WithDialerMaxRetries(0))
	if err := sock.Dial(guardedEndpoint(r.ep)); err != nil {
		cancel()
		_ = sock.Close()
		return fmt.Errorf("%w: dial %s: %w", ErrReplay, r.ep, err)
	}
	r.cancel, r.sock = cancel, sock
	r.recv, r.done = make(chan recvResult, 64), make(chan struct{})
	go func(recv chan<- recvResult, done chan<- struct{}) {
		defer close(done)
		for {
			msg, err := sock.Recv()
			select {
			case recv <- recvResult{msg, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}(r.recv, r.done)
	return nil
}

func (r *replayer) close() {
	if r.sock == nil {
		return
	}
	r.cancel()
	_ = r.sock.Close()
	<-r.done
	r.sock = nil
}

// request asks for every buffered batch with sequence ≥ from and calls fn
// for each, in the order received, until the end marker. It accepts both
// reply layouts (A: [empty, seq, payload]; B: [empty, topic, seq,
// payload]).
func (r *replayer) request(ctx context.Context, from uint64, fn func(seq uint64, payload []byte)) error {
	if r.sock == nil {
		if err := r.open(ctx); err != nil {
			return err
		}
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], from)
	if err := r.sock.SendMulti(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		r.close()
		return fmt.Errorf("%w: send: %w", ErrReplay, err)
	}
	deadline := time.NewTimer(r.overall)
	defer deadline.Stop()
	idle := time.NewTimer(r.idle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			r.close()
			return ctx.Err()
		case <-deadline.C:
			r.close()
			return fmt.Errorf("%w: no end marker within %v", ErrReplay, r.overall)
		case <-idle.C:
			r.close()
			return fmt.Errorf("%w: engine silent for %v", ErrReplay, r.idle)
		case res := <-r.recv:
			if res.err != nil {
				r.close()
				return fmt.Errorf("%w: receive: %w", ErrReplay, res.err)
			}
			seq, payload, end, err := parseReply(res.msg.Frames)
			if err != nil {
				r.close()
				return err
			}
			if end {
				return nil
			}
			fn(seq, payload)
			// The engine's silence is measured from here: fn may wait on
			// JetStream acknowledgements. (Reset is safe on a fired timer
			// since Go 1.23.)
			idle.Reset(r.idle)
		}
	}
}

func parseReply(frames [][]byte) (seq uint64, payload []byte, end bool, err error) {
	if len(frames) > 0 && len(frames[0]) == 0 {
		frames = frames[1:]
	}
	switch len(frames) {
	case 2: // layout A
	case 3: // layout B: drop the topic
		frames = frames[1:]
	default:
		return 0, nil, false, fmt.Errorf("%w: reply with %d frames", ErrReplay, len(frames))
	}
	if len(frames[0]) != 8 {
		return 0, nil, false, fmt.Errorf("%w: sequence frame of %d bytes", ErrReplay, len(frames[0]))
	}
	if len(frames[1]) == 0 {
		return 0, nil, true, nil
	}
	return binary.BigEndian.Uint64(frames[0]), frames[1], false, nil
}
