package enginetest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/ckfrelay/ckfrelay/internal/engine"
)

// ReplayLayout selects the replay reply framing (docs/engine-kv-events.md §1.3).
type ReplayLayout uint8

const (
	// LayoutA is [empty, seq, payload] (vLLM before PR #45177, SGLang).
	LayoutA ReplayLayout = iota
	// LayoutB is [empty, topic, seq, payload] (vLLM with PR #45177).
	LayoutB
)

// Config configures a fake engine.
type Config struct {
	// PubEndpoint is where the PUB socket binds; "" = tcp://127.0.0.1:0.
	PubEndpoint string
	// ReplayEndpoint is where the replay ROUTER binds; "" = a random
	// local port; "-" disables replay.
	ReplayEndpoint string
	Topic          string
	Format         Format
	Layout         ReplayLayout
	// BufferSteps is how many batches replay keeps (0 = vLLM's 10000).
	BufferSteps int
	DPRank      int64
	// Clock stamps batches (nil = time.Now).
	Clock func() time.Time
}

type buffered struct {
	seq     uint64
	payload []byte
}

// Engine is a fake vLLM engine. Publish, Drop, Lose, Restart and Close
// may be called from any goroutine; batches are published in call order.
type Engine struct {
	cfg Config

	mu        sync.Mutex // serialises publishing, replay serving and restarts
	pub       zmq4.Socket
	router    zmq4.Socket
	pubEP     string
	replayEP  string
	cancel    context.CancelFunc
	served    chan struct{}
	seq       uint64
	ring      []buffered // circular once full; head is the oldest
	head      int
	drop      int
	lose      int
	sent      uint64
	replays   int
	closed    bool
	encodeBuf []byte
}

// Start binds the sockets and returns the engine.
func Start(cfg Config) (*Engine, error) {
	if cfg.PubEndpoint == "" {
		cfg.PubEndpoint = "tcp://127.0.0.1:0"
	}
	if cfg.ReplayEndpoint == "" {
		cfg.ReplayEndpoint = "tcp://127.0.0.1:0"
	}
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = 10000
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	e := &Engine{cfg: cfg}
	if err := e.bind(cfg.PubEndpoint, cfg.ReplayEndpoint); err != nil {
		return nil, err
	}
	return e, nil
}

// bind opens both sockets; the first bind resolves port 0 and later
// restarts rebind the same addresses.
func (e *Engine) bind(pubEP, replayEP string) error {
	ctx, cancel := context.WithCancel(context.Background())
	pub := zmq4.NewPub(ctx, zmq4.WithLogger(quietLogger()))
	if err := listenRetry(pub, pubEP); err != nil {
		cancel()
		_ = pub.Close()
		return fmt.Errorf("enginetest: pub: %w", err)
	}
	e.pub, e.pubEP, e.cancel = pub, endpointOf(pub.Addr()), cancel
	e.served = make(chan struct{})
	if replayEP == "-" {
		close(e.served)
		return nil
	}
	router := zmq4.NewRouter(ctx, zmq4.WithLogger(quietLogger()))
	if err := listenRetry(router, replayEP); err != nil {
		cancel()
		_ = pub.Close()
		_ = router.Close()
		return fmt.Errorf("enginetest: replay: %w", err)
	}
	e.router, e.replayEP = router, endpointOf(router.Addr())
	go e.serveReplay(router, e.served)
	return nil
}

// listenRetry rebinds through a short window in which the previous
// incarnation's listener is still being torn down.
func listenRetry(s zmq4.Socket, ep string) error {
	var err error
	for range 50 {
		if err = s.Listen(ep); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

func quietLogger() *log.Logger { return log.New(io.Discard, "", 0) }

func endpointOf(a net.Addr) string { return "tcp://" + a.String() }

// PubEndpoint is the live endpoint a bridge connects to.
func (e *Engine) PubEndpoint() string { e.mu.Lock(); defer e.mu.Unlock(); return e.pubEP }

// ReplayEndpoint is the replay endpoint ("" when disabled).
func (e *Engine) ReplayEndpoint() string { e.mu.Lock(); defer e.mu.Unlock(); return e.replayEP }

// Sequence is the sequence number the next batch will get.
func (e *Engine) Sequence() uint64 { e.mu.Lock(); defer e.mu.Unlock(); return e.seq }

// Replays counts replay requests served.
func (e *Engine) Replays() int { e.mu.Lock(); defer e.mu.Unlock(); return e.replays }

// Subscribed reports whether at least one subscriber is connected with a
// subscription (so a live publish is not lost to the slow-joiner window).
func (e *Engine) Subscribed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.pub.(interface{ Topics() []string })
	return ok && len(t.Topics()) > 0
}

// WaitSubscribed waits until Subscribed or ctx ends.
func (e *Engine) WaitSubscribed(ctx context.Context) error {
	for !e.Subscribed() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Buffered returns the payload of a batch still in the replay buffer.
func (e *Engine) Buffered(seq uint64) ([]byte, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range e.ring {
		if b.seq == seq && b.payload != nil {
			return b.payload, true
		}
	}
	return nil, false
}

// Drop makes the next n batches get sequence numbers and enter the replay
// buffer without being sent live (a subscriber over its high-water mark).
func (e *Engine) Drop(n int) { e.mu.Lock(); e.drop += n; e.mu.Unlock() }

// Lose makes the next n batches consume a sequence number and vanish (an
// encoding failure: never sent, never buffered).
func (e *Engine) Lose(n int) { e.mu.Lock(); e.lose += n; e.mu.Unlock() }

// Publish encodes events as one batch and publishes it, returning its
// sequence number.
func (e *Engine) Publish(events ...engine.Event) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.encodeBuf = AppendBatch(e.encodeBuf[:0], float64(e.cfg.Clock().UnixNano())/1e9, e.cfg.DPRank, events, e.cfg.Format)
	return e.publishLocked(e.encodeBuf)
}

// PublishRaw publishes an already encoded payload as the next batch.
func (e *Engine) PublishRaw(payload []byte) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.publishLocked(payload)
}

