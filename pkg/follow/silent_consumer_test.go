package follow

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// A lane whose ordered consumer stops delivering while the library's own
// recovery keeps failing is not left ready and frozen: once it has heard
// nothing for LaneStaleAfter it reads on with a new consumer, from the
// message after the last one it handled, and answers what the relay
// published meanwhile.
//
// The library recreates a lost ordered consumer under one new name and
// retries that name until it succeeds. On a clustered hub that name can be
// placed on a server that died before the cluster noticed, and every retry
// then fails (e2e/leaderkill_test.go). Here the same wedge is built on one
// server: the name the library will use next is taken by a consumer it may
// not update, and the lane's consumer is deleted.
func TestASilentLaneConsumerIsReplacedAndReadsOnFromTheLastHandled(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	cfg := testConfig(t)
	cfg.LaneStaleAfter = 300 * time.Millisecond
	s := startService(t, e.nc, e.js, cfg)
	waitInstalled(t, s.Service, r.lane, r.epoch(), 0)
	lane := itoa(r.lane)

	ctx := testCtx(t)
	var name string
	testenv.Eventually(t, waitTotal, waitInterval, func() error {
		var names []string
		lister := r.res.Lanes.ConsumerNames(ctx)
		for n := range lister.Name() {
			names = append(names, n)
		}
		if err := lister.Err(); err != nil || len(names) != 1 {
			return fmt.Errorf("consumers on %s: %q, %v; want the lane's one", streams.LaneStream, names, err)
		}
		name = names[0]
		return nil
	})
	prefix, ok := strings.CutSuffix(name, "_1")
	if !ok {
		t.Fatalf("lane consumer %q: not the library's first ordered consumer name", name)
	}
	if _, err := e.js.CreateConsumer(ctx, streams.LaneStream, jetstream.ConsumerConfig{
		Name: prefix + "_2", AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverNewPolicy,
		FilterSubject: "ckf.none", InactiveThreshold: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.js.DeleteConsumer(ctx, streams.LaneStream, name); err != nil {
		t.Fatal(err)
	}

	locals := chain(11, 4)
	r.apply(storeChain(1, locals, 0, 4))
	r.drain()
	testenv.WaitFor(t, waitTotal, "the lane answers the chain stored after its consumer was lost", func() bool {
		resp, err := s.Match(api.Query{Locals: locals})
		if err != nil {
			return false
		}
		d, ok := laneDepth(resp, r.lane)
		return ok && d.Depth == 4
	})
	if got := metricCount(s.reg, MetricConsumerRestarts, lane); got == 0 {
		t.Fatalf("%s = 0 after the lane's consumer was replaced", MetricConsumerRestarts)
	}
	if st, err := statusOf(s.Service, r.lane); err != nil || st.State != PhaseActive || st.InstalledSequence != r.pub.LastSequence() {
		t.Fatalf("lane %+v (%v), want active at the relay's sequence %d", st, err, r.pub.LastSequence())
	}
}
