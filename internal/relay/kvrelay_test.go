package relay_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/internal/replay"
	"github.com/ckfrelay/ckfrelay/pkg/cbi1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server/servertest"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

const marker = kvrelayv1.ContractMarker

var testSpec = server.PoolSpec{Model: "llama", Aliases: []string{"chat"}, Namespace: "prod", Component: "backend", Endpoint: "generate", BlockSize: 64}

func kvConfig(dc string) relay.Config {
	c := testConfig(dc)
	// Robust on a loaded machine: a lapsed lease would end the epoch
	// mid-test (the tests that want a new epoch delete the lease).
	c.LeaseTTL = 3 * time.Second
	spec := testSpec
	c.KvRelay = &spec
	return c
}

func kvServerConfig() server.Config {
	c := server.DefaultConfig()
	c.PoolHeartbeat, c.CatalogHeartbeat, c.ReadinessHeartbeat, c.LoadWindow = 30*time.Millisecond, 30*time.Millisecond, 30*time.Millisecond, 50*time.Millisecond
	return c
}

// serveKv serves r's publication on loopback TCP until the test ends and
// returns a client (8 MiB receive limit, §2.3) and the server.
func serveKv(t *testing.T, r *relay.Relay, cfg server.Config, dial ...grpc.DialOption) (kvrelayv1.KvEventRelayClient, *grpc.ClientConn, *server.Server) {
	t.Helper()
	srv, addr := servertest.Serve(t, r.Publication(), cfg)
	dial = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8 << 20))}, dial...)
	conn, err := grpc.NewClient("passthrough:///"+addr, dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return kvrelayv1.NewKvEventRelayClient(conn), conn, srv
}

// mirror is a minimal Dynamo-style consumer of one pool stream (§4.4).
type mirror struct {
	key       kvrelay.ProducerKey
	asm       *cbi1.Assembler
	relay     *kvrelayv1.RelayIdentity
	words     []uint64
	seq       uint64
	installed bool
	kinds     []kvrelayv1.FilterUpdateKind
}

func newMirror(t *testing.T, key kvrelay.ProducerKey) *mirror {
	t.Helper()
	asm, err := cbi1.NewAssembler(key.Format())
	if err != nil {
		t.Fatal(err)
	}
	return &mirror{key: key, asm: asm}
}

func (m *mirror) apply(t *testing.T, u *kvrelayv1.FilterUpdate) {
	t.Helper()
	fr, err := kvrelay.CheckFilterUpdate(m.key, u)
	if err != nil {
		t.Fatalf("frame rejected: %v", err)
	}
	if m.relay == nil {
		m.relay = u.Relay
	} else if !proto.Equal(m.relay, u.Relay) {
		t.Fatalf("relay identity changed within the stream")
	}
	m.kinds = append(m.kinds, u.Kind)
	switch u.Kind {
	case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK:
		if m.installed {
			t.Fatalf("snapshot chunk after installation")
		}
		snap, done, err := m.asm.Add(fr)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			m.words, m.seq, m.installed = snap.Words, snap.Epoch, true
		}
	case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_DELTA:
		if !m.installed || u.BaseSequence != m.seq {
			t.Fatalf("delta %d→%d at installed %d (installed %v)", u.BaseSequence, u.Sequence, m.seq, m.installed)
		}
		if err := fr.Delta.ApplyTo(m.words); err != nil {
			t.Fatal(err)
		}
		m.seq = u.Sequence
	case kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_HEARTBEAT:
		if !m.installed || u.Sequence != m.seq {
			t.Fatalf("heartbeat at %d, installed %d (%v)", u.Sequence, m.seq, m.installed)
		}
	}
}

// follow receives frames until cond holds after a frame.
func (m *mirror) follow(t *testing.T, st kvrelayv1.KvEventRelay_SubscribeKvPoolClient, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		u, err := st.Recv()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		m.apply(t, u)
	}
}

