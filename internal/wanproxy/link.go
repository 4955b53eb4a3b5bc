package wanproxy

import (
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Route forwards connections accepted on Listen to Target.
type Route struct {
	Listen string `json:"listen"`
	Target string `json:"target"`
}

// ParseRoutes reads "listen=target,listen=target", e.g.
// "0.0.0.0:7422=nats-hub-1:7422,0.0.0.0:7423=nats-hub-2:7422".
func ParseRoutes(s string) ([]Route, error) {
	var out []Route
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		l, t, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, invalid("route", kv, "want listen=target")
		}
		for _, a := range []string{l, t} {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, invalid("route", kv, err.Error())
			}
		}
		out = append(out, Route{Listen: l, Target: t})
	}
	if len(out) == 0 {
		return nil, invalid("route", s, "no route")
	}
	return out, nil
}

// Config configures a link.
type Config struct {
	// Name names the link in logs and in its status (e.g. the DC).
	Name   string
	Routes []Route
	// DialTimeout bounds dialling a target (default 5s).
	DialTimeout time.Duration
	// QueueBytes bounds the bytes read but not yet written, per direction
	// of each connection (default 16 MiB): past it the proxy stops reading,
	// so TCP's own flow control pushes back on the sender. It must hold a
	// delayed window: rate × delay. A capped direction holds less: what is
	// in flight at its rate over its delay plus CapBuffer, as a router's
	// queue would, so a sender faster than the cap is slowed by TCP rather
	// than buffered here for seconds.
	QueueBytes int
	Log        zerolog.Logger
}

// Stats are a link's counters.
type Stats struct {
	OpenConns int64 `json:"open_conns"`
	// Queued is the bytes read and not yet written, over all connections.
	Queued     int64 `json:"queued_bytes"`
	Accepted   int64 `json:"accepted"`
	Refused    int64 `json:"refused"`
	DialErrors int64 `json:"dial_errors"`
	Resets     int64 `json:"resets"`
	BytesUp    int64 `json:"bytes_up"`
	BytesDown  int64 `json:"bytes_down"`
}

// Link is one WAN link: its routes share one set of toxics.
type Link struct {
	cfg Config
	lns []net.Listener

	mu      sync.Mutex
	toxics  Toxics
	stallCh chan struct{} // closed by Heal; nil while flowing
	conns   map[*pair]struct{}
	closed  bool

	pacers [2]pacer
	wg     sync.WaitGroup

	accepted, refused, dialErrors, resets, queued atomic.Int64
	bytes                                         [2]atomic.Int64
}

// New listens on every route's address. Serve is not needed: connections
// are accepted from here on, until Close.
func New(cfg Config) (*Link, error) {
	if len(cfg.Routes) == 0 {
		return nil, invalid("route", "", "no route")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 16 << 20
	}
	l := &Link{cfg: cfg, conns: map[*pair]struct{}{}}
	for i, r := range cfg.Routes {
		ln, err := net.Listen("tcp", r.Listen)
		if err != nil {
			for _, o := range l.lns {
				o.Close()
			}
			return nil, err
		}
		l.lns = append(l.lns, ln)
		cfg.Routes[i].Listen = ln.Addr().String()
	}
	for i, ln := range l.lns {
		l.wg.Add(1)
		go l.accept(ln, cfg.Routes[i].Target)
	}
	return l, nil
}

// Name is the link's name.
func (l *Link) Name() string { return l.cfg.Name }

// Routes returns the routes with their bound listen addresses.
func (l *Link) Routes() []Route { return append([]Route(nil), l.cfg.Routes...) }

// Toxics returns the current impairment.
func (l *Link) Toxics() Toxics {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.toxics
}

