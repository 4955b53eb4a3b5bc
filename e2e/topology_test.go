package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// wanSettle bounds convergence in the multi-DC tests: every lane message
// crosses a leaf link and a proxy, which a loaded -race run on two cores
// makes several times slower than one server.
const wanSettle = 3 * time.Minute

// dcSite is one DC of a hub-and-leaves topology: its relay and the
// JetStream (its own domain) its workers publish to.
type dcSite struct {
	local jetstream.JetStream
	relay *relayProc
}

// startMultiDC starts the production layout: the indexer on the hub; in
// each DC a relay on the DC's leaf that consumes KVEVENTS from the DC's own
// JetStream domain and publishes its lane across the leaf link to the hub's
// domain.
func startMultiDC(t *testing.T, topo *testenv.Topology) (*indexerProc, map[string]*dcSite) {
	t.Helper()
	hub := topo.Hub()
	ix := startIndexer(t, hub.Connect(t), hub.JetStream(t), indexerConfig(t, nil))
	sites := map[string]*dcSite{}
	for _, dc := range topo.DCs() {
		leaf := topo.Leaf(t, dc)
		nc := leaf.Connect(t)
		hubJS, err := jetstream.NewWithDomain(nc, testenv.HubDomain)
		if err != nil {
			t.Fatal(err)
		}
		local, err := jetstream.NewWithDomain(nc, dc)
		if err != nil {
			t.Fatal(err)
		}
		cfg := relayConfig(t, dc, "relay-"+dc, nil)
		cfg.InputJS = local
		sites[dc] = &dcSite{local: local, relay: startRelay(t, nc, hubJS, cfg)}
	}
	return ix, sites
}

// map2 looks up a DC's local JetStream for workload.publishPerDC.
type map2 map[string]*dcSite

func (s map2) js(dc string) jetstream.JetStream { return s[dc].local }

// lastLaneSeq is the hub's stream sequence of dc's newest lane message.
func lastLaneSeq(t *testing.T, topo *testenv.Topology, dc string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := topo.Hub().JetStream(t).Stream(ctx, streams.LaneStream)
	if err != nil {
		t.Fatal(err)
	}
	subj, err := wire.NewLaneSubjects(domain, dc)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := streams.LastLaneSequence(ctx, s, subj.Filter)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// natsConnectLater connects to a server that may not be up yet: the
// client retries in the background, as the binaries' connections do.
func natsConnectLater(url string) (*nats.Conn, error) {
	return nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(25*time.Millisecond))
}

// metricValue reads a series from reg (-1 when absent).
func metricValue(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	v, ok, err := promtest.Value(reg, name)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return -1
	}
	return v
}

// streamMessages is the message count of a stream reached through js.
func streamMessages(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestRelaysInDCLeafNodesReachTheHubIndexer(t *testing.T) {
	topo := testenv.StartHubWithLeaves(t, "dc-a", "dc-b")
	ix, sites := startMultiDC(t, topo)
	w := newWorkload(t, []string{"dc-a", "dc-b"}, 600, 6)
	w.publishPerDC(t, map2(sites).js, 600)
	w.convergeWithin(t, ix, wanSettle)
	// Each DC's events stay in its own domain: the hub holds no input
	// stream, and a DC's stream holds none of the other DC's events.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := topo.Hub().JetStream(t).Stream(ctx, streams.EventStream); err == nil {
		t.Fatal("the hub holds an input stream: worker events crossed the WAN")
	}
	var total uint64
	for _, dc := range topo.DCs() {
		total += streamMessages(t, sites[dc].local, streams.EventStream)
	}
	if published := publishedMessages(w); total != published {
		t.Fatalf("the DC input streams hold %d messages, %d were published", total, published)
	}
}

// publishedMessages counts the input messages the workload published.
func publishedMessages(w *workload) uint64 {
	var n uint64
	for _, st := range w.steps {
		if len(st.Events) > 0 {
			n++
		}
	}
	return n
}