func subscribe(t *testing.T, ctx context.Context, c kvrelayv1.KvEventRelayClient, id string, p *kvrelayv1.ProducerIdentity) kvrelayv1.KvEventRelay_SubscribeKvPoolClient {
	t.Helper()
	st, err := c.SubscribeKvPool(ctx, &kvrelayv1.SubscribeKvPoolRequest{SubscriberId: id, ExpectedProducer: p, ContractMarker: marker})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// wantStatus checks a stream (or call) error's code and reason trailer.
func wantStatus(t *testing.T, what string, err error, tr metadata.MD, code codes.Code, reason kvrelayv1.RelayErrorReason) {
	t.Helper()
	if status.Code(err) != code || kvrelay.ReasonFromTrailer(tr) != reason {
		t.Fatalf("%s: %v (trailer %v), want %s / %s", what, err, tr, code, reason)
	}
}

// streamEnd receives until the stream ends and returns its error; every
// frame must pass m (when non-nil).
func streamEnd(t *testing.T, m *mirror, st kvrelayv1.KvEventRelay_SubscribeKvPoolClient) error {
	t.Helper()
	for {
		u, err := st.Recv()
		if err != nil {
			return err
		}
		if m != nil {
			m.apply(t, u)
		}
	}
}

func firstCatalog(t *testing.T, ctx context.Context, c kvrelayv1.KvEventRelayClient, wantPools int) *kvrelayv1.KvPoolCatalogUpdate {
	t.Helper()
	st, err := c.WatchKvPoolCatalog(ctx, &kvrelayv1.WatchKvPoolCatalogRequest{SubscriberId: "t/catalog", ContractMarker: marker})
	if err != nil {
		t.Fatal(err)
	}
	for {
		u, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		perPool, err := kvrelay.ValidateCatalogUpdate(u)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range perPool {
			if e != nil {
				t.Fatal(e)
			}
		}
		if len(u.Snapshot.GetPools()) == wantPools {
			return u
		}
	}
}

func publishedMessages(steps []replay.Step) uint64 {
	n := uint64(0)
	for _, s := range steps {
		if len(s.Events) > 0 {
			n++
		}
	}
	return n
}

// §8.1 scenarios 1, 2, 3, 5 on a real relay: info, catalog heartbeat, a
// mirror that reproduces the relay's lane exactly at its snapshot and then
// follows the deltas, heartbeats at the installed sequence, readiness and
// both load planes, health.
func TestKvRelayMirrorReproducesTheRelaysLane(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := kvConfig("a")
	r, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	// Active comes a moment before the publication's first generation:
	// until then the catalog is empty.
	testenv.WaitFor(t, 0, "published", func() bool { _, ok := r.Publication().Generation(); return ok })
	scfg := kvServerConfig()
	reg := prometheus.NewRegistry()
	scfg.Metrics = reg
	c, conn, _ := serveKv(t, r, scfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	info, err := c.GetRelayInfo(ctx, &kvrelayv1.RelayInfoRequest{ContractMarker: marker})
	if err != nil || info.ProtocolVersion != 1 || info.ContractMarker != marker || info.Relay == nil {
		t.Fatalf("info %v: %v", info, err)
	}
	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: server.ServiceName})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v: %v", hc, err)
	}

	// Catalog: one valid descriptor; the next message is a heartbeat with
	// the same revision and content.
	cst, err := c.WatchKvPoolCatalog(ctx, &kvrelayv1.WatchKvPoolCatalogRequest{SubscriberId: "t/catalog", ContractMarker: marker})
	if err != nil {
		t.Fatal(err)
	}
	c1, err := cst.Recv()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := cst.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if c1.Revision != c2.Revision || !proto.Equal(c1.Snapshot, c2.Snapshot) || !proto.Equal(c1.Relay, c2.Relay) || len(c1.Snapshot.Pools) != 1 {
		t.Fatalf("catalog heartbeat %v then %v", c1, c2)
	}
	desc := c1.Snapshot.Pools[0]
	if err := kvrelay.ValidatePoolDescriptor(desc); err != nil {
		t.Fatal(err)
	}
	if reg := desc.Registrations[0]; reg.CanonicalModelId != "llama" || !slices.Equal(reg.Aliases, []string{"chat"}) ||
		desc.QuerySemantics.KvBlockSize != 64 || !slices.Equal(desc.PoolRoles, []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY}) {
		t.Fatalf("descriptor %v", desc)
	}
	st := r.Status()
	if desc.Producer.ProducerIncarnation != st.Epoch || desc.Producer.PoolId.DcId != kvrelay.DcID("a") {
		t.Fatalf("producer %v, status %+v", desc.Producer, st)
	}
	key, err := kvrelay.KeyOf(desc.Producer)
	if err != nil {
		t.Fatal(err)
	}

	// Events before the subscription: the snapshot is exactly the lane.
	steps := traceEvents(t, 400)
	half := len(steps) / 2
	publishEvents(t, js, "a", steps[:half])
	n := publishedMessages(steps[:half])
	testenv.WaitFor(t, 0, "first half applied", func() bool { return r.Status().InputSeq >= n })
	m := newMirror(t, key)
	pst := subscribe(t, ctx, c, "t/ckf", desc.Producer)
	m.follow(t, pst, "snapshot", func() bool { return m.installed })
	want := reference(t, cfg.CKF, steps[:half]).Words()
	if !slices.Equal(m.words, want) {
		t.Fatalf("snapshot differs from the relay's lane")
	}
	if m.seq != r.Status().Sequence {
		t.Fatalf("snapshot at %d, relay at %d", m.seq, r.Status().Sequence)
	}
	for _, k := range m.kinds {
		if k != kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK {
			t.Fatalf("frame %s before the snapshot completed", k)
		}
	}
	// Then the deltas: the mirror follows the lane.
	snapSeq := m.seq
	publishEvents(t, js, "a", steps[half:])
	want = reference(t, cfg.CKF, steps).Words()
	m.follow(t, pst, "deltas", func() bool { return slices.Equal(m.words, want) })
	if m.seq <= snapSeq {
		t.Fatalf("no delta after the snapshot (sequence %d)", m.seq)
	}
	before := len(m.kinds)
	m.follow(t, pst, "heartbeat", func() bool {
		return len(m.kinds) > before && m.kinds[len(m.kinds)-1] == kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_HEARTBEAT
	})
	words, _, laneSeq := laneImage(t, js, "a")
	if !slices.Equal(words, m.words) || laneSeq != m.seq {
		t.Fatalf("mirror at %d differs from the NATS lane at %d", m.seq, laneSeq)
	}

	// Readiness: READY under legacy fallback, one legacy member with the pool.
	rst, err := c.SubscribeServingReadiness(ctx, &kvrelayv1.SubscribeServingReadinessRequest{SubscriberId: "t/readiness", ContractMarker: marker})
	if err != nil {
		t.Fatal(err)
	}
	ru, err := rst.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if per, err := kvrelay.ValidateReadinessUpdate(ru); err != nil || len(per) != 1 || per[0] != nil {
		t.Fatalf("readiness %v: %v %v", ru, err, per)
	}
	e := ru.Entries[0]
	if e.CanonicalModelId != "llama" || e.State != kvrelayv1.ServingReadinessState_SERVING_READINESS_STATE_READY || !e.LegacyFallbackActive ||
		len(e.Members) != 1 || !proto.Equal(e.Members[0].PoolId, desc.Producer.PoolId) {
		t.Fatalf("readiness entry %v", e)
	}
	// KV load: the pool with its producer, occupancy unknown (0).
	lst, err := c.SubscribeKvPoolLoad(ctx, &kvrelayv1.SubscribeKvPoolLoadRequest{SubscriberId: "t/load", ContractMarker: marker})
	if err != nil {
		t.Fatal(err)
	}
	l1, err := lst.Recv()
	if err != nil {
		t.Fatal(err)
	}
	l2, err := lst.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(l1.Pools) != 1 || !proto.Equal(l1.Pools[0].Producer, desc.Producer) || l1.Pools[0].KvUsedBlocks != 0 || l1.Pools[0].KvExpectedRanks != 0 ||
		l2.WindowSequence <= l1.WindowSequence || l1.WindowMs != 50 {
		t.Fatalf("load windows %v then %v", l1, l2)
	}
	sst, err := c.SubscribeServingLoad(ctx, &kvrelayv1.SubscribeServingLoadRequest{SubscriberId: "t/serving", ContractMarker: marker})
	if err != nil {
		t.Fatal(err)
	}
	su, err := sst.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(su.Pools) != 1 || su.Pools[0].Load.Status != kvrelayv1.DataStatus_DATA_STATUS_UNAVAILABLE || len(su.Models) != 1 ||
		su.Models[0].Load.Status != kvrelayv1.DataStatus_DATA_STATUS_UNAVAILABLE {
		t.Fatalf("serving load %v", su)
	}
}

