package follow

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/producer"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// fakeRelay publishes one DC pool's lane exactly as protocol.md says, from a
// real producer.State and producer.Publisher: barrier snapshots (object
// first, then the marker), deltas and drain markers, each with Nats-Msg-Id
// and the expected last sequence on the lane filter. The lead's relay is
// tested end to end elsewhere; this helper only drives the indexer.
// Not safe for concurrent use (one test goroutine drives it).
type fakeRelay struct {
	t        testing.TB
	js       jetstream.JetStream
	coord    *lease.Coordinator
	res      *streams.Resources
	domain   string
	dc       string
	subj     wire.LaneSubjects
	pool     ckf.PoolID
	lane     int
	instance string

	state    *producer.State
	pub      *producer.Publisher
	lease    *lease.Lease
	identity ckf.ProducerIdentity

	lastLaneSeq uint64
	// traceCtx, when set, is injected into the headers of the next deltas.
	traceCtx context.Context
	// eventTime, when non-zero, is sent as EventTimeHeader on deltas.
	eventTime time.Time
	// lastDelta is the wire form of the last published delta.
	lastDelta wire.Delta
	// bumps counts bump calls (trust_test.go).
	bumps uint64
}

const relayLeaseTTL = time.Minute

func newFakeRelay(t testing.TB, js jetstream.JetStream, domain, dc string, expectedBlocks uint64) *fakeRelay {
	t.Helper()
	ctx := testCtx(t)
	res, err := streams.Ensure(ctx, js, streams.Options{Memory: true})
	if err != nil {
		t.Fatalf("relay %s: ensure: %v", dc, err)
	}
	coord, err := lease.New(ctx, js, lease.WithMemoryStorage())
	if err != nil {
		t.Fatalf("relay %s: lease coordinator: %v", dc, err)
	}
	subj, err := wire.NewLaneSubjects(domain, dc)
	if err != nil {
		t.Fatal(err)
	}
	domainID, err := ckf.DomainFromName(domain)
	if err != nil {
		t.Fatal(err)
	}
	pool := ckf.PoolID{Domain: domainID, Dc: ckf.DcIDFromName(dc)}
	state, err := producer.NewState(ckf.NewConfig(expectedBlocks))
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeRelay{t: t, js: js, coord: coord, res: res, domain: domain, dc: dc, subj: subj, pool: pool,
		instance: "relay-" + dc, state: state}
	if r.lastLaneSeq, err = streams.LastLaneSequence(ctx, res.Lanes, subj.Filter); err != nil {
		t.Fatal(err)
	}
	return r
}

// register puts the pool in the domain's lane map.
func (r *fakeRelay) register() {
	r.t.Helper()
	lane, err := r.coord.Register(testCtx(r.t), r.domain, r.dc, r.pool)
	if err != nil {
		r.t.Fatalf("relay %s: register: %v", r.dc, err)
	}
	r.lane = lane
}

// takeEpoch acquires the producer lease (a fresh epoch), starts a new
// publisher generation and publishes its barrier snapshot, as a relay does
// on start and on takeover.
func (r *fakeRelay) takeEpoch() {
	r.t.Helper()
	l, err := r.coord.Acquire(testCtx(r.t), r.domain, r.dc, r.instance, relayLeaseTTL)
	if err != nil {
		r.t.Fatalf("relay %s: acquire: %v", r.dc, err)
	}
	r.adopt(l)
}

// adopt publishes under l from now on, as a relay that acquired it does:
// a new publisher generation and its barrier snapshot.
func (r *fakeRelay) adopt(l *lease.Lease) {
	r.t.Helper()
	r.lease = l
	r.instance = l.Owner()
	last := uint64(0)
	if r.pub != nil {
		last = r.pub.LastSequence()
	}
	r.identity = ckf.ProducerIdentity{Pool: r.pool, ProducerIncarnation: l.Epoch(), LayoutGeneration: 1, Format: r.state.Format()}
	r.pub = producer.NewPublisher(r.identity, last, r)
	r.snapshot()
}

func (r *fakeRelay) epoch() uint64 { return r.lease.Epoch() }

func (r *fakeRelay) wireLease() wire.WireLease {
	return wire.WireLease{Epoch: r.lease.Epoch(), Instance: r.instance}
}

// snapshot publishes a barrier snapshot: object first, then the marker.
func (r *fakeRelay) snapshot() {
	r.t.Helper()
	ctx := testCtx(r.t)
	snap, err := r.pub.SnapshotAfterBarrier(r.state, ckf.LaneLease{PhysicalLane: uint8(r.lane), AssignmentEpoch: r.epoch()})
	if err != nil {
		r.t.Fatalf("relay %s: snapshot: %v", r.dc, err)
	}
	body, err := wire.EncodeSnapshotBody(nil, r.state.Format(), snap.Buckets)
	if err != nil {
		r.t.Fatal(err)
	}
	name, err := wire.SnapshotObjectName(r.domain, r.dc, r.epoch(), snap.Sequence)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.res.Snapshots.PutBytes(ctx, name, body); err != nil {
		r.t.Fatalf("relay %s: put snapshot body: %v", r.dc, err)
	}
	marker := wire.NewSnapshotMarker(snap, r.wireLease(), wire.SnapshotBucket, name, body)
	data, err := wire.AppendSnapshotMarker(nil, &marker)
	if err != nil {
		r.t.Fatal(err)
	}
	r.publish(r.subj.Snapshot, data, nil, wire.MsgID(wire.KindSnapshotMarker, &r.identity, r.epoch(), snap.Sequence))
}

