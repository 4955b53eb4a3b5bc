package server

import (
	"fmt"
	"sync"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// Delta is one publication of the lane: absolute bucket images taking the
// lane from BaseSequence to Sequence (= BaseSequence+1). Images are shared by
// every subscriber and must not be modified.
type Delta struct {
	BaseSequence uint64
	Sequence     uint64
	Images       []cbi1.Image
}

// frameOverhead is what a queued frame costs besides its payload (§4.3).
const frameOverhead = 256

func (d *Delta) cost() int { return cbi1.DeltaFrameLen(len(d.Images)) + frameOverhead }

// QueueLimits bound one subscriber's queue of deltas not yet sent (§4.3):
// a subscriber that lets more than Frames frames or Bytes bytes (payload +
// 256 per frame) pile up is dropped with SUBSCRIBER_LAGGED.
type QueueLimits struct {
	Frames int
	Bytes  int
}

// Feed is one subscriber's view of a generation: the lane at Sequence, then
// every delta after it, in order, through Next. Words belongs to the
// receiver. Next and Ready are for one goroutine; Close may be called from
// any goroutine, more than once.
type Feed struct {
	Words    []uint64
	Sequence uint64

	fan    *Fanout
	limits QueueLimits
	signal chan struct{} // capacity 1: something was queued or the feed ended

	mu     sync.Mutex // guards the fields below
	items  []Delta
	bytes  int
	err    error // why the feed ended; nil while open
	closed bool
}

// Ready is signalled when Next may have something new.
func (f *Feed) Ready() <-chan struct{} { return f.signal }

// Next pops the oldest queued delta. ok is false when the queue is empty;
// err is non-nil once the feed ended (after what was queued before a
// retirement; a lagged feed loses its queue): a kvrelay Condition.
func (f *Feed) Next() (d Delta, ok bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.items) > 0 {
		d = f.items[0]
		f.items[0] = Delta{}
		f.items = f.items[1:]
		f.bytes -= d.cost()
		return d, true, nil
	}
	return Delta{}, false, f.err
}

// Close ends the feed from the consumer side and releases its queue.
func (f *Feed) Close() {
	f.end(kvrelay.ErrPublicationUnavailable, true)
	if f.fan != nil {
		f.fan.remove(f)
	}
}

func (f *Feed) wake() {
	select {
	case f.signal <- struct{}{}:
	default:
	}
}

// end closes the feed with err; drop discards what was queued.
func (f *Feed) end(err error, drop bool) {
	f.mu.Lock()
	if !f.closed {
		f.closed, f.err = true, err
		if drop {
			f.items, f.bytes = nil, 0
		}
	}
	f.mu.Unlock()
	f.wake()
}

// push queues d; it reports false when the feed is (now) closed.
func (f *Feed) push(d Delta) bool {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return false
	}
	c := d.cost()
	if len(f.items)+1 > f.limits.Frames || f.bytes+c > f.limits.Bytes {
		f.closed = true
		f.err = fmt.Errorf("subscriber queue over %d frames or %d bytes: %w", f.limits.Frames, f.limits.Bytes, kvrelay.ErrSubscriberLagged)
		f.items, f.bytes = nil, 0
		f.mu.Unlock()
		f.wake()
		return false
	}
	f.items = append(f.items, d)
	f.bytes += c
	f.mu.Unlock()
	f.wake()
	return true
}

// Fanout hands one generation's deltas to its subscribers' bounded queues.
// It never blocks the publisher: a full queue drops its subscriber. Safe
// for concurrent use.
type Fanout struct {
	mu     sync.Mutex
	subs   map[*Feed]struct{}
	closed error
}

// NewFanout returns an open fanout with no subscribers.
func NewFanout() *Fanout { return &Fanout{subs: make(map[*Feed]struct{})} }

// Add registers a subscriber whose snapshot is words at seq. The caller
// must hold the lane still between copying words and Add (the relay's
// actor does both in one step), so the next Publish continues seq. On a
// closed fanout the feed is returned already ended.
func (fo *Fanout) Add(words []uint64, seq uint64, limits QueueLimits) *Feed {
	f := &Feed{Words: words, Sequence: seq, fan: fo, limits: limits, signal: make(chan struct{}, 1)}
	fo.mu.Lock()
	defer fo.mu.Unlock()
	if fo.closed != nil {
		f.end(fo.closed, true)
		return f
	}
	fo.subs[f] = struct{}{}
	return f
}

// Len returns the number of live subscribers.
func (fo *Fanout) Len() int {
	fo.mu.Lock()
	defer fo.mu.Unlock()
	return len(fo.subs)
}

// Publish queues a copy of images as the delta base → seq for every
// subscriber. A delta larger than a CBI1 frame can carry ends every feed
// with PUBLICATION_UNAVAILABLE (they resubscribe and get a snapshot).
func (fo *Fanout) Publish(base, seq uint64, images []cbi1.Image) {
	fo.mu.Lock()
	defer fo.mu.Unlock()
	if fo.closed != nil || len(fo.subs) == 0 {
		return
	}
	if len(images) > cbi1.MaxDeltaImages {
		err := fmt.Errorf("delta of %d images exceeds a CBI1 frame: %w", len(images), kvrelay.ErrPublicationUnavailable)
		for f := range fo.subs {
			f.end(err, true)
			delete(fo.subs, f)
		}
		return
	}
	d := Delta{BaseSequence: base, Sequence: seq, Images: append([]cbi1.Image(nil), images...)}
	for f := range fo.subs {
		if !f.push(d) {
			delete(fo.subs, f)
		}
	}
}

// Close ends every feed with err (queued deltas are still delivered) and
// makes later Adds return ended feeds. err should be a kvrelay Condition,
// normally ErrPublicationUnavailable.
func (fo *Fanout) Close(err error) {
	fo.mu.Lock()
	defer fo.mu.Unlock()
	if fo.closed != nil {
		return
	}
	fo.closed = err
	for f := range fo.subs {
		f.end(err, false)
		delete(fo.subs, f)
	}
}

func (fo *Fanout) remove(f *Feed) {
	fo.mu.Lock()
	delete(fo.subs, f)
	fo.mu.Unlock()
}