// A standby relay lists no pool and answers POOL_NOT_FOUND; when the
// leader stops, its streams end with PUBLICATION_UNAVAILABLE (every frame
// still of the old key), the standby takes over under a new key, the old
// key gets PRODUCER_CHANGED and the new one a snapshot (§8.1 scenario 6).
func TestKvRelayStandbyAndTakeover(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	a := kvConfig("a")
	b := kvConfig("a")
	b.Instance = "relay-a-standby"
	ra, stopA := startRelay(t, nc, js, a)
	testenv.WaitFor(t, 0, "a active", func() bool { return ra.Status().State == relay.StateActive })
	rb, _ := startRelay(t, nc, js, b)
	testenv.WaitFor(t, 0, "b standby", func() bool { return rb.Status().State == relay.StateStandby })
	ca, _, _ := serveKv(t, ra, kvServerConfig())
	cb, _, _ := serveKv(t, rb, kvServerConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	descA := firstCatalog(t, ctx, ca, 1).Snapshot.Pools[0]
	keyA, _ := kvrelay.KeyOf(descA.Producer)
	if u := firstCatalog(t, ctx, cb, 0); len(u.Snapshot.Pools) != 0 {
		t.Fatalf("standby catalog %v", u)
	}
	st := subscribe(t, ctx, cb, "t/ckf", descA.Producer)
	_, err := st.Recv()
	wantStatus(t, "standby subscribe", err, st.Trailer(), codes.NotFound, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_POOL_NOT_FOUND)

	steps := traceEvents(t, 20)
	publishEvents(t, js, "a", steps)
	ma := newMirror(t, keyA)
	sta := subscribe(t, ctx, ca, "t/ckf", descA.Producer)
	ma.follow(t, sta, "snapshot on a", func() bool { return ma.installed })

	stopA()
	err = streamEnd(t, ma, sta) // every frame checked against keyA
	wantStatus(t, "old leader's stream", err, sta.Trailer(), codes.Unavailable, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE)
	st = subscribe(t, ctx, ca, "t/ckf", descA.Producer)
	_, err = st.Recv()
	wantStatus(t, "stopped leader", err, st.Trailer(), codes.NotFound, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_POOL_NOT_FOUND)

	testenv.WaitFor(t, 0, "b takes over", func() bool { return rb.Status().State == relay.StateActive })
	descB := firstCatalog(t, ctx, cb, 1).Snapshot.Pools[0]
	keyB, _ := kvrelay.KeyOf(descB.Producer)
	if keyB == keyA || descB.Producer.ProducerIncarnation <= descA.Producer.ProducerIncarnation {
		t.Fatalf("producer after takeover %v, before %v", descB.Producer, descA.Producer)
	}
	st = subscribe(t, ctx, cb, "t/ckf", descA.Producer)
	_, err = st.Recv()
	wantStatus(t, "old key on the new leader", err, st.Trailer(), codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PRODUCER_CHANGED)
	mb := newMirror(t, keyB)
	stb := subscribe(t, ctx, cb, "t/ckf", descB.Producer)
	mb.follow(t, stb, "snapshot on b", func() bool { return mb.installed })
	if !slices.Equal(mb.words, reference(t, b.CKF, steps).Words()) {
		t.Fatalf("the new leader's snapshot differs from the pool's state")
	}
}

// A new epoch of the same relay (its lease lost) is a new generation: the
// open stream ends with PUBLICATION_UNAVAILABLE and the old key gets
// PRODUCER_CHANGED.
func TestKvRelayANewEpochChangesTheProducer(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	r, _ := startRelay(t, nc, js, kvConfig("a"))
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	c, _, _ := serveKv(t, r, kvServerConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	desc := firstCatalog(t, ctx, c, 1).Snapshot.Pools[0]
	key, _ := kvrelay.KeyOf(desc.Producer)
	m := newMirror(t, key)
	st := subscribe(t, ctx, c, "t/ckf", desc.Producer)
	m.follow(t, st, "snapshot", func() bool { return m.installed })
	epoch1 := r.Status().Epoch
	deleteLease(t, js)
	err := streamEnd(t, m, st)
	wantStatus(t, "stream of the lost epoch", err, st.Trailer(), codes.Unavailable, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE)
	testenv.WaitFor(t, 0, "new epoch", func() bool { s := r.Status(); return s.State == relay.StateActive && s.Epoch > epoch1 })
	testenv.WaitFor(t, 0, "old key refused", func() bool {
		st := subscribe(t, ctx, c, "t/ckf", desc.Producer)
		_, err := st.Recv()
		return status.Code(err) == codes.FailedPrecondition &&
			kvrelay.ReasonFromTrailer(st.Trailer()) == kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PRODUCER_CHANGED
	})
}

func deleteLease(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), wire.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(context.Background(), "lease."+domain+".a"); err != nil {
		t.Fatal(err)
	}
}

// §8.1 scenario 8 plus the subscriber-id rules: each malformed request gets
// its status and reason trailer, is counted, and the valid producer still
// subscribes.
func TestKvRelayMalformedRequestsGetTheirStatusAndReason(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	r, _ := startRelay(t, nc, js, kvConfig("a"))
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	scfg := kvServerConfig()
	reg := prometheus.NewRegistry()
	scfg.Metrics = reg
	c, _, _ := serveKv(t, r, scfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var tr metadata.MD
	_, err := c.GetRelayInfo(ctx, &kvrelayv1.RelayInfoRequest{}, grpc.Trailer(&tr))
	wantStatus(t, "info marker 0", err, tr, codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_CONTRACT_MISMATCH)
	cs, _ := c.WatchKvPoolCatalog(ctx, &kvrelayv1.WatchKvPoolCatalogRequest{SubscriberId: "t"})
	_, err = cs.Recv()
	wantStatus(t, "catalog marker 0", err, cs.Trailer(), codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_CONTRACT_MISMATCH)
	ls, _ := c.SubscribeKvPoolLoad(ctx, &kvrelayv1.SubscribeKvPoolLoadRequest{SubscriberId: "consumer\nspoof", ContractMarker: marker})
	_, err = ls.Recv()
	wantStatus(t, "control character in subscriber id", err, ls.Trailer(), codes.InvalidArgument, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_REQUEST)

	desc := firstCatalog(t, ctx, c, 1).Snapshot.Pools[0]
	mutate := func(f func(p *kvrelayv1.ProducerIdentity)) *kvrelayv1.ProducerIdentity {
		p := proto.Clone(desc.Producer).(*kvrelayv1.ProducerIdentity)
		f(p)
		return p
	}
	for _, tc := range []struct {
		name   string
		req    *kvrelayv1.SubscribeKvPoolRequest
		code   codes.Code
		reason kvrelayv1.RelayErrorReason
	}{
		{"marker 0", &kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "t", ExpectedProducer: desc.Producer},
			codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_CONTRACT_MISMATCH},
		{"empty subscriber id", &kvrelayv1.SubscribeKvPoolRequest{ExpectedProducer: desc.Producer, ContractMarker: marker},
			codes.InvalidArgument, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_REQUEST},
		{"no producer", &kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "t", ContractMarker: marker},
			codes.InvalidArgument, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_REQUEST},
		{"identity version 2", &kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "t", ContractMarker: marker,
			ExpectedProducer: mutate(func(p *kvrelayv1.ProducerIdentity) { p.PoolId.IdentityVersion = 2 })},
			codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_UNSUPPORTED_FEATURE},
		{"layout generation 0", &kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "t", ContractMarker: marker,
			ExpectedProducer: mutate(func(p *kvrelayv1.ProducerIdentity) { p.LayoutGeneration = 0 })},
			codes.InvalidArgument, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_INVALID_REQUEST},
		{"unknown pool", &kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "t", ContractMarker: marker,
			ExpectedProducer: mutate(func(p *kvrelayv1.ProducerIdentity) { p.PoolId.DcId++ })},
			codes.NotFound, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_POOL_NOT_FOUND},
		{"other incarnation", &kvrelayv1.SubscribeKvPoolRequest{SubscriberId: "t", ContractMarker: marker,
			ExpectedProducer: mutate(func(p *kvrelayv1.ProducerIdentity) { p.ProducerIncarnation++ })},
			codes.FailedPrecondition, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_PRODUCER_CHANGED},
	} {
		st, err := c.SubscribeKvPool(ctx, tc.req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		wantStatus(t, tc.name, err, st.Trailer(), tc.code, tc.reason)
	}
	key, _ := kvrelay.KeyOf(desc.Producer)
	m := newMirror(t, key)
	m.follow(t, subscribe(t, ctx, c, "t/ckf", desc.Producer), "valid producer", func() bool { return m.installed })
	for _, want := range []string{
		`ckf_kvrelay_refusals_total{reason="RELAY_ERROR_REASON_CONTRACT_MISMATCH",rpc="SubscribeKvPool"} 1`,
		`ckf_kvrelay_refusals_total{reason="RELAY_ERROR_REASON_INVALID_REQUEST",rpc="SubscribeKvPool"} 3`,
		`ckf_kvrelay_refusals_total{reason="RELAY_ERROR_REASON_POOL_NOT_FOUND",rpc="SubscribeKvPool"} 1`,
	} {
		if out, ok := metricsContain(reg, want); !ok {
			t.Fatalf("want %s in\n%s", want, out)
		}
	}
}

