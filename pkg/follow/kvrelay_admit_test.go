package follow

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// scriptRelay is a well-behaved kvrelay relay whose catalog holds one
// descriptor the test replaces (a takeover, a change of query semantics).
// Its catalog stream repeats the current catalog every 50 ms (same
// revision, same content) and sends a new revision at each change; a pool
// stream sends the subscribed producer's snapshot at sequence 5, then
// heartbeats.
type scriptRelay struct {
	kvrelayv1.UnimplementedKvEventRelayServer
	relay *kvrelayv1.RelayIdentity

	mu      sync.Mutex
	desc    *kvrelayv1.KvPoolDescriptor
	rev     uint64
	chunks  map[uint64][]byte // by producer incarnation
	changed chan struct{}
	// sent counts catalog updates sent.
	sent atomic.Int64
}

// newScriptRelay serves a relay of gen's descriptor on loopback until the
// test ends and returns it with its address.
func newScriptRelay(t *testing.T, gens ...server.Generation) (*scriptRelay, string) {
	t.Helper()
	h := &scriptRelay{relay: &kvrelayv1.RelayIdentity{DrtInstanceId: 1, RelayIncarnation: 2}, chunks: map[uint64][]byte{},
		changed: make(chan struct{}), desc: gens[0].Descriptor, rev: 1}
	words := make([]uint64, gens[0].Key.BucketCount)
	words[9] = 0x0001ABCD00001234
	for _, g := range gens {
		chunk, err := cbi1.AppendSnapshotChunk(nil, g.Key.Format(), g.Key.DcID, 5, words, 0)
		if err != nil {
			t.Fatal(err)
		}
		h.chunks[g.Key.ProducerIncarnation] = chunk
	}
	gs := grpc.NewServer()
	kvrelayv1.RegisterKvEventRelayServer(gs, h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return h, ln.Addr().String()
}

// set publishes d as the catalog's descriptor under a new revision.
func (h *scriptRelay) set(d *kvrelayv1.KvPoolDescriptor) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.desc, h.rev = d, h.rev+1
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *scriptRelay) current() (*kvrelayv1.KvPoolCatalogUpdate, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return &kvrelayv1.KvPoolCatalogUpdate{ProtocolVersion: 1, Relay: h.relay, Revision: h.rev,
		Snapshot:       &kvrelayv1.KvPoolCatalogSnapshot{Pools: []*kvrelayv1.KvPoolDescriptor{h.desc}},
		ContractMarker: kvrelayv1.ContractMarker}, h.changed
}

func (h *scriptRelay) GetRelayInfo(context.Context, *kvrelayv1.RelayInfoRequest) (*kvrelayv1.RelayInfo, error) {
	return &kvrelayv1.RelayInfo{ProtocolVersion: 1, Relay: h.relay, ContractMarker: kvrelayv1.ContractMarker}, nil
}

func (h *scriptRelay) WatchKvPoolCatalog(_ *kvrelayv1.WatchKvPoolCatalogRequest, ss kvrelayv1.KvEventRelay_WatchKvPoolCatalogServer) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		u, changed := h.current()
		if err := ss.Send(u); err != nil {
			return err
		}
		h.sent.Add(1)
		select {
		case <-ss.Context().Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

func (h *scriptRelay) SubscribeKvPool(req *kvrelayv1.SubscribeKvPoolRequest, ss kvrelayv1.KvEventRelay_SubscribeKvPoolServer) error {
	h.mu.Lock()
	chunk := h.chunks[req.GetExpectedProducer().GetProducerIncarnation()]
	h.mu.Unlock()
	fr := func(kind kvrelayv1.FilterUpdateKind, p []byte) *kvrelayv1.FilterUpdate {
		return &kvrelayv1.FilterUpdate{ProtocolVersion: 1, Relay: h.relay, Producer: req.GetExpectedProducer(), BaseSequence: 5, Sequence: 5,
			Kind: kind, Payload: p, ContractMarker: kvrelayv1.ContractMarker}
	}
	if err := ss.Send(fr(kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, chunk)); err != nil {
		return err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ss.Context().Done():
			return nil
		case <-tick.C:
			if err := ss.Send(fr(kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_HEARTBEAT, nil)); err != nil {
				return err
			}
		}
	}
}