func (e *Engine) publishLocked(payload []byte) (uint64, error) {
	if e.closed {
		return 0, errors.New("enginetest: engine closed")
	}
	// zmq4's PUB queues the message and sends it later: it must own the
	// bytes (the ring shares them; neither is ever modified).
	payload = append([]byte(nil), payload...)
	seq := e.seq
	e.seq++
	if e.lose > 0 {
		e.lose--
		return seq, nil
	}
	if e.router != nil {
		if len(e.ring) < e.cfg.BufferSteps {
			e.ring = append(e.ring, buffered{seq: seq, payload: payload})
		} else {
			e.ring[e.head] = buffered{seq: seq, payload: payload}
			e.head = (e.head + 1) % len(e.ring)
		}
	}
	if e.drop > 0 {
		e.drop--
		return seq, nil
	}
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	if err := e.pub.SendMulti(zmq4.NewMsgFrom([]byte(e.cfg.Topic), s[:], payload)); err != nil {
		return seq, fmt.Errorf("enginetest: publish %d: %w", seq, err)
	}
	e.sent++
	return seq, nil
}

// serveReplay answers DEALER requests [empty, start] (the ROUTER sees the
// identity first) with every buffered batch ≥ start, then the end marker.
func (e *Engine) serveReplay(router zmq4.Socket, done chan struct{}) {
	defer close(done)
	for {
		msg, err := router.Recv()
		if err != nil {
			if errors.Is(err, context.Canceled) || isClosed(err) {
				return
			}
			continue
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 || len(msg.Frames[2]) != 8 {
			continue // vLLM logs and sends nothing
		}
		start := binary.BigEndian.Uint64(msg.Frames[2])
		id := msg.Frames[0]
		e.mu.Lock()
		e.replays++
		ring := e.bufferedLocked()
		topic := e.cfg.Topic
		layout := e.cfg.Layout
		// Hold the lock while replying: vLLM serves replay between two
		// publishes, so live batches never interleave with a reply.
		for _, b := range ring {
			if b.seq < start {
				continue
			}
			var s [8]byte
			binary.BigEndian.PutUint64(s[:], b.seq)
			_ = router.SendMulti(replyMsg(id, layout, topic, s[:], b.payload))
		}
		end := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		_ = router.SendMulti(replyMsg(id, layout, "", end, nil))
		e.mu.Unlock()
	}
}

// bufferedLocked returns the replay buffer oldest first.
func (e *Engine) bufferedLocked() []buffered {
	out := make([]buffered, 0, len(e.ring))
	out = append(out, e.ring[e.head:]...)
	return append(out, e.ring[:e.head]...)
}

func replyMsg(id []byte, layout ReplayLayout, topic string, seq, payload []byte) zmq4.Msg {
	if payload == nil {
		payload = []byte{}
	}
	if layout == LayoutB {
		return zmq4.NewMsgFrom(id, []byte{}, []byte(topic), seq, payload)
	}
	return zmq4.NewMsgFrom(id, []byte{}, seq, payload)
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "closed")
}

// Restart emulates an engine process restart: the sockets close (so
// subscribers see the connection drop), the sequence restarts at 0 and
// the replay buffer is empty; the same endpoints are bound again.
func (e *Engine) Restart() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closeSockets()
	e.seq, e.ring, e.head, e.drop, e.lose = 0, nil, 0, 0, 0
	replay := e.replayEP
	if e.router == nil {
		replay = "-"
	}
	e.router = nil
	return e.bind(e.pubEP, replay)
}

func (e *Engine) closeSockets() {
	e.cancel()
	_ = e.pub.Close()
	if e.router != nil {
		_ = e.router.Close()
		// serveReplay takes e.mu per request; we hold it, so do not wait
		// for it here: it exits on its next Recv error.
	}
}

// Close stops the engine.
func (e *Engine) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	e.closeSockets()
	served := e.served
	e.mu.Unlock()
	<-served
}