func TestAPartitionedDCKeepsItsEventsAndTheHubConvergesAfterTheHeal(t *testing.T) {
	topo := testenv.StartHubWithLeaves(t, "dc-a", "dc-b")
	ix, sites := startMultiDC(t, topo)
	// Every lane message crosses the leaf link (and the proxy standing in
	// for the WAN): a loaded -race run is slower here than on one server,
	// so the phases are smaller than in the single-server tests.
	const phase = 250
	w := newWorkload(t, []string{"dc-a", "dc-b"}, 3*phase, 9)
	w.publishPerDC(t, map2(sites).js, phase)
	w.convergeWithin(t, ix, wanSettle)
	rb := sites["dc-b"].relay
	epochBefore := rb.Status().Epoch

	// Cut dc-b off the hub. Its workers keep publishing locally with
	// JetStream acks (publishPerDC fails the test on a missing ack), and
	// dc-a keeps flowing to the hub.
	depthsB := w.laneDepths(t, ix, "dc-b")
	link := topo.Link(t, "dc-b")
	link.Cut()
	testenv.Eventually(t, settle, 10*time.Millisecond, func() error {
		if n := topo.Leaf(t, "dc-b").NATS().NumLeafNodes(); n != 0 {
			return fmt.Errorf("dc-b still has %d hub connections", n)
		}
		return nil
	})
	laneB := lastLaneSeq(t, topo, "dc-b")
	inputB := streamMessages(t, sites["dc-b"].local, streams.EventStream)
	w.publishPerDC(t, map2(sites).js, phase)
	// dc-a converges during the cut; dc-b's lane cannot move, while its
	// input stream took every event its workers published.
	w.convergeWithin(t, ix, wanSettle, "dc-a")
	if l := lastLaneSeq(t, topo, "dc-b"); l != laneB {
		t.Fatalf("dc-b's lane at the hub moved during the cut: last message %d, %d before", l, laneB)
	}
	if n := streamMessages(t, sites["dc-b"].local, streams.EventStream); n <= inputB {
		t.Fatalf("dc-b's input stream holds %d messages after the cut's publishes, %d before", n, inputB)
	}
	// A lane that cannot move answers exactly as before the cut: the hub
	// neither lost dc-b's state nor applied anything it could not have
	// received.
	during := w.laneDepths(t, ix, "dc-b")[:len(depthsB)]
	for i := range depthsB {
		if during[i] != depthsB[i] {
			t.Fatalf("dc-b's answer to step %d changed during the cut: depth %d, %d before", i, during[i], depthsB[i])
		}
	}
	// The lane says it is stale: dc-b's answers are marked once it has not
	// heard from its relay for laneStaleAfter, and it is never best;
	// dc-a's stay fresh.
	testenv.WaitFor(t, settle, "dc-b's lane marked stale", func() bool { l, ok := laneOf(ix, "dc-b"); return ok && l.Stale })
	for _, st := range w.steps[:20] {
		resp, err := ix.Match(api.Query{Locals: st.Locals})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range resp.Lanes {
			if stale := l.DC == "dc-b"; l.Stale != stale || (stale && l.AgeMs < laneStaleAfter.Milliseconds()) {
				t.Fatalf("during the cut: lane %s stale=%v age %d ms", l.DC, l.Stale, l.AgeMs)
			}
		}
		if resp.Best != nil && resp.Best.DC == "dc-b" {
			t.Fatalf("a stale lane was chosen as best: %+v", resp.Best)
		}
	}
	// The cut relay notices: its publishes fail and its lease lapses.
	testenv.WaitFor(t, settle, "dc-b relay fenced by the cut", func() bool { return rb.Status().Epoch != epochBefore || rb.Status().State != "active" })

	link.Heal()
	topo.WaitLeavesConnected(t)
	w.publishPerDC(t, map2(sites).js, phase)
	over := w.convergeWithin(t, ix, wanSettle)
	testenv.WaitFor(t, settle, "dc-b's lane fresh after the heal", func() bool { l, ok := laneOf(ix, "dc-b"); return ok && !l.Stale })
	// Nothing was lost: dc-b's exact state holds every block the ground
	// truth holds, under a new epoch, and its input stream every message.
	for i, dc := range topo.DCs() {
		r := sites[dc].relay
		testenv.WaitFor(t, settle, dc+" relay holds the exact state", func() bool { return r.Status().UniqueBlocks == w.rp.Blocks(i) })
	}
	// The relay re-fences under a new epoch; it may still be acquiring it
	// when its lane turns fresh again (a relay that left active during the
	// cut for a store it could not reach gets there later).
	testenv.WaitFor(t, settle, "dc-b relay re-fenced under a new epoch after the heal", func() bool { return rb.Status().Epoch > epochBefore })
	var total uint64
	for _, dc := range topo.DCs() {
		total += streamMessages(t, sites[dc].local, streams.EventStream)
	}
	if published := publishedMessages(w); total != published {
		t.Fatalf("the DC input streams hold %d messages, %d were published", total, published)
	}
	t.Logf("%d requests, dc-b cut for %d of them: converged, %d overestimates of %d lane answers", len(w.steps), phase, over, 2*len(w.steps))
}