// kvGenerations builds n producer generations (incarnations 11, 12, ...)
// of kvSpec's pool over 1024 buckets.
func kvGenerations(t *testing.T, n int) []server.Generation {
	t.Helper()
	out := make([]server.Generation, n)
	for i := range out {
		g, err := kvSpec.Generation(7, uint64(11+i), 13, ckf.NewFormatIdentity(42, 1024))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = g
	}
	return out
}

// withBlockSize is d with its query semantics' block size replaced; the
// producer (the subscription key) stays the same.
func withBlockSize(d *kvrelayv1.KvPoolDescriptor, bs uint32) *kvrelayv1.KvPoolDescriptor {
	c := proto.Clone(d).(*kvrelayv1.KvPoolDescriptor)
	c.QuerySemantics.KvBlockSize = bs
	return c
}

// kvLaneServing reports nil once the kvrelay lane is active and ready.
func kvLaneServing(s *Service, lane int) error {
	st, err := statusOf(s, lane)
	if err != nil {
		return err
	}
	if st.State != PhaseActive || !isReady(s, lane) {
		return fmt.Errorf("kvrelay lane %+v ready=%t", st, isReady(s, lane))
	}
	return nil
}

// A catalog update that changes only the selected pool's query semantics
// (same producer) is judged again: a block size the indexer's queries do
// not use refuses the lane (out of the ready set, wrong_format counted),
// and going back to the indexer's block size admits it again, so it
// answers under the semantics the catalog now states.
func TestAKvRelaySemanticsOnlyCatalogChangeIsAdmittedAgain(t *testing.T) {
	e := newEnv(t)
	g := kvGenerations(t, 1)[0]
	h, addr := newScriptRelay(t, g)
	s := startService(t, e.nc, e.js, kvIndexerConfig(t, addr)) // the indexer's queries: 64-token blocks
	lane := ckf.LaneCount - 1
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return kvLaneServing(s.Service, lane) })
	wrongFormat := func() float64 {
		v, _, _ := promtest.Value(s.Metrics(), MetricFaults+`{dc="a-kv",kind="wrong_format"}`)
		return v
	}
	if wrongFormat() != 0 {
		t.Fatal("wrong_format counted for a compatible pool")
	}

	h.set(withBlockSize(g.Descriptor, 32))
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		st, err := statusOf(s.Service, lane)
		switch {
		case err != nil:
			return err
		case st.State != PhaseRefused || isReady(s.Service, lane):
			return fmt.Errorf("kvrelay lane %+v ready=%t after the block size changed to 32", st, isReady(s.Service, lane))
		case s.kvMetrics.Faults("a-kv", client.ReasonSemanticsChanged) != 1 || s.kvMetrics.Faults("a-kv", client.ReasonRefused) != 1:
			return fmt.Errorf("semantics_changed %v, refused %v", s.kvMetrics.Faults("a-kv", client.ReasonSemanticsChanged),
				s.kvMetrics.Faults("a-kv", client.ReasonRefused))
		}
		return nil
	})
	if wrongFormat() != 1 {
		t.Fatalf("wrong_format %v, want 1", wrongFormat())
	}
	// A refusal for good is not retried while the catalog repeats itself.
	sent := h.sent.Load()
	testenv.WaitFor(t, waitTotal, "four catalog repeats", func() bool { return h.sent.Load() >= sent+4 })
	if n := s.kvMetrics.Faults("a-kv", client.ReasonRefused); n != 1 {
		t.Fatalf("%v refusals after catalog repeats, want 1", n)
	}
	if n := s.kvMetrics.Faults("a-kv", client.ReasonAdmitFailed); n != 0 {
		t.Fatalf("a semantics refusal was retried %v times", n)
	}

	h.set(withBlockSize(g.Descriptor, 64))
	testenv.Eventually(t, waitTotal, waitInterval, func() error { return kvLaneServing(s.Service, lane) })
	if n := s.kvMetrics.Faults("a-kv", client.ReasonRefused); n != 1 {
		t.Fatalf("%v refusals, want 1", n)
	}
	if v, _, _ := promtest.Value(s.Metrics(), `ckf_kvrelay_client_installs_total{source="a-kv"}`); v != 2 {
		t.Fatalf("%v installs, want 2: the second under the new semantics", v)
	}
}