// Stats returns the counters.
func (l *Link) Stats() Stats {
	l.mu.Lock()
	open := int64(len(l.conns))
	l.mu.Unlock()
	return Stats{
		OpenConns: open, Queued: l.queued.Load(), Accepted: l.accepted.Load(), Refused: l.refused.Load(),
		DialErrors: l.dialErrors.Load(), Resets: l.resets.Load(),
		BytesUp: l.bytes[Up].Load(), BytesDown: l.bytes[Down].Load(),
	}
}

// SetLatency sets the latency of the given directions; chunks already
// queued keep the delay they were given.
func (l *Link) SetLatency(lat Latency, dirs ...Direction) error {
	if err := lat.Validate(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range dirs {
		l.toxics.dir(d).Latency = lat
	}
	return nil
}

// SetBandwidth caps the given directions at bytesPerSecond (0 lifts it).
func (l *Link) SetBandwidth(bytesPerSecond int64, dirs ...Direction) error {
	if bytesPerSecond < 0 {
		return invalid("bandwidth", "", "bytes per second must be ≥ 0")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range dirs {
		l.toxics.dir(d).BytesPerSecond = bytesPerSecond
		l.pacers[d].setRate(bytesPerSecond)
	}
	return nil
}

// Reset closes every open connection with a TCP RST on both sides and
// returns how many it closed.
func (l *Link) Reset() int {
	ps := l.snapshot()
	for _, p := range ps {
		p.teardown(true)
	}
	l.resets.Add(int64(len(ps)))
	l.cfg.Log.Info().Int("conns", len(ps)).Msg("reset")
	return len(ps)
}

// Stall stops forwarding in both directions without closing anything,
// until Heal. A positive timeout closes each connection still stalled that
// long after the stall began (or after its accept, for later ones).
func (l *Link) Stall(timeout time.Duration) error {
	if timeout < 0 {
		return invalid("stall", timeout.String(), "timeout must be ≥ 0")
	}
	l.mu.Lock()
	if l.stallCh == nil {
		l.stallCh = make(chan struct{})
	}
	l.toxics.Stalled, l.toxics.StallTimeout = true, Duration(timeout)
	ch := l.stallCh
	ps := l.snapshotLocked()
	l.mu.Unlock()
	if timeout > 0 {
		for _, p := range ps {
			l.closeIfStillStalled(p, ch, timeout)
		}
	}
	l.cfg.Log.Info().Dur("timeout_ms", timeout).Msg("stall")
	return nil
}

// closeIfStillStalled closes p when the stall ch is still on after d.
func (l *Link) closeIfStillStalled(p *pair, ch chan struct{}, d time.Duration) {
	time.AfterFunc(d, func() {
		select {
		case <-ch: // healed
		default:
			p.teardown(false)
		}
	})
}

// Cut closes every open connection and refuses new ones until Heal.
func (l *Link) Cut() {
	l.mu.Lock()
	l.toxics.Cut = true
	ps := l.snapshotLocked()
	l.mu.Unlock()
	for _, p := range ps {
		p.teardown(false)
	}
	l.cfg.Log.Info().Int("conns", len(ps)).Msg("cut")
}

// Heal ends a cut and a stall: new connections are accepted again and
// stalled bytes flow on.
func (l *Link) Heal() {
	l.mu.Lock()
	l.toxics.Cut, l.toxics.Stalled, l.toxics.StallTimeout = false, false, 0
	if l.stallCh != nil {
		close(l.stallCh)
		l.stallCh = nil
	}
	l.mu.Unlock()
	l.cfg.Log.Info().Msg("heal")
}

// Clear lifts every toxic: no latency, no cap, no stall, no cut.
func (l *Link) Clear() {
	l.Heal()
	_ = l.SetLatency(Latency{}, Up, Down)
	_ = l.SetBandwidth(0, Up, Down)
}

// Close stops listening, closes every connection and waits for the
// link's goroutines.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	ps := l.snapshotLocked()
	l.mu.Unlock()
	for _, ln := range l.lns {
		ln.Close()
	}
	for _, p := range ps {
		p.teardown(false)
	}
	l.wg.Wait()
	return nil
}

func (l *Link) snapshot() []*pair {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshotLocked()
}

func (l *Link) snapshotLocked() []*pair {
	ps := make([]*pair, 0, len(l.conns))
	for p := range l.conns {
		ps = append(ps, p)
	}
	return ps
}

// stallWait returns a channel closed when the stall ends, nil when data
// may flow.
func (l *Link) stallWait() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stallCh == nil {
		return nil
	}
	return l.stallCh
}