func TestAnyStartOrderConvergesWhenTheHubStartsLast(t *testing.T) {
	// The DC leaf, its relay and the indexer start before the hub exists:
	// each retries (the relay first sees "no responders" from the hub's
	// JetStream domain, the indexer has no server at all) until it is up.
	hubPort, leafPort := testenv.FreePort(t), testenv.FreePort(t)
	leaf := testenv.StartServer(t, testenv.WithName("dc-a"), testenv.WithDomain("dc-a"),
		testenv.WithLeafRemote(fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort)), testenv.WithLeafDeny(testenv.LocalSubjects...))
	nc := leaf.Connect(t)
	hubJS, err := jetstream.NewWithDomain(nc, testenv.HubDomain)
	if err != nil {
		t.Fatal(err)
	}
	local, err := jetstream.NewWithDomain(nc, "dc-a")
	if err != nil {
		t.Fatal(err)
	}
	cfg := relayConfig(t, "dc-a", "relay-dc-a", nil)
	cfg.InputJS = local
	cfg.Setup.Min, cfg.Setup.Max, cfg.Setup.Attempt = 20*time.Millisecond, 200*time.Millisecond, time.Second
	r := startRelay(t, nc, hubJS, cfg)

	inc, err := natsConnectLater(fmt.Sprintf("nats://127.0.0.1:%d", hubPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inc.Close)
	ijs, err := jetstream.New(inc)
	if err != nil {
		t.Fatal(err)
	}
	icfg := indexerConfig(t, nil)
	icfg.Setup.Min, icfg.Setup.Max, icfg.Setup.Attempt = 20*time.Millisecond, 200*time.Millisecond, time.Second
	ix := startIndexer(t, inc, ijs, icfg)

	testenv.WaitFor(t, settle, "the relay retried its start-up", func() bool { return metricValue(t, r.reg, "ckf_relay_setup_retries_total") >= 2 })
	if st := r.Status().State; st != "starting" {
		t.Fatalf("relay state %s before the hub exists", st)
	}
	testenv.StartServer(t, testenv.WithName(testenv.HubDomain), testenv.WithDomain(testenv.HubDomain),
		testenv.WithPort(hubPort), testenv.WithLeafNodePort(leafPort))

	w := newWorkload(t, []string{"dc-a"}, 300, 4)
	w.publishPerDC(t, func(string) jetstream.JetStream { return local }, 300)
	w.convergeWithin(t, ix, wanSettle)
	testenv.WaitFor(t, settle, "relay active", func() bool { return r.Status().State == "active" })
}