// §8.1 scenario 7: with a pool stream limit of 1 the 2nd subscriber gets
// RESOURCE_LIMIT; once the 1st leaves, a retry gets a snapshot. The catalog
// limit works the same way.
func TestKvRelayRefusesSubscribersOverTheLimit(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	r, _ := startRelay(t, nc, js, kvConfig("a"))
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	scfg := kvServerConfig()
	scfg.MaxPoolStreams, scfg.MaxCatalogSubscribers = 1, 1
	c, _, _ := serveKv(t, r, scfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cctx, ccancel := context.WithCancel(ctx)
	desc := firstCatalog(t, cctx, c, 1).Snapshot.Pools[0]
	cs, _ := c.WatchKvPoolCatalog(ctx, &kvrelayv1.WatchKvPoolCatalogRequest{SubscriberId: "t/2", ContractMarker: marker})
	_, err := cs.Recv()
	wantStatus(t, "2nd catalog", err, cs.Trailer(), codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_RESOURCE_LIMIT)
	ccancel()

	key, _ := kvrelay.KeyOf(desc.Producer)
	sctx, scancel := context.WithCancel(ctx)
	m := newMirror(t, key)
	m.follow(t, subscribe(t, sctx, c, "t/1", desc.Producer), "1st", func() bool { return m.installed })
	st := subscribe(t, ctx, c, "t/2", desc.Producer)
	_, err = st.Recv()
	wantStatus(t, "2nd pool stream", err, st.Trailer(), codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_RESOURCE_LIMIT)
	if s := status.Convert(err).Message(); s != "Relay total pool stream limit 1 reached: kvrelay: resource limit reached" {
		t.Fatalf("message %q", s)
	}
	scancel()
	testenv.WaitFor(t, 0, "retry admitted", func() bool {
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		st := subscribe(t, rctx, c, "t/2", desc.Producer)
		u, err := st.Recv()
		return err == nil && u.Kind == kvrelayv1.FilterUpdateKind_FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
	})
}

// §4.3: a subscriber that does not read is dropped once its queue
// overflows (the relay keeps at most Queue frames for it) and, when it
// reads again, gets what was already in flight, then RESOURCE_EXHAUSTED /
// SUBSCRIBER_LAGGED. Shutdown with that stream open still ends in time.
func TestKvRelayDropsALaggingSubscriber(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := kvConfig("a")
	cfg.CKF = ckf.NewConfig(1 << 16) // a snapshot larger than the client's window
	r, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	scfg := kvServerConfig()
	scfg.Queue.Frames = 4
	scfg.PoolHeartbeat = time.Hour
	reg := prometheus.NewRegistry()
	scfg.Metrics = reg
	// A fixed 64 KiB window (no BDP growth): an unread stream stalls the
	// server's sends.
	c, _, srvKv := serveKv(t, r, scfg, grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	desc := firstCatalog(t, ctx, c, 1).Snapshot.Pools[0]
	key, _ := kvrelay.KeyOf(desc.Producer)
	st := subscribe(t, ctx, c, "t/slow", desc.Producer)
	// The subscription is served once the relay answered it: its header.
	if _, err := st.Header(); err != nil {
		t.Fatal(err)
	}
	seq0, epoch := r.Status().Sequence, r.Status().Epoch
	publishEvents(t, js, "a", traceEvents(t, 200))
	testenv.WaitFor(t, 0, "many deltas while the subscriber sleeps", func() bool { return r.Status().Sequence > seq0+uint64(3*scfg.Queue.Frames) })
	if r.Status().Epoch != epoch {
		t.Skipf("the epoch ended under load (epoch %d → %d); nothing to test", epoch, r.Status().Epoch)
	}
	m := newMirror(t, key)
	err := streamEnd(t, m, st)
	wantStatus(t, "lagging subscriber", err, st.Trailer(), codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SUBSCRIBER_LAGGED)
	if !m.installed || m.seq >= r.Status().Sequence {
		t.Fatalf("lagging subscriber reached %d (installed %v), relay at %d", m.seq, m.installed, r.Status().Sequence)
	}
	if out, ok := metricsContain(reg, `ckf_kvrelay_refusals_total{reason="RELAY_ERROR_REASON_SUBSCRIBER_LAGGED",rpc="SubscribeKvPool"} 1`); !ok {
		t.Fatalf("lag not counted:\n%s", out)
	}

	// §8.1 scenario 4: an unread pool stream and an idle TCP connection do
	// not hold up shutdown.
	idle, err := net.Dial("tcp", "127.0.0.1:1")
	if err == nil {
		idle.Close()
	}
	unread := subscribe(t, ctx, c, "t/unread", desc.Producer)
	if _, err := unread.Header(); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	start := time.Now()
	srvKv.Shutdown(sctx)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("shutdown took %s", d)
	}
	if err := streamEnd(t, nil, unread); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("unread stream after shutdown: %v", err)
	}
}