func (l *Link) latency(d Direction) Latency {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.toxics.dir(d).Latency
}

func (l *Link) accept(ln net.Listener, target string) {
	defer l.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		l.mu.Lock()
		refuse := l.toxics.Cut || l.closed
		l.mu.Unlock()
		if refuse {
			l.refused.Add(1)
			abort(c)
			continue
		}
		l.accepted.Add(1)
		l.wg.Add(1)
		go l.serve(c, target)
	}
}

// abort closes c with an RST rather than a FIN.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// serve dials the target for one accepted connection and forwards both
// ways until either side ends or the link tears the pair down.
func (l *Link) serve(client net.Conn, target string) {
	defer l.wg.Done()
	up, err := net.DialTimeout("tcp", target, l.cfg.DialTimeout)
	if err != nil {
		l.dialErrors.Add(1)
		l.cfg.Log.Debug().Err(err).Str("addr", target).Msg("dial target")
		abort(client)
		return
	}
	p := &pair{client: client, target: up, done: make(chan struct{})}
	l.mu.Lock()
	if l.closed || l.toxics.Cut {
		l.mu.Unlock()
		p.teardown(false)
		return
	}
	l.conns[p] = struct{}{}
	stall, timeout := l.stallCh, time.Duration(l.toxics.StallTimeout)
	l.mu.Unlock()
	if stall != nil && timeout > 0 {
		l.closeIfStillStalled(p, stall, timeout)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.pipe(Up, p, client, up) }()
	go func() { defer wg.Done(); l.pipe(Down, p, up, client) }()
	wg.Wait()
	p.teardown(false)
	l.mu.Lock()
	delete(l.conns, p)
	l.mu.Unlock()
}

// pair is one proxied connection: the accepted side and the dialled one.
type pair struct {
	client, target net.Conn
	once           sync.Once
	done           chan struct{}
}

// teardown closes both sides once (rst: with an RST) and wakes the pipes.
func (p *pair) teardown(rst bool) {
	p.once.Do(func() {
		close(p.done)
		if rst {
			abort(p.client)
			abort(p.target)
			return
		}
		p.client.Close()
		p.target.Close()
	})
}

// chunk is what one read returned, with the time it may be written.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe forwards src to dst in direction d: a reader goroutine stamps every
// chunk with its due time and queues it (bounded by QueueBytes), this
// goroutine writes each one when due, paced by the direction's cap and
// held while the link is stalled. At src's EOF, dst gets a FIN once the
// queue is written (a half close, as TCP allows).
func (l *Link) pipe(d Direction, p *pair, src, dst net.Conn) {
	q := newQueue(func() int { return l.queueLimit(d) }, &l.queued)
	read := make(chan struct{})
	defer func() { <-read }() // src is at its end or closed by teardown
	go func() {
		defer close(read)
		defer q.finish()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				now := time.Now()
				if !q.push(chunk{b: append([]byte(nil), buf[:n]...), due: now.Add(l.latency(d).sample())}) {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	// Wake the queue when the pair is torn down; at the end, drop what is
	// left in it (and wake a reader waiting for room).
	defer q.abort()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-p.done:
			q.abort()
		case <-stop:
		}
	}()
	var last time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sleep := func(w time.Duration) bool {
		if w <= 0 {
			return true
		}
		timer.Reset(w)
		select {
		case <-timer.C:
			return true
		case <-p.done:
			return false
		}
	}
	for {
		c, ok := q.pop()
		if !ok {
			break
		}
		// In order: never before the previous chunk.
		due := c.due
		if due.Before(last) {
			due = last
		}
		last = due
		if !sleep(time.Until(due)) {
			return
		}
		for b := c.b; len(b) > 0; {
			if !l.flowing(p) {
				return
			}
			n := min(len(b), l.pacers[d].piece())
			if !sleep(l.pacers[d].reserve(n, time.Now())) || !l.flowing(p) {
				return
			}
			w, err := dst.Write(b[:n])
			l.bytes[d].Add(int64(w))
			if err != nil {
				p.teardown(false)
				return
			}
			b = b[n:]
		}
	}
	select {
	case <-p.done:
		return
	default:
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		p.teardown(false)
	}
}

