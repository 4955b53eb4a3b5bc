package server_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server/servertest"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// newLanePub is a pool publishing one in-memory lane of 1024 buckets.
func newLanePub(t *testing.T, model, endpoint string, incarnation uint64) *servertest.Pub {
	t.Helper()
	spec := server.PoolSpec{Model: model, Namespace: "prod", Component: "backend", Endpoint: endpoint, BlockSize: 16,
		Roles: []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_AGGREGATED}}
	g, err := spec.Generation(7, incarnation, 1, ckf.NewFormatIdentity(42, 1024))
	if err != nil {
		t.Fatal(err)
	}
	p := servertest.NewPub()
	p.SetGen(g, 1024)
	return p
}

// serveMulti serves srv on loopback until the test ends and returns a
// client of it.
func serveMulti(t *testing.T, srv *server.Server) kvrelayv1.KvEventRelayClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return kvrelayv1.NewKvEventRelayClient(conn)
}

// nextCatalog reads catalog updates until one's revision passes after.
// watchCatalog opens a catalog watch.
func watchCatalog(t *testing.T, ctx context.Context, c kvrelayv1.KvEventRelayClient) kvrelayv1.KvEventRelay_WatchKvPoolCatalogClient {
	t.Helper()
	cs, err := c.WatchKvPoolCatalog(ctx, &kvrelayv1.WatchKvPoolCatalogRequest{SubscriberId: "cat", ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// firstRecv returns the first message of stream s, whose opening returned
// err.
func firstRecv[M any](t *testing.T, s interface{ Recv() (M, error) }, err error) M {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// firstReadiness subscribes to serving readiness and returns its first
// update, which must be valid.
func firstReadiness(t *testing.T, ctx context.Context, c kvrelayv1.KvEventRelayClient) *kvrelayv1.ServingReadinessUpdate {
	t.Helper()
	rs, err := c.SubscribeServingReadiness(ctx, &kvrelayv1.SubscribeServingReadinessRequest{SubscriberId: "ready", ContractMarker: kvrelayv1.ContractMarker})
	ru := firstRecv(t, rs, err)
	if errs, err := kvrelay.ValidateReadinessUpdate(ru); err != nil || errors.Join(errs...) != nil {
		t.Fatalf("readiness update invalid: %v %v", err, errs)
	}
	return ru
}

func nextCatalog(t *testing.T, cs kvrelayv1.KvEventRelay_WatchKvPoolCatalogClient, after uint64) *kvrelayv1.KvPoolCatalogUpdate {
	t.Helper()
	for {
		u, err := cs.Recv()
		if err != nil {
			t.Fatalf("catalog: %v", err)
		}
		if _, err := kvrelay.ValidateCatalogUpdate(u); err != nil {
			t.Fatalf("catalog update invalid: %v", err)
		}
		if u.Revision > after {
			return u
		}
	}
}

func catalogModels(u *kvrelayv1.KvPoolCatalogUpdate) []string {
	var out []string
	for _, d := range u.GetSnapshot().GetPools() {
		out = append(out, d.Registrations[0].CanonicalModelId)
	}
	return out
}

// subscribe opens a pool stream of g and reads its (one-chunk) snapshot.
func subscribe(t *testing.T, ctx context.Context, c kvrelayv1.KvEventRelayClient, g server.Generation, id string) (kvrelayv1.KvEventRelay_SubscribeKvPoolClient, error) {
	t.Helper()
	ps, err := c.SubscribeKvPool(ctx, &kvrelayv1.SubscribeKvPoolRequest{SubscriberId: id, ExpectedProducer: g.Descriptor.Producer,
		ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		t.Fatal(err)
	}
	u, err := ps.Recv()
	if err != nil {
		return nil, err
	}
	if u.Kind != kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK || u.Producer.ProducerIncarnation != g.Key.ProducerIncarnation {
		t.Fatalf("%s: first frame %v of incarnation %d, want a snapshot chunk of %d", id, u.Kind, u.Producer.ProducerIncarnation, g.Key.ProducerIncarnation)
	}
	return ps, nil
}

// nextDelta reads the stream's next delta, skipping heartbeats.
func nextDelta(ps kvrelayv1.KvEventRelay_SubscribeKvPoolClient) (*kvrelayv1.FilterUpdate, error) {
	for {
		u, err := ps.Recv()
		if err != nil || u.Kind != kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_HEARTBEAT {
			return u, err
		}
	}
}

func reasonOf(err error, trailer map[string][]string) (codes.Code, kvrelayv1.RelayErrorReason) {
	return status.Code(err), kvrelay.ReasonFromTrailer(trailer)
}

// One server serves two pools in one catalog: the catalog, readiness and
// load streams list both, each pool stream follows its own pool with its
// own subscriber limit, and removing one ends its streams with
// PUBLICATION_UNAVAILABLE and moves the catalog while the other goes on.
func TestServerServesSeveralPoolsInOneCatalog(t *testing.T) {
	cfg := server.DefaultConfig()
	cfg.MaxSubscribersPerPool = 1
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	srv, err := server.New(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	llama := newLanePub(t, "llama", "generate", 3)
	qwen := newLanePub(t, "qwen", "generate", 5)
	qwen.SetLoad(server.PoolLoad{UsedBlocks: 10, TotalBlocks: 100, ObservedRanks: 1, ExpectedRanks: 1}, nil)
	srv.AddPool("llama", llama)
	srv.AddPool("qwen", qwen)
	if got := srv.Pools(); !slices.Equal(got, []string{"llama", "qwen"}) {
		t.Fatalf("pools %v", got)
	}
	c := serveMulti(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cs := watchCatalog(t, ctx, c)
	first := nextCatalog(t, cs, 0)
	if got := catalogModels(first); !slices.Equal(got, []string{"llama", "qwen"}) {
		t.Fatalf("catalog %v, want both pools", got)
	}

	if ru := firstReadiness(t, ctx, c); len(ru.Entries) != 2 {
		t.Fatalf("readiness: %d entries, want 2", len(ru.Entries))
	}
	ls, err := c.SubscribeKvPoolLoad(ctx, &kvrelayv1.SubscribeKvPoolLoadRequest{SubscriberId: "load", ContractMarker: kvrelayv1.ContractMarker})
	lu := firstRecv(t, ls, err)
	if len(lu.Pools) != 2 || lu.Pools[1].KvUsedBlocks != 10 || lu.Pools[0].KvUsedBlocks != 0 {
		t.Fatalf("load window %+v, want llama unknown and qwen 10 used", lu.Pools)
	}
	ss, err := c.SubscribeServingLoad(ctx, &kvrelayv1.SubscribeServingLoadRequest{SubscriberId: "serving", ContractMarker: kvrelayv1.ContractMarker})
	su := firstRecv(t, ss, err)
	if len(su.Pools) != 2 || len(su.Models) != 2 {
		t.Fatalf("serving load: %d pools, %d models, want 2 and 2", len(su.Pools), len(su.Models))
	}

	// Each pool has its own subscriber limit of 1.
	sl, err := subscribe(t, ctx, c, llama.Gen(), "a")
	if err != nil {
		t.Fatal(err)
	}
	sq, err := subscribe(t, ctx, c, qwen.Gen(), "b")
	if err != nil {
		t.Fatalf("qwen refused while llama holds its own pool's slot: %v", err)
	}
	extra, err := c.SubscribeKvPool(ctx, &kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "c", ExpectedProducer: llama.Gen().Descriptor.Producer,
		ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := extra.Recv(); status.Code(err) != codes.ResourceExhausted ||
		kvrelay.ReasonFromTrailer(extra.Trailer()) != kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_RESOURCE_LIMIT {
		t.Fatalf("a second llama subscriber: %v %v, want RESOURCE_LIMIT", err, extra.Trailer())
	}

	for _, name := range []string{"llama", "qwen"} {
		if n := promtest.Count(reg, `ckf_kvrelay_pool_subscribers{pool="`+name+`"}`); n != 1 {
			t.Fatalf("%s: %v subscribers counted, want 1", name, n)
		}
	}

	// Deltas go to their own pool's stream.
	llama.Publish(cbi1.Image{Bucket: 1, Word: 0x11})
	qwen.Publish(cbi1.Image{Bucket: 2, Word: 0x22})
	for name, ps := range map[string]kvrelayv1.KvEventRelay_SubscribeKvPoolClient{"llama": sl, "qwen": sq} {
		u, err := nextDelta(ps)
		if err != nil || u.Kind != kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_DELTA || u.Sequence != 1 {
			t.Fatalf("%s: %v %v, want delta 1", name, u, err)
		}
		want := map[string]uint64{"llama": llama.Gen().Key.ProducerIncarnation, "qwen": qwen.Gen().Key.ProducerIncarnation}[name]
		if u.Producer.ProducerIncarnation != want {
			t.Fatalf("%s: delta of incarnation %d, want %d", name, u.Producer.ProducerIncarnation, want)
		}
	}

	// Removing llama ends its stream PUBLICATION_UNAVAILABLE and moves the
	// catalog; qwen's stream goes on.
	if !srv.RemovePool("llama") || srv.RemovePool("llama") {
		t.Fatal("RemovePool: want true once, then false")
	}
	_, err = nextDelta(sl)
	if code, reason := reasonOf(err, sl.Trailer()); code != codes.Unavailable || reason != kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE {
		t.Fatalf("removed pool's stream: %v (%v), want UNAVAILABLE / PUBLICATION_UNAVAILABLE", err, reason)
	}
	if strings.Contains(promtest.Text(reg), `pool="llama"`) {
		t.Fatalf("llama's subscriber series outlived the pool:\n%s", promtest.Text(reg))
	}
	second := nextCatalog(t, cs, first.Revision)
	if got := catalogModels(second); !slices.Equal(got, []string{"qwen"}) {
		t.Fatalf("catalog after removal %v, want [qwen]", got)
	}
	qwen.Publish(cbi1.Image{Bucket: 3, Word: 0x33})
	if u, err := nextDelta(sq); err != nil || u.Sequence != 2 {
		t.Fatalf("qwen after llama's removal: %v %v, want delta 2", u, err)
	}
	gone, err := c.SubscribeKvPool(ctx, &kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "d", ExpectedProducer: llama.Gen().Descriptor.Producer,
		ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Recv(); status.Code(err) != codes.NotFound {
		t.Fatalf("subscribing to a removed pool: %v, want NOT_FOUND", err)
	}

	// A pool in standby is absent; one added again is listed again.
	qwen.Withdraw()
	third := nextCatalog(t, cs, second.Revision)
	if got := catalogModels(third); len(got) != 0 {
		t.Fatalf("catalog with qwen in standby %v, want empty", got)
	}
	srv.AddPool("llama", llama)
	if got := catalogModels(nextCatalog(t, cs, third.Revision)); !slices.Equal(got, []string{"llama"}) {
		t.Fatalf("catalog after llama came back %v", got)
	}
	_, err = nextDelta(sq)
	if code, reason := reasonOf(err, sq.Trailer()); code != codes.Unavailable || reason != kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE {
		t.Fatalf("qwen's stream after its generation ended: %v (%v)", err, reason)
	}
}

// Two pools publishing the same pool id (the same model and endpoint under
// two names) are listed once: a catalog must not name a pool twice.
func TestServerListsAPoolIDOnce(t *testing.T) {
	srv, err := server.New(nil, server.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	srv.AddPool("a", newLanePub(t, "llama", "generate", 1))
	srv.AddPool("b", newLanePub(t, "llama", "generate", 2))
	srv.AddPool("c", newLanePub(t, "llama", "chat", 3))
	c := serveMulti(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := watchCatalog(t, ctx, c)
	u := nextCatalog(t, cs, 0)
	if len(u.Snapshot.Pools) != 2 || u.Snapshot.Pools[0].Producer.ProducerIncarnation != 1 {
		t.Fatalf("catalog %v, want a (incarnation 1) and c", u.Snapshot.Pools)
	}
	// One model on two endpoints: one entry, two members.
	if ru := firstReadiness(t, ctx, c); len(ru.Entries) != 1 || len(ru.Entries[0].Members) != 2 {
		t.Fatalf("readiness %+v", ru.Entries)
	}
}

// A pool whose serving load has an estimated prefill goes out DEGRADED
// (§6.4: gauges only when COMPLETE), its workers and source time still
// given; a measured one COMPLETE with both gauges; none UNAVAILABLE.
func TestServingLoadOfAnEstimatedPrefillIsDegraded(t *testing.T) {
	srv, err := server.New(nil, server.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	src := time.UnixMilli(1_700_000_000_123)
	pubs := map[string]*servertest.Pub{}
	for _, name := range []string{"measured", "estimated", "none"} {
		p := newLanePub(t, name, "generate", 3)
		if name != "none" {
			p.SetLoad(server.PoolLoad{}, &server.ServingLoad{ActivePrefillTokens: 900, ActiveDecodeBlocks: 12, Workers: 2, SourceTime: src,
				PrefillEstimated: name == "estimated"})
		}
		srv.AddPool(name, p)
		pubs[name] = p
	}
	c := serveMulti(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ss, err := c.SubscribeServingLoad(ctx, &kvrelayv1.SubscribeServingLoadRequest{SubscriberId: "serving", ContractMarker: kvrelayv1.ContractMarker})
	su := firstRecv(t, ss, err)
	if len(su.Pools) != 3 {
		t.Fatalf("%d pools, want 3", len(su.Pools))
	}
	byPool := map[string]*kvrelayv1.PoolServingLoad{}
	for _, p := range su.Pools {
		for name, pub := range pubs {
			if proto.Equal(p.Producer.PoolId, pub.Gen().Descriptor.Producer.PoolId) {
				byPool[name] = p
			}
		}
	}
	m, e, n := byPool["measured"], byPool["estimated"], byPool["none"]
	if m == nil || e == nil || n == nil {
		t.Fatalf("pools %v", su.Pools)
	}
	if l := m.Load; l.Status != kvrelayv1.DataStatus_DATA_STATUS_COMPLETE || l.Tokens.ActivePrefillTokens == nil || *l.Tokens.ActivePrefillTokens != 900 ||
		l.Tokens.ActiveDecodeBlocks == nil || *l.Tokens.ActiveDecodeBlocks != 12 || m.Deployment.GetLiveWorkers() != 2 {
		t.Fatalf("measured pool %v", m)
	}
	if l := e.Load; l.Status != kvrelayv1.DataStatus_DATA_STATUS_DEGRADED || l.Tokens == nil ||
		l.Tokens.ActivePrefillTokens != nil || l.Tokens.ActiveDecodeBlocks != nil ||
		e.Deployment.LiveWorkers == nil || *e.Deployment.LiveWorkers != 2 || l.SourceObservedMs != uint64(src.UnixMilli()) {
		t.Fatalf("estimated pool %v, want DEGRADED without gauges, with its workers and source time", e)
	}
	if l := n.Load; l.Status != kvrelayv1.DataStatus_DATA_STATUS_UNAVAILABLE || l.Tokens.ActivePrefillTokens != nil || n.Deployment.LiveWorkers != nil {
		t.Fatalf("pool without serving load %v", n)
	}
}
