//go:build ckftest

package e2e

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/client"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/lanerules"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// stallClock is the ingestion pools' clock in TestMirrorKeepsAndDropsLanesLikeTheIndexer:
// it stands still unless the test moves it, so an apply "stalls" for
// exactly as long as the test says, whatever the machine's load.
type stallClock struct {
	base time.Time
	off  atomic.Int64
}

func (c *stallClock) now() time.Time          { return c.base.Add(time.Duration(c.off.Load())) }
func (c *stallClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// A mirror built with MirrorConfig's zero rules keeps and retires lanes as
// the global-indexer binary does (the binary's config is lanerules'
// defaults through follow.Config.WithRules, as cmd/global-indexer builds
// it). Both follow the same relay; dc-a's apply is held on both and
// a delta waits behind it. At 50 ms of stall (past the seed's 10 ms bound,
// which the mirror used to run with, within the binary's 100 ms) both keep
// the lane: same ready set, same answers. At 150 ms both retire it, and
// both take it back once the apply resumes.
func TestMirrorKeepsAndDropsLanesLikeTheIndexer(t *testing.T) {
	srv := testenv.StartServer(t)
	nc, js := srv.Connect(t), srv.JetStream(t)
	clk := &stallClock{base: time.Now()}

	cfg, err := follow.Config{
		Domain:  domain,
		Logger:  logger(t).With().Str("proc", "indexer").Logger(),
		Streams: streams.Options{Memory: true},
	}.WithRules(lanerules.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	// The indexer as global-indexer runs it; the mirror runs the same host.
	ix := startIndexerHost(t, nc, js, cfg, func(svc *follow.Service) { follow.SetPoolClockForTest(svc, clk.now) })

	m, err := client.NewMirror(srv.Connect(t), client.MirrorConfig{Domain: domain, Logger: logger(t).With().Str("proc", "mirror").Logger()})
	if err != nil {
		t.Fatal(err)
	}
	msvc, ok := client.MirrorServiceForTest(m, domain)
	if !ok {
		t.Fatalf("the mirror follows no domain %q", domain)
	}
	follow.SetPoolClockForTest(msvc, clk.now)
	background(t, m.Run)

	// One DC: a second lane could share dc-a's held worker in one pool and
	// not in the other (each process routes lanes by its own consumer
	// instance), and time out there for a reason that is not a rule.
	dcs := []string{"dc-a"}
	for _, dc := range dcs {
		startRelay(t, nc, js, relayConfig(t, dc, "relay-"+dc, nil))
	}
	w := newWorkload(t, dcs, 400, 23)
	w.publish(t, js, 200)
	w.converge(t, ix)
	sameLanes(t, ix, m)
	sameAnswers(t, w, ix, m)

	a, ok := laneOf(ix, "dc-a")
	if !ok {
		t.Fatal("no lane for dc-a")
	}
	svc, _ := ix.Service(domain)
	pools := map[string]*consumer.Pool{"indexer": follow.PoolForTest(svc), "mirror": follow.PoolForTest(msvc)}
	var resumes []func()
	for name, p := range pools {
		resume, err := consumer.PauseLaneWorkerForTest(p, a.Lane, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resumes = append(resumes, resume)
		t.Cleanup(resume)
	}
	// Deltas for dc-a now wait behind the held apply on both.
	w.publish(t, js, 200)
	testenv.Eventually(t, settle, 10*time.Millisecond, func() error {
		for name, p := range pools {
			if st, ok := p.LaneState(a.Lane); !ok || st.OutstandingDeltas == 0 {
				return fmt.Errorf("%s: no delta of dc-a waiting (%+v)", name, st)
			}
		}
		return nil
	})
	sameLanes(t, ix, m)

	laneState := func() map[string]consumer.AdmissionState {
		out := map[string]consumer.AdmissionState{}
		for name, p := range pools {
			st, _ := p.LaneState(a.Lane)
			out[name] = st.State
		}
		return out
	}
	clk.advance(50 * time.Millisecond)
	for _, p := range pools {
		consumer.FenceExpiredLanesForTest(p)
	}
	if st := laneState(); st["indexer"] != consumer.AdmissionActive || st["mirror"] != consumer.AdmissionActive {
		t.Fatalf("after a 50 ms stall dc-a's lane is %v (indexer) and %v (mirror); both must keep it, as the binary's 100 ms bound says", st["indexer"], st["mirror"])
	}
	sameAnswers(t, w, ix, m)
	sameLanes(t, ix, m)

	clk.advance(100 * time.Millisecond)
	for _, p := range pools {
		consumer.FenceExpiredLanesForTest(p)
	}
	if st := laneState(); st["indexer"] == consumer.AdmissionActive || st["mirror"] == consumer.AdmissionActive {
		t.Fatalf("after a 150 ms stall dc-a's lane is %v (indexer) and %v (mirror); both must retire it", st["indexer"], st["mirror"])
	}
	sameAnswers(t, w, ix, m)

	for _, resume := range resumes {
		resume()
	}
	w.converge(t, ix)
	sameLanes(t, ix, m)
	sameAnswers(t, w, ix, m)
}

// sameLanes waits until the mirror's lanes are the indexer's: same rows,
// states, epochs and installed sequences.
func sameLanes(t *testing.T, ix *hostProc, m *client.Mirror) {
	t.Helper()
	testenv.Eventually(t, settle, 10*time.Millisecond, func() error {
		want, got := ix.Lanes(), m.Lanes()
		if len(want) != len(got) {
			return fmt.Errorf("mirror has %d lanes, indexer %d", len(got), len(want))
		}
		for i := range want {
			if got[i].Lane != want[i].Lane || got[i].State != want[i].State || got[i].Epoch != want[i].Epoch || got[i].InstalledSequence != want[i].InstalledSequence {
				return fmt.Errorf("lane %d: mirror %+v, indexer %+v", want[i].Lane, got[i], want[i])
			}
		}
		return nil
	})
}

// sameAnswers asks both for every replayed request: the same ready set
// and depths (ages aside), or both unavailable.
func sameAnswers(t *testing.T, w *workload, ix *hostProc, m *client.Mirror) {
	t.Helper()
	ctx := context.Background()
	for i, st := range w.steps {
		want, werr := ix.Match(api.Query{Locals: st.Locals})
		req := api.MatchRequest{LocalHashes: make([]uint64, len(st.Locals))}
		for j, l := range st.Locals {
			req.LocalHashes[j] = uint64(l)
		}
		got, gerr := m.Match(ctx, req)
		if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(withoutAges(got), withoutAges(want)) {
			t.Fatalf("step %d: mirror %+v (%v), indexer %+v (%v)", i, got, gerr, want, werr)
		}
	}
}