// flowing waits while the link is stalled; false when p was torn down.
func (l *Link) flowing(p *pair) bool {
	for {
		ch := l.stallWait()
		if ch == nil {
			select {
			case <-p.done:
				return false
			default:
				return true
			}
		}
		select {
		case <-ch:
		case <-p.done:
			return false
		}
	}
}

// CapBuffer is how long a capped direction may queue beyond its bytes in
// flight: a router's buffer at the bottleneck.
const CapBuffer = 100 * time.Millisecond

// minCapQueue keeps a slow cap's queue above one read.
const minCapQueue = 64 << 10

// queueLimit is the queue bound of direction d now (see QueueBytes).
func (l *Link) queueLimit(d Direction) int {
	l.mu.Lock()
	t := *l.toxics.dir(d)
	l.mu.Unlock()
	if t.BytesPerSecond <= 0 {
		return l.cfg.QueueBytes
	}
	hold := time.Duration(t.Delay+t.Jitter) + CapBuffer
	n := int(float64(t.BytesPerSecond) * hold.Seconds())
	return min(max(n, minCapQueue), l.cfg.QueueBytes)
}

// queue is a FIFO of chunks bounded by their bytes.
type queue struct {
	mu           sync.Mutex
	cond         *sync.Cond
	items        []chunk
	bytes        int
	limit        func() int
	total        *atomic.Int64 // the link's queued bytes
	eof, aborted bool
}

func newQueue(limit func() int, total *atomic.Int64) *queue {
	q := &queue{limit: limit, total: total}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push waits for room and appends c; false once aborted. A full queue is
// re-checked every 50 ms too, so a lifted cap takes effect without a pop.
func (q *queue) push(c chunk) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.bytes >= q.limit() && !q.aborted {
		t := time.AfterFunc(50*time.Millisecond, func() {
			q.mu.Lock()
			q.cond.Broadcast()
			q.mu.Unlock()
		})
		q.cond.Wait()
		t.Stop()
	}
	if q.aborted {
		return false
	}
	q.items = append(q.items, c)
	q.bytes += len(c.b)
	q.total.Add(int64(len(c.b)))
	q.cond.Broadcast()
	return true
}

// pop waits for a chunk; false at the end of the stream or once aborted.
func (q *queue) pop() (chunk, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.eof && !q.aborted {
		q.cond.Wait()
	}
	if q.aborted || len(q.items) == 0 {
		return chunk{}, false
	}
	c := q.items[0]
	q.items[0] = chunk{}
	q.items = q.items[1:]
	q.bytes -= len(c.b)
	q.total.Add(-int64(len(c.b)))
	q.cond.Broadcast()
	return c, true
}

func (q *queue) finish() {
	q.mu.Lock()
	q.eof = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

func (q *queue) abort() {
	q.mu.Lock()
	if q.aborted {
		q.mu.Unlock()
		return
	}
	q.aborted = true
	q.total.Add(-int64(q.bytes))
	q.bytes = 0
	q.items = nil
	q.cond.Broadcast()
	q.mu.Unlock()
}
