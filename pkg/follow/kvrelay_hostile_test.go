package follow

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// gapRelay serves a valid snapshot, then a delta off the installed
// sequence that would write poison into bucket 3: a gap the lane must
// refuse, every time it resubscribes.
type gapRelay struct {
	kvrelayv1.UnimplementedKvEventRelayServer
	desc    *kvrelayv1.KvPoolDescriptor
	relay   *kvrelayv1.RelayIdentity
	chunk   []byte
	poison  []byte
	streams atomic.Int64
}

const poisonWord = 0xBAD0BAD0BAD0BAD0

func (g *gapRelay) GetRelayInfo(context.Context, *kvrelayv1.RelayInfoRequest) (*kvrelayv1.RelayInfo, error) {
	return &kvrelayv1.RelayInfo{ProtocolVersion: 1, Relay: g.relay, ContractMarker: kvrelayv1.ContractMarker}, nil
}

func (g *gapRelay) WatchKvPoolCatalog(_ *kvrelayv1.WatchKvPoolCatalogRequest, ss kvrelayv1.KvEventRelay_WatchKvPoolCatalogServer) error {
	if err := ss.Send(&kvrelayv1.KvPoolCatalogUpdate{ProtocolVersion: 1, Relay: g.relay, Revision: 1,
		Snapshot: &kvrelayv1.KvPoolCatalogSnapshot{Pools: []*kvrelayv1.KvPoolDescriptor{g.desc}}, ContractMarker: kvrelayv1.ContractMarker}); err != nil {
		return err
	}
	<-ss.Context().Done()
	return nil
}

func (g *gapRelay) SubscribeKvPool(_ *kvrelayv1.SubscribeKvPoolRequest, ss kvrelayv1.KvEventRelay_SubscribeKvPoolServer) error {
	g.streams.Add(1)
	fr := func(kind kvrelayv1.FilterUpdateKind, base, seq uint64, p []byte) *kvrelayv1.FilterUpdate {
		return &kvrelayv1.FilterUpdate{ProtocolVersion: 1, Relay: g.relay, Producer: g.desc.Producer, BaseSequence: base, Sequence: seq,
			Kind: kind, Payload: p, ContractMarker: kvrelayv1.ContractMarker}
	}
	for _, u := range []*kvrelayv1.FilterUpdate{
		fr(kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, 5, 5, g.chunk),
		fr(kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_DELTA, 6, 7, g.poison), // installed is 5
	} {
		if err := ss.Send(u); err != nil {
			return err
		}
	}
	<-ss.Context().Done()
	return nil
}

// A relay that breaks contiguity never gets its data into the table: each
// time the lane installs the valid snapshot and then meets the gap, it
// leaves the ready set and the poison is never stored.
func TestKvRelayLaneRefusesAGapFromAHostileRelay(t *testing.T) {
	e := newEnv(t)
	spec := kvSpec
	gen, err := spec.Generation(7, 11, 13, ckf.NewFormatIdentity(42, 1024))
	if err != nil {
		t.Fatal(err)
	}
	words := make([]uint64, 1024)
	words[9] = 0x0001ABCD00001234
	f := gen.Key.Format()
	chunk, err := cbi1.AppendSnapshotChunk(nil, f, gen.Key.DcID, 5, words, 0)
	if err != nil {
		t.Fatal(err)
	}
	poison, err := cbi1.AppendDelta(nil, f, gen.Key.DcID, 6, 7, []cbi1.Image{{Bucket: 3, Word: poisonWord}})
	if err != nil {
		t.Fatal(err)
	}
	h := &gapRelay{desc: gen.Descriptor, relay: &kvrelayv1.RelayIdentity{DrtInstanceId: 1, RelayIncarnation: 2}, chunk: chunk, poison: poison}
	gs := grpc.NewServer()
	kvrelayv1.RegisterKvEventRelayServer(gs, h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	s := startService(t, e.nc, e.js, kvIndexerConfig(t, ln.Addr().String()))
	lane := ckf.LaneCount - 1
	testenv.WaitFor(t, waitTotal, "three refused gaps", func() bool {
		if p := s.currentPool(); p != nil {
			if got := p.Indexer().LaneWords(lane, nil); got[3] == poisonWord {
				t.Fatal("the gap's image reached the table")
			}
		}
		return s.kvMetrics.Faults("a-kv", client.ReasonGap) >= 3
	})
	l, _ := laneByName(s.Service, "a-kv")
	if h.streams.Load() < 3 || !strings.Contains(l.LastFault, "gap") {
		t.Fatalf("lane %+v after %d streams", l, h.streams.Load())
	}
	if v, ok, _ := promtest.Value(s.Metrics(), MetricFaults+`{dc="a-kv",kind="kvrelay_gap"}`); !ok || v < 3 {
		t.Fatalf("gap faults %v", v)
	}
}
