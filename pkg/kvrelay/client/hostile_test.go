package client_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
)

// hostile is a relay that sends what a test scripts: catalog updates (then
// it holds the stream open) and, per pool stream, frames then an ending.
type hostile struct {
	kvrelayv1.UnimplementedKvEventRelayServer
	catalog []*kvrelayv1.KvPoolCatalogUpdate
	frames  []*kvrelayv1.FilterUpdate
	// end ends a pool stream after its frames (nil: hold it open).
	end func(ss grpc.ServerStream) error
	// info answers GetRelayInfo (nil: version 1, hostileRelay).
	info *kvrelayv1.RelayInfo
}

func (h *hostile) GetRelayInfo(context.Context, *kvrelayv1.RelayInfoRequest) (*kvrelayv1.RelayInfo, error) {
	if h.info != nil {
		return h.info, nil
	}
	return &kvrelayv1.RelayInfo{ProtocolVersion: 1, Relay: hostileRelay, ContractMarker: kvrelayv1.ContractMarker}, nil
}

func (h *hostile) WatchKvPoolCatalog(_ *kvrelayv1.WatchKvPoolCatalogRequest, ss kvrelayv1.KvEventRelay_WatchKvPoolCatalogServer) error {
	for _, u := range h.catalog {
		if err := ss.Send(u); err != nil {
			return err
		}
	}
	<-ss.Context().Done()
	return nil
}

func (h *hostile) SubscribeKvPool(_ *kvrelayv1.SubscribeKvPoolRequest, ss kvrelayv1.KvEventRelay_SubscribeKvPoolServer) error {
	for _, u := range h.frames {
		if err := ss.Send(u); err != nil {
			return err
		}
	}
	if h.end != nil {
		return h.end(ss)
	}
	<-ss.Context().Done()
	return nil
}

var hostileRelay = &kvrelayv1.RelayIdentity{DrtInstanceId: 1, RelayIncarnation: 2}

