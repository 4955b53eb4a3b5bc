// Package servertest is an in-memory server.Publication of one lane, for
// the tests of the kvrelay server and of its clients: a test sets the
// generation, publishes deltas, withdraws the pool and sets the load the
// windows report.
package servertest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
)

// Pub is a server.Publication of one in-memory lane. Safe for concurrent
// use.
type Pub struct {
	mu      sync.Mutex
	gen     server.Generation
	ok      bool
	changed chan struct{}
	fan     *server.Fanout
	words   []uint64
	seq     uint64

	load      server.PoolLoad
	serving   server.ServingLoad
	servingOK bool
}

// NewPub is a pool that publishes nothing until SetGen.
func NewPub() *Pub { return &Pub{changed: make(chan struct{})} }

// SetGen publishes generation g, whose format has buckets buckets, at
// sequence 0 with an empty lane; the previous generation's feeds end
// PUBLICATION_UNAVAILABLE.
func (p *Pub) SetGen(g server.Generation, buckets uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fan != nil {
		p.fan.Close(fmt.Errorf("replaced: %w", kvrelay.ErrPublicationUnavailable))
	}
	p.gen, p.ok, p.fan, p.words, p.seq = g, true, server.NewFanout(), make([]uint64, buckets), 0
	close(p.changed)
	p.changed = make(chan struct{})
}

// Gen is the current generation.
func (p *Pub) Gen() server.Generation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// Publish applies images to the lane as one delta and returns its
// sequence.
func (p *Pub) Publish(images ...cbi1.Image) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, im := range images {
		p.words[im.Bucket] = im.Word
	}
	p.seq++
	p.fan.Publish(p.seq-1, p.seq, slices.Clone(images))
	return p.seq
}

// Lane is the lane's words and sequence.
func (p *Pub) Lane() ([]uint64, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.words), p.seq
}

// Withdraw stops publishing (a standby): the pool leaves the catalog.
func (p *Pub) Withdraw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fan.Close(kvrelay.ErrPublicationUnavailable)
	p.ok = false
	close(p.changed)
	p.changed = make(chan struct{})
}

// SetLoad sets what the load windows report from the next window on (nil
// serving: none).
func (p *Pub) SetLoad(kv server.PoolLoad, serving *server.ServingLoad) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.load = kv
	p.servingOK = serving != nil
	if serving != nil {
		p.serving = *serving
	}
}

// Generation implements server.Publication.
func (p *Pub) Generation() (server.Generation, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen, p.ok
}

// Changed implements server.Publication.
func (p *Pub) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// Subscribe implements server.Publication.
func (p *Pub) Subscribe(_ context.Context, key kvrelay.ProducerKey, limits server.QueueLimits) (*server.Feed, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.ok:
		return nil, kvrelay.ErrPoolNotFound
	case key != p.gen.Key:
		return nil, kvrelay.ErrProducerChanged
	}
	return p.fan.Add(slices.Clone(p.words), p.seq, limits), nil
}

// Load implements server.Publication.
func (p *Pub) Load() server.PoolLoad {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.load
}

// ServingLoad implements server.Publication.
func (p *Pub) ServingLoad() (server.ServingLoad, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.serving, p.servingOK
}

var _ server.Publication = (*Pub)(nil)
