package routesim

import (
	"fmt"
	"slices"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// consumerInstance is the simulated indexer's consumer identity.
const consumerInstance = 24

// pendingDelta is a published delta on its way to the indexer.
type pendingDelta struct {
	at    int64 // µs of simulated time it reaches the indexer
	delta ckf.Delta
}

// laneSink is the relay's lane as the producer sees it: deltas are copied
// and queued for delivery one RTT/2 later.
type laneSink struct {
	now   *int64
	delay int64
	queue []pendingDelta
	// cut: the relay's link is down; what it publishes is lost.
	cut bool
}

func (s *laneSink) Enqueue(d ckf.Delta) error {
	if s.cut {
		return nil
	}
	d.Images = slices.Clone(d.Images)
	s.queue = append(s.queue, pendingDelta{at: *s.now + s.delay, delta: d})
	return nil
}

// ckfIndex is the real pipeline of one fleet: a producer and publisher per
// DC (the relay), and one consumer indexer with a lane per DC (the global
// indexer), connected by delayed delivery.
type ckfIndex struct {
	ix        *consumer.Indexer
	states    []*producer.State
	pubs      []*producer.Publisher
	sinks     []*laneSink
	ings      []*consumer.LaneIngestor
	scratch   consumer.QueryScratch
	result    consumer.QueryResult
	lastHeard []int64 // µs the indexer last heard from each lane
	// eventErrors counts events the producer rejected (must stay 0).
	eventErrors int
	applyErrors int
}

func newCKFIndex(dcs int, expectedBlocks uint64, now *int64, delays []int64) (*ckfIndex, error) {
	cfg := ckf.NewConfig(expectedBlocks)
	format, err := cfg.Format()
	if err != nil {
		return nil, fmt.Errorf("routesim: ckf format: %w", err)
	}
	domain, err := ckf.DomainFromName("routesim")
	if err != nil {
		return nil, err
	}
	var pools [ckf.LaneCount]*ckf.PoolID
	for l := range dcs {
		pools[l] = &ckf.PoolID{Domain: domain, Dc: ckf.DcID(5000 + l)}
	}
	m, err := consumer.NewManifest(consumerInstance, domain, format, pools)
	if err != nil {
		return nil, fmt.Errorf("routesim: manifest: %w", err)
	}
	ix, err := consumer.NewIndexer(m, ckf.DefaultPrefixSearchConfig())
	if err != nil {
		return nil, fmt.Errorf("routesim: indexer: %w", err)
	}
	c := &ckfIndex{ix: ix, lastHeard: make([]int64, dcs)}
	for l := range dcs {
		st, err := producer.NewState(cfg)
		if err != nil {
			return nil, fmt.Errorf("routesim: producer: %w", err)
		}
		sink := &laneSink{now: now, delay: delays[l]}
		id := ckf.ProducerIdentity{Pool: *pools[l], ProducerIncarnation: 1, LayoutGeneration: 1, Format: format}
		lease := ckf.LaneLease{ConsumerInstance: consumerInstance, PhysicalLane: uint8(l), AssignmentEpoch: 1}
		pub := producer.NewPublisher(id, 0, sink)
		ing, err := ix.ClaimLane(l)
		if err != nil {
			return nil, fmt.Errorf("routesim: lane %d: %w", l, err)
		}
		if err := ing.Assign(id, lease); err != nil {
			return nil, fmt.Errorf("routesim: assign lane %d: %w", l, err)
		}
		snap, err := pub.SnapshotAfterBarrier(st, lease)
		if err != nil {
			return nil, fmt.Errorf("routesim: snapshot lane %d: %w", l, err)
		}
		if out := ing.InstallSnapshot(snap); out.Kind != consumer.OutcomeSnapshotInstalled {
			return nil, fmt.Errorf("routesim: install lane %d: %v", l, out)
		}
		c.states = append(c.states, st)
		c.pubs = append(c.pubs, pub)
		c.sinks = append(c.sinks, sink)
		c.ings = append(c.ings, ing)
	}
	return c, nil
}

// apply hands one worker event of DC dc to its relay.
func (c *ckfIndex) apply(dc int, ev *routerevent.RouterEvent) {
	out := c.states[dc].ApplyEvent(ev)
	if out.FirstError != nil {
		c.eventErrors++
	}
	if out.HasPublication() {
		if _, err := c.pubs[dc].Publish(out.Publication); err != nil {
			c.eventErrors++
		}
	}
}

// flush is the relay's publish tick: the pending window, then a heartbeat
// (lastHeard moves when the tick reaches the indexer).
func (c *ckfIndex) flush(dc int) {
	if b := c.states[dc].Flush(); !b.Empty() {
		if _, err := c.pubs[dc].Publish(b); err != nil {
			c.eventErrors++
		}
	}
	s := c.sinks[dc]
	s.queue = append(s.queue, pendingDelta{at: *s.now + s.delay})
}

// deliver applies every delta that has reached the indexer by now.
func (c *ckfIndex) deliver(now int64) {
	for l, s := range c.sinks {
		n := 0
		for n < len(s.queue) && s.queue[n].at <= now {
			p := &s.queue[n]
			if p.delta.Sequence != 0 {
				if out := c.ings[l].ApplyDelta(&p.delta); out.Kind != consumer.OutcomeDeltaApplied {
					c.applyErrors++
				}
			}
			c.lastHeard[l] = p.at
			n++
		}
		if n > 0 {
			s.queue = slices.Delete(s.queue, 0, n)
		}
	}
}

// depths queries the table for every lane's depth of seqs.
func (c *ckfIndex) depths(seqs []ckf.SequenceHash, out []int) {
	if err := c.ix.FindPrefixMatchesSequence(seqs, &c.scratch, &c.result); err != nil {
		clear(out)
		return
	}
	for l := range out {
		out[l] = int(c.result.Lanes[l].Depth)
	}
}