// hostileGen is the pool every hostile script is about (§8.2's consumer
// fixture: dc 7, incarnation 11, layout 13, seed 42, 1024 buckets).
func hostileGen(t *testing.T, buckets uint64, dc uint64) server.Generation {
	t.Helper()
	g, err := testSpec.Generation(dc, 11, 13, ckf.NewFormatIdentity(42, buckets))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func catalogOf(rev uint64, pools ...*kvrelayv1.KvPoolDescriptor) *kvrelayv1.KvPoolCatalogUpdate {
	return &kvrelayv1.KvPoolCatalogUpdate{ProtocolVersion: 1, Relay: hostileRelay, Revision: rev,
		Snapshot: &kvrelayv1.KvPoolCatalogSnapshot{Pools: pools}, ContractMarker: kvrelayv1.ContractMarker}
}

func frame(g server.Generation, kind kvrelayv1.FilterUpdateKind, base, seq uint64, payload []byte) *kvrelayv1.FilterUpdate {
	return &kvrelayv1.FilterUpdate{ProtocolVersion: 1, Relay: hostileRelay, Producer: g.Descriptor.Producer, BaseSequence: base, Sequence: seq,
		Kind: kind, Payload: payload, ContractMarker: kvrelayv1.ContractMarker}
}

func chunks(t *testing.T, g server.Generation, seq uint64, words []uint64) []*kvrelayv1.FilterUpdate {
	t.Helper()
	f := g.Key.Format()
	var out []*kvrelayv1.FilterUpdate
	for i := range f.ChunkCount() {
		p, err := cbi1.AppendSnapshotChunk(nil, f, g.Key.DcID, seq, words, i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, frame(g, kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, seq, seq, p))
	}
	return out
}

func delta(t *testing.T, g server.Generation, base uint64, images ...cbi1.Image) *kvrelayv1.FilterUpdate {
	t.Helper()
	p, err := cbi1.AppendDelta(nil, g.Key.Format(), g.Key.DcID, base, base+1, images)
	if err != nil {
		t.Fatal(err)
	}
	return frame(g, kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_DELTA, base, base+1, p)
}

func withTrailer(code codes.Code, reason kvrelayv1.RelayErrorReason) func(grpc.ServerStream) error {
	return func(ss grpc.ServerStream) error {
		ss.SetTrailer(metadata.Pairs(kvrelayv1.ErrorReasonTrailer, kvrelay.TrailerValue(reason)))
		return status.Error(code, "scripted")
	}
}

// A hostile relay: every invalid stream state invalidates the lane (it is
// never ready from an unvalidated stream), is counted by reason, and
// nothing crashes; the follower keeps resubscribing.
func TestHostileRelayIsNeverAnsweredFrom(t *testing.T) {
	g := hostileGen(t, 1024, 7)
	other := hostileGen(t, 1024, 8)
	big := hostileGen(t, 1<<20, 7)
	lane := make([]uint64, 1024)
	lane[9] = 0x0001ABCD00001234
	snap := func() []*kvrelayv1.FilterUpdate { return chunks(t, g, 5, lane) }
	then := func(a []*kvrelayv1.FilterUpdate, b ...*kvrelayv1.FilterUpdate) []*kvrelayv1.FilterUpdate {
		return append(a, b...)
	}
	corrupt := func(u *kvrelayv1.FilterUpdate) *kvrelayv1.FilterUpdate {
		u = proto.Clone(u).(*kvrelayv1.FilterUpdate)
		u.Payload[len(u.Payload)-1] ^= 1
		return u
	}
	wrongKey := proto.Clone(g.Descriptor.Producer).(*kvrelayv1.ProducerIdentity)
	wrongKey.ProducerIncarnation++
	keyed := delta(t, g, 5, cbi1.Image{Bucket: 1, Word: 1})
	keyed.Producer = wrongKey
	otherRelay := delta(t, g, 5, cbi1.Image{Bucket: 1, Word: 1})
	otherRelay.Relay = &kvrelayv1.RelayIdentity{DrtInstanceId: 9, RelayIncarnation: 9}
	bigChunks := chunks(t, big, 0, make([]uint64, 1<<20))
	restarted := chunks(t, big, 3, make([]uint64, 1<<20)) // another snapshot, begun again mid-assembly
	oversized := frame(g, kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_DELTA, 5, 6, bytes.Repeat([]byte{1}, 9<<20))
	unknownKind := frame(g, 99, 5, 5, nil)
	dupDesc := proto.Clone(g.Descriptor).(*kvrelayv1.KvPoolDescriptor)

	for _, tc := range []struct {
		name      string
		h         *hostile
		want      client.Reason
		installed bool // the valid prefix installs before the fault
		// slow: frames of 4 MiB follow each other; a loaded machine may
		// take longer than the stall timeout between them.
		slow bool
	}{
		{name: "bad checksum in a chunk", h: &hostile{frames: []*kvrelayv1.FilterUpdate{corrupt(snap()[0])}}, want: client.ReasonBadFrame},
		{name: "bad checksum in a delta", h: &hostile{frames: then(snap(), corrupt(delta(t, g, 5, cbi1.Image{Bucket: 1, Word: 1})))}, want: client.ReasonBadFrame, installed: true},
		{name: "gap", h: &hostile{frames: then(snap(), delta(t, g, 6, cbi1.Image{Bucket: 1, Word: 1}))}, want: client.ReasonGap, installed: true},
		{name: "delta before the snapshot", h: &hostile{frames: []*kvrelayv1.FilterUpdate{delta(t, g, 5, cbi1.Image{Bucket: 1, Word: 1})}}, want: client.ReasonGap},
		{name: "wrong producer key", h: &hostile{frames: then(snap(), keyed)}, want: client.ReasonWrongProducer, installed: true},
		{name: "frame of another relay", h: &hostile{frames: then(snap(), otherRelay)}, want: client.ReasonRelayChanged, installed: true},
		{name: "out-of-order chunk", h: &hostile{catalog: []*kvrelayv1.KvPoolCatalogUpdate{catalogOf(1, big.Descriptor)}, frames: []*kvrelayv1.FilterUpdate{bigChunks[1], bigChunks[0]}}, want: client.ReasonChunkSequence},
		{name: "chunk 0 again before the snapshot completes", h: &hostile{catalog: []*kvrelayv1.KvPoolCatalogUpdate{catalogOf(1, big.Descriptor)},
			frames: []*kvrelayv1.FilterUpdate{bigChunks[0], restarted[0], restarted[1]}}, want: client.ReasonChunkSequence, slow: true},
		{name: "chunk after installation", h: &hostile{frames: then(snap(), snap()...)}, want: client.ReasonChunkSequence, installed: true},
		{name: "heartbeat before installation", h: &hostile{frames: []*kvrelayv1.FilterUpdate{frame(g, kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_HEARTBEAT, 5, 5, nil)}}, want: client.ReasonHeartbeat},
		{name: "heartbeat at another sequence", h: &hostile{frames: then(snap(), frame(g, kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_HEARTBEAT, 4, 4, nil))}, want: client.ReasonHeartbeat, installed: true},
		{name: "unknown kind", h: &hostile{frames: then(snap(), unknownKind)}, want: client.ReasonBadFrame, installed: true},
		{name: "oversized frame", h: &hostile{frames: then(snap(), oversized)}, want: client.ReasonResourceLimit, installed: true},
		{name: "stall", h: &hostile{frames: snap()}, want: client.ReasonStalled, installed: true},
		{name: "clean end of stream", h: &hostile{frames: snap(), end: func(grpc.ServerStream) error { return nil }}, want: client.ReasonStreamEnd, installed: true},
		{name: "lagged", h: &hostile{frames: snap(), end: withTrailer(codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SUBSCRIBER_LAGGED)}, want: client.ReasonLagged, installed: true},
		{name: "snapshot progress timeout", h: &hostile{end: withTrailer(codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT)}, want: client.ReasonSnapshotTimeout},
		{name: "producer changed", h: &hostile{end: withTrailer(codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PRODUCER_CHANGED)}, want: client.ReasonProducerChanged},
		{name: "duplicate descriptors", h: &hostile{catalog: []*kvrelayv1.KvPoolCatalogUpdate{catalogOf(1, g.Descriptor, dupDesc)}}, want: client.ReasonCatalogInvalid},
		{name: "two pools for the model", h: &hostile{catalog: []*kvrelayv1.KvPoolCatalogUpdate{catalogOf(1, g.Descriptor, other.Descriptor)}}, want: client.ReasonAmbiguous},
		{name: "catalog revision backwards", h: &hostile{catalog: []*kvrelayv1.KvPoolCatalogUpdate{catalogOf(2, g.Descriptor), catalogOf(1, g.Descriptor)}}, want: client.ReasonCatalogRegressed},
		{name: "catalog revision reused", h: &hostile{catalog: []*kvrelayv1.KvPoolCatalogUpdate{catalogOf(2, g.Descriptor), catalogOf(2, other.Descriptor)}}, want: client.ReasonCatalogRegressed},
		{name: "relay info of another protocol version", h: &hostile{info: &kvrelayv1.RelayInfo{ProtocolVersion: 2, Relay: hostileRelay, ContractMarker: kvrelayv1.ContractMarker}}, want: client.ReasonContract},
		{name: "relay info of another marker", h: &hostile{info: &kvrelayv1.RelayInfo{ProtocolVersion: 1, Relay: hostileRelay}}, want: client.ReasonContract},
		{name: "catalog of another relay than the info's", h: &hostile{info: &kvrelayv1.RelayInfo{ProtocolVersion: 1, Relay: &kvrelayv1.RelayIdentity{DrtInstanceId: 5}, ContractMarker: kvrelayv1.ContractMarker}}, want: client.ReasonRelayChanged},
		{name: "catalog of a bad marker", h: &hostile{catalog: []*kvrelayv1.KvPoolCatalogUpdate{{ProtocolVersion: 1, Relay: hostileRelay, Revision: 1}}}, want: client.ReasonCatalogInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.h.catalog == nil {
				tc.h.catalog = []*kvrelayv1.KvPoolCatalogUpdate{catalogOf(1, g.Descriptor)}
			}
			addr := serveFake(t, tc.h)
			sink := newRecSink(t)
			timeout := 300 * time.Millisecond
			if tc.slow {
				timeout = waitTotal / 2
			}
			_, m, stop := startFollower(t, addr, sink, func(c *client.Config) { c.FrameTimeout = timeout })
			sink.waitFor(t, string(tc.want), func(s *recSink) bool { return s.has("invalidate", tc.want) })
			stop()
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if sink.ready {
				t.Fatalf("lane ready after %s", tc.want)
			}
			if got := sink.has("install", ""); got != tc.installed {
				t.Fatalf("installed %t, want %t: %+v", got, tc.installed, sink.events)
			}
			// Every install was of the valid snapshot, never of bad data.
			if tc.installed && (sink.words[9] != lane[9] || sink.count("apply") != 0) {
				t.Fatalf("lane holds unvalidated data: %+v", sink.events)
			}
			if m.Faults("dc-k", tc.want) < 1 {
				t.Fatalf("fault not counted")
			}
		})
	}
}
