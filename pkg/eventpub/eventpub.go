// Package eventpub publishes worker KV events into the relays' input
// stream (KVEVENTS) so that none can vanish silently: every message waits
// for its JetStream acknowledgement, carries a de-duplication id
// (Nats-Msg-Id) that is reused when it is sent again, and is retried with
// backoff while the stream is unreachable, up to a bound after which the
// caller gets a clear error.
//
// Core NATS publishing (nats.Conn.Publish) is fire-and-forget: an event
// published while the stream is down, or while the connection reconnects,
// is lost without an error, and the relay's exact state silently diverges
// from the worker's cache. Use this package for workers (and simulators)
// whose events must all reach the index.
//
// Concurrency: a Publisher is safe for concurrent use, but it publishes one
// message at a time (each waits for its ack) so a worker's events are
// stored in the order it published them: a retried message can never land
// after a later one.
package eventpub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// Defaults of Config.
const (
	DefaultAckTimeout     = 2 * time.Second
	DefaultInitialBackoff = 50 * time.Millisecond
	DefaultMaxBackoff     = 2 * time.Second
	DefaultMaxWait        = 30 * time.Second
)

// ErrUnacknowledged is wrapped by the error of a message that did not get
// an acknowledgement within Config.MaxWait.
var ErrUnacknowledged = errors.New("eventpub: event not acknowledged by JetStream")

// PublishError describes a message that was given up on. It wraps
// ErrUnacknowledged and the last publish error.
type PublishError struct {
	Subject  string
	MsgID    string
	Attempts int
	Waited   time.Duration
	Err      error
}

func (e *PublishError) Error() string {
	return fmt.Sprintf("%v: %s (id %s) after %d attempts in %s: %v", ErrUnacknowledged, e.Subject, e.MsgID, e.Attempts, e.Waited.Round(time.Millisecond), e.Err)
}

// Unwrap returns ErrUnacknowledged and the last publish error.
func (e *PublishError) Unwrap() []error { return []error{ErrUnacknowledged, e.Err} }

// Config tunes retries. The zero value uses the defaults.
type Config struct {
	// AckTimeout bounds one attempt (publish + ack).
	AckTimeout time.Duration
	// InitialBackoff and MaxBackoff bound the doubling wait between
	// attempts.
	InitialBackoff, MaxBackoff time.Duration
	// MaxWait bounds the time spent on one message before Publish returns
	// a *PublishError.
	MaxWait time.Duration
	// IDPrefix starts every message id (default: a random NUID, so two
	// publishers, or two runs of one, never share ids).
	IDPrefix string
}

func (c *Config) defaults() error {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.AckTimeout, DefaultAckTimeout)
	set(&c.InitialBackoff, DefaultInitialBackoff)
	set(&c.MaxBackoff, DefaultMaxBackoff)
	set(&c.MaxWait, DefaultMaxWait)
	if c.AckTimeout < 0 || c.InitialBackoff < 0 || c.MaxBackoff < c.InitialBackoff || c.MaxWait < 0 {
		return fmt.Errorf("eventpub: invalid config: durations must be positive and MaxBackoff ≥ InitialBackoff")
	}
	if c.IDPrefix == "" {
		c.IDPrefix = nuid.Next()
	}
	return nil
}

// Stats are a publisher's counters.
type Stats struct {
	// Published counts acknowledged messages.
	Published uint64
	// Retries counts attempts after the first.
	Retries uint64
	// Duplicates counts acks saying the stream already held the message
	// (an earlier attempt was stored but its ack was lost).
	Duplicates uint64
	// Failed counts messages given up on.
	Failed uint64
}

// Publisher publishes with acknowledgements and de-duplication ids.
type Publisher struct {
	js  jetstream.JetStream
	cfg Config

	mu  sync.Mutex // serialises publishes (ordering) and guards seq
	seq uint64

	published, retries, duplicates, failed atomic.Uint64
	// lostAck, when set by a test, discards the ack of an attempt that
	// succeeded, as if it had been lost on the way back.
	lostAck func(attempt int) bool
}

// New returns a publisher over js.
func New(js jetstream.JetStream, cfg Config) (*Publisher, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Publisher{js: js, cfg: cfg}, nil
}

// Stats returns a snapshot of the counters.
func (p *Publisher) Stats() Stats {
	return Stats{Published: p.published.Load(), Retries: p.retries.Load(), Duplicates: p.duplicates.Load(), Failed: p.failed.Load()}
}

// PublishEvents publishes one worker's events as a JSON array on
// kvevents.<domain>.<dc>.<worker> (the format relays consume).
func (p *Publisher) PublishEvents(ctx context.Context, domain, dc string, worker uint64, events []routerevent.RouterEvent) error {
	subj, err := wire.WorkerEventsSubject(domain, dc, worker)
	if err != nil {
		return err
	}
	b, err := json.Marshal(events)
	if err != nil {
		return fmt.Errorf("eventpub: encode events: %w", err)
	}
	return p.Publish(ctx, subj, b)
}

// Publish stores data on subject and returns once JetStream acknowledged
// it. Failed attempts are retried with the same message id, so a message
// whose ack was lost is stored once. It returns a *PublishError after
// Config.MaxWait, or ctx's error when ctx ends first.
func (p *Publisher) Publish(ctx context.Context, subject string, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	id := p.cfg.IDPrefix + "-" + strconv.FormatUint(p.seq, 10)
	start := time.Now()
	backoff := p.cfg.InitialBackoff
	var last error
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			p.retries.Add(1)
		}
		actx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
		msg := &nats.Msg{Subject: subject, Data: data}
		ack, err := p.js.PublishMsg(actx, msg, jetstream.WithMsgID(id))
		cancel()
		if err == nil && p.lostAck != nil && p.lostAck(attempt) {
			err = fmt.Errorf("test: ack of attempt %d discarded: %w", attempt, context.DeadlineExceeded)
		}
		if err == nil {
			p.published.Add(1)
			if ack.Duplicate {
				p.duplicates.Add(1)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("eventpub: publish %s: %w", subject, ctx.Err())
		}
		last = err
		if !retryable(err) {
			p.failed.Add(1)
			return &PublishError{Subject: subject, MsgID: id, Attempts: attempt, Waited: time.Since(start), Err: err}
		}
		waited := time.Since(start)
		if waited+backoff > p.cfg.MaxWait {
			p.failed.Add(1)
			return &PublishError{Subject: subject, MsgID: id, Attempts: attempt, Waited: waited, Err: last}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("eventpub: publish %s: %w", subject, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, p.cfg.MaxBackoff)
	}
}

// retryable reports whether err may go away by itself (stream or server
// unreachable, reconnecting, timeout). A refused publish (permissions,
// message too large, no stream for the subject on a live server is still
// retried: the stream may be being recreated) is not retried.
func retryable(err error) bool {
	switch {
	case errors.Is(err, nats.ErrPermissionViolation), errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrConnectionClosed):
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != 404 && apiErr.Code != 408 {
		// e.g. 400 bad request, 413 too large: sending it again cannot help.
		return false
	}
	return true
}
