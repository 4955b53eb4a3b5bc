package relay

import (
	"context"
	"fmt"
	"sync"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
)

// kvPublication is the relay's server.Publication (dynamo.kvrelay.v1). The
// actor goroutine owns the lane: it publishes the generation when an epoch
// goes live, serves subscriptions (a flushed copy of the lane plus a Feed
// registered in the same step) and fans out every delta right after
// JetStream stored it. Other goroutines only read the generation (under
// mu) and talk to the actor through reqs.
//
// Producer key: producer_incarnation is the lease epoch and
// layout_generation 1, so a takeover (or a new epoch of the same relay) is a
// new generation and the old key gets PRODUCER_CHANGED.
type kvPublication struct {
	r    *Relay // the load windows' source
	spec server.PoolSpec
	dcID uint64
	reqs chan kvSubscribeReq // unbuffered: accepted only by a live publishLoop

	mu      sync.Mutex
	gen     server.Generation
	ok      bool
	changed chan struct{} // closed at the next change of gen/ok
}

type kvSubscribeReq struct {
	key    kvrelay.ProducerKey
	limits server.QueueLimits
	reply  chan kvSubscribeReply // capacity 1: the actor never blocks on it
}

type kvSubscribeReply struct {
	feed *server.Feed
	err  error
}

func newKvPublication(spec server.PoolSpec, dc ckf.DcID, r *Relay) *kvPublication {
	return &kvPublication{r: r, spec: spec, dcID: uint64(dc), reqs: make(chan kvSubscribeReq), changed: make(chan struct{})}
}

// Publication returns the relay's dynamo.kvrelay.v1 publication, nil when
// Config.KvRelay is not set.
func (r *Relay) Publication() server.Publication {
	if r.kv == nil {
		return nil
	}
	return r.kv
}

func (p *kvPublication) Generation() (server.Generation, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen, p.ok
}

func (p *kvPublication) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// Load is the occupancy of the last load window (§6.3): unknown (0) until
// the pool's capacity is known (--kv-capacity-blocks or the workers'
// declared capacities).
func (p *kvPublication) Load() server.PoolLoad { return kvPoolLoad(p.r.lastLoad.Load()) }

// ServingLoad is the pool's serving load of the last window (§6.4) when it
// is complete and holds both token gauges; false otherwise (sent as
// DATA_STATUS_UNAVAILABLE). An estimated prefill is marked, and sent as
// DATA_STATUS_DEGRADED.
func (p *kvPublication) ServingLoad() (server.ServingLoad, bool) {
	return servingPoolLoad(p.r.lastLoad.Load(), 2*p.r.cfg.loadInterval(), p.r.now())
}

func (p *kvPublication) set(gen server.Generation, ok bool) {
	p.mu.Lock()
	p.gen, p.ok = gen, ok
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Subscribe hands the request to the actor and waits for the feed. A
// change of generation while waiting re-checks the key.
func (p *kvPublication) Subscribe(ctx context.Context, key kvrelay.ProducerKey, limits server.QueueLimits) (*server.Feed, error) {
	for {
		changed := p.Changed()
		gen, ok := p.Generation()
		switch {
		case !ok:
			return nil, fmt.Errorf("relay is not publishing: %w", kvrelay.ErrPoolNotFound)
		case gen.Key != key:
			return nil, fmt.Errorf("relay publishes incarnation %d: %w", gen.Key.ProducerIncarnation, kvrelay.ErrProducerChanged)
		}
		req := kvSubscribeReq{key: key, limits: limits, reply: make(chan kvSubscribeReply, 1)}
		select {
		case p.reqs <- req:
		case <-changed:
			continue
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case rep := <-req.reply:
			return rep.feed, rep.err
		case <-ctx.Done():
			// The actor accepted the request and always replies: release
			// the feed it makes.
			go func() {
				if rep := <-req.reply; rep.feed != nil {
					rep.feed.Close()
				}
			}()
			return nil, ctx.Err()
		}
	}
}

// kvRequests is the channel publishLoop serves (nil, never ready, when the
// kvrelay service is off).
func (e *epochRun) kvRequests() chan kvSubscribeReq {
	if e.r.kv == nil || e.fan == nil {
		return nil
	}
	return e.r.kv.reqs
}

// kvBegin publishes this epoch's generation once it is live.
func (e *epochRun) kvBegin() error {
	kv := e.r.kv
	if kv == nil {
		return nil
	}
	gen, err := kv.spec.Generation(kv.dcID, e.identity.ProducerIncarnation, e.identity.LayoutGeneration, e.identity.Format)
	if err != nil {
		return fmt.Errorf("relay: kvrelay generation: %w", err)
	}
	e.kvKey = gen.Key
	e.fan = server.NewFanout()
	kv.set(gen, true)
	return nil
}

// kvEnd withdraws the generation and ends its feeds (queued deltas are
// still delivered, then PUBLICATION_UNAVAILABLE).
func (e *epochRun) kvEnd() {
	if e.r.kv == nil || e.fan == nil {
		return
	}
	e.r.kv.set(server.Generation{}, false)
	e.fan.Close(fmt.Errorf("epoch %d ended: %w", e.epoch, kvrelay.ErrPublicationUnavailable))
}

// kvSubscribe serves one subscription on the actor: publish what is
// pending (so the copy is exactly the lane at the last sequence), copy the
// lane, register the feed. A failed flush ends the epoch like any publish
// failure.
func (e *epochRun) kvSubscribe(req kvSubscribeReq) error {
	if req.key != e.kvKey {
		req.reply <- kvSubscribeReply{err: fmt.Errorf("relay publishes incarnation %d: %w", e.kvKey.ProducerIncarnation, kvrelay.ErrProducerChanged)}
		return nil
	}
	if err := e.flush(); err != nil {
		req.reply <- kvSubscribeReply{err: fmt.Errorf("publish failed: %w", kvrelay.ErrPublicationUnavailable)}
		return err
	}
	words := e.state.CopyWords(nil)
	req.reply <- kvSubscribeReply{feed: e.fan.Add(words, e.pub.LastSequence(), req.limits)}
	return nil
}