// Enqueue is the producer.Sink: it publishes the delta on the lane.
func (r *fakeRelay) Enqueue(d ckf.Delta) error {
	wd := wire.NewDelta(d, r.wireLease())
	data, err := wire.AppendDelta(nil, &wd)
	if err != nil {
		return err
	}
	hdr := nats.Header{}
	if r.traceCtx != nil {
		propagation.TraceContext{}.Inject(r.traceCtx, streams.HeaderCarrier(hdr))
	}
	if !r.eventTime.IsZero() {
		hdr.Set(EventTimeHeader, strconv.FormatInt(r.eventTime.UnixNano(), 10))
	}
	if err := r.tryPublish(r.subj.Delta, data, hdr, wire.MsgID(wire.KindDelta, &r.identity, r.epoch(), d.Sequence)); err != nil {
		return err
	}
	r.lastDelta = wd
	return nil
}

// drain publishes the exact drain marker.
func (r *fakeRelay) drain() {
	r.t.Helper()
	m, ok := r.pub.ExactDrainMarker()
	if !ok {
		r.t.Fatalf("relay %s: no lease for a drain marker", r.dc)
	}
	wm := wire.NewDrainMarker(r.identity, r.wireLease(), m)
	data, err := wire.AppendDrainMarker(nil, &wm)
	if err != nil {
		r.t.Fatal(err)
	}
	r.publish(r.subj.Drain, data, nil, wire.MsgID(wire.KindDrainMarker, &r.identity, r.epoch(), m.ExpectedSequence))
}

func (r *fakeRelay) publish(subject string, data []byte, hdr nats.Header, msgID string) {
	r.t.Helper()
	if err := r.tryPublish(subject, data, hdr, msgID); err != nil {
		r.t.Fatalf("relay %s: publish %s: %v", r.dc, subject, err)
	}
}

func (r *fakeRelay) tryPublish(subject string, data []byte, hdr nats.Header, msgID string) error {
	ack, err := r.js.PublishMsg(testCtx(r.t), &nats.Msg{Subject: subject, Data: data, Header: hdr},
		jetstream.WithMsgID(msgID), jetstream.WithExpectLastSequenceForSubject(r.lastLaneSeq, r.subj.Filter))
	if err != nil {
		return err
	}
	// A duplicate (an idle relay's repeated drain marker has the same
	// Msg-Id) is acknowledged with the original's older sequence.
	if !ack.Duplicate {
		r.lastLaneSeq = ack.Sequence
	}
	return nil
}

// inject publishes raw bytes on a lane subject without any fence, as a
// corrupt or zombie publisher would.
func (r *fakeRelay) inject(subject string, data []byte) {
	r.t.Helper()
	ack, err := r.js.Publish(testCtx(r.t), subject, data)
	if err != nil {
		r.t.Fatalf("relay %s: inject: %v", r.dc, err)
	}
	r.lastLaneSeq = ack.Sequence
}

// apply applies events and publishes every resulting delta.
func (r *fakeRelay) apply(evs ...*routerevent.RouterEvent) {
	r.t.Helper()
	for _, ev := range evs {
		out := r.state.ApplyEvent(ev)
		if out.FirstError != nil {
			r.t.Fatalf("relay %s: event: %v", r.dc, out.FirstError)
		}
		if out.HasPublication() {
			if _, err := r.pub.Publish(out.Publication); err != nil {
				r.t.Fatalf("relay %s: publish delta: %v", r.dc, err)
			}
		}
	}
}

// exactDepth is the ground truth: the longest prefix of locals whose
// sequence hashes the pool owns.
func (r *fakeRelay) exactDepth(locals []ckf.LocalBlockHash) uint32 {
	seqs := ckf.SequenceHashes(nil, locals)
	for i, h := range seqs {
		if _, ok := r.state.Ownership(uint64(h)); !ok {
			return uint32(i)
		}
	}
	return uint32(len(seqs))
}

// chain is a token-prefix chain of local block hashes (testenv.Chain).
func chain(seed uint64, n int) []ckf.LocalBlockHash { return testenv.Chain(seed, n) }

// storeChain is a stored event of locals[from:to] by worker, continuing the
// parent block locals[from-1] (canonical lineage: block_hash is the
// engine's external id, here derived from the local hash).
func storeChain(worker uint64, locals []ckf.LocalBlockHash, from, to int) *routerevent.RouterEvent {
	blocks := make([]routerevent.StoredBlock, 0, to-from)
	for i := from; i < to; i++ {
		blocks = append(blocks, routerevent.StoredBlock{BlockHash: extHash(locals[i]), TokensHash: uint64(locals[i])})
	}
	var parent *uint64
	if from > 0 {
		p := extHash(locals[from-1])
		parent = &p
	}
	return &routerevent.RouterEvent{WorkerID: worker, Event: routerevent.KvCacheEvent{
		Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{ParentHash: parent, Blocks: blocks}}}}
}

// removeChain removes locals[from:to] of worker.
func removeChain(worker uint64, locals []ckf.LocalBlockHash, from, to int) *routerevent.RouterEvent {
	hashes := make([]uint64, 0, to-from)
	for i := from; i < to; i++ {
		hashes = append(hashes, extHash(locals[i]))
	}
	return &routerevent.RouterEvent{WorkerID: worker, Event: routerevent.KvCacheEvent{
		Data: routerevent.EventData{Kind: routerevent.EventRemoved, Removed: routerevent.RemoveData{BlockHashes: hashes}}}}
}

func extHash(h ckf.LocalBlockHash) uint64 { return uint64(h)*31 + 7 }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (r *fakeRelay) String() string {
	return fmt.Sprintf("relay(%s/%s lane %d)", r.domain, r.dc, r.lane)
}