var _ = nats.ErrTimeout

// §4.3: a subscriber that stops reading during its bootstrap is ended with
// RESOURCE_EXHAUSTED / SNAPSHOT_PROGRESS_TIMEOUT once the transport has not
// taken a snapshot chunk for the progress timeout, and its pool-stream slot
// is free again for the next subscriber.
func TestKvRelayEndsAStalledBootstrap(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	cfg := kvConfig("a")
	cfg.CKF = ckf.NewConfig(1 << 22) // 2 chunks of 524,288 buckets, 4 MiB each
	r, _ := startRelay(t, nc, js, cfg)
	testenv.WaitFor(t, 0, "active", func() bool { return r.Status().State == relay.StateActive })
	scfg := kvServerConfig()
	// Long enough for the reader below to take a 4 MiB chunk through the
	// 64 KiB window on a loaded -race run, short enough to wait out.
	scfg.SnapshotProgress = 3 * time.Second
	scfg.MaxPoolStreams = 1
	reg := prometheus.NewRegistry()
	scfg.Metrics = reg
	// A fixed 64 KiB window: an unread stream stalls the first chunk.
	c, _, _ := serveKv(t, r, scfg, grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	desc := firstCatalog(t, ctx, c, 1).Snapshot.Pools[0]
	key, _ := kvrelay.KeyOf(desc.Producer)
	stalled := subscribe(t, ctx, c, "t/stalled", desc.Producer)
	if _, err := stalled.Header(); err != nil {
		t.Fatal(err)
	}
	want := `ckf_kvrelay_refusals_total{reason="RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT",rpc="SubscribeKvPool"} 1`
	testenv.WaitFor(t, 30*time.Second, "the stalled bootstrap ended", func() bool { _, ok := metricsContain(reg, want); return ok })
	err := streamEnd(t, nil, stalled)
	wantStatus(t, "stalled bootstrap", err, stalled.Trailer(), codes.ResourceExhausted, kvrelayv1.RelayErrorReason_RELAY_ERROR_REASON_SNAPSHOT_PROGRESS_TIMEOUT)

	// The only pool-stream slot is free again: a reading subscriber gets
	// the whole lane.
	m := newMirror(t, key)
	st := subscribe(t, ctx, c, "t/reader", desc.Producer)
	m.follow(t, st, "a full bootstrap after the stalled one", func() bool { return m.installed })
}
