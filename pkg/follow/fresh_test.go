package follow

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// skewedClock is the wall clock moved forward by a settable offset: lane
// ages are measured against JetStream's store times, so the test advances
// the indexer's view of time instead of sleeping.
type skewedClock struct{ offset atomic.Int64 }

func (c *skewedClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *skewedClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// A lane that stops hearing from its relay is marked stale after
// LaneStaleAfter (answers, /v1/lanes, the age metric), is never best,
// and is fresh again with the relay's next message.
func TestALaneThatStopsHearingFromItsRelayIsMarkedStale(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(21, 4, 6)
	feed(r, w, func(int) int { return 6 })
	clock := &skewedClock{}
	cfg := testConfig(t)
	cfg.LaneStaleAfter = 10 * time.Second
	s := startService(t, e.nc, e.js, cfg, func(s *Service) { s.now = clock.now })
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())

	resp, err := s.Match(api.Query{Locals: w.chains[0]})
	if err != nil {
		t.Fatal(err)
	}
	l, ok := laneDepth(resp, r.lane)
	if !ok || l.Stale || l.AgeMs < 0 || l.AgeMs > 10_000 || resp.Best == nil {
		t.Fatalf("fresh lane answered %+v (best %+v)", l, resp.Best)
	}

	clock.advance(11 * time.Second) // the relay said nothing for 11 s
	resp, err = s.Match(api.Query{Locals: w.chains[0]})
	if err != nil {
		t.Fatal(err)
	}
	if l, ok = laneDepth(resp, r.lane); !ok || !l.Stale || l.AgeMs < 11_000 || l.Depth != 6 {
		t.Fatalf("silent lane answered %+v", l)
	}
	if resp.Best != nil {
		t.Fatalf("a stale lane was best: %+v", resp.Best)
	}
	if st, _ := statusOf(s.Service, r.lane); !st.Stale || st.AgeMs < 11_000 {
		t.Fatalf("/v1/lanes row %+v", st)
	}
	testenv.WaitFor(t, waitTotal, "lane age metric past the bound", func() bool {
		v, ok, err := promtest.Value(s.reg, MetricLaneAge+`{lane="`+itoa(r.lane)+`"}`)
		return err == nil && ok && v >= 11
	})

	// A heartbeat stored now (by JetStream's clock) is 11 s in the
	// indexer's past; move the indexer's clock back and the lane is fresh.
	r.injectHeartbeat(r.epoch(), r.wireLease().Instance)
	clock.advance(-11 * time.Second)
	testenv.WaitFor(t, waitTotal, "lane fresh after its relay's heartbeat", func() bool {
		st, err := statusOf(s.Service, r.lane)
		return err == nil && !st.Stale && st.AgeMs < 10_000
	})
}

// With StaleLanes exclude a stale lane leaves the answers and the ready
// set: a query with only stale lanes is unavailable, /readyz not ready.
func TestExcludedStaleLanesLeaveTheReadySet(t *testing.T) {
	e := newEnv(t)
	r := e.relay(t, "dc-a")
	w := newWorkload(22, 2, 4)
	feed(r, w, func(int) int { return 4 })
	clock := &skewedClock{}
	cfg := testConfig(t)
	cfg.LaneStaleAfter = 10 * time.Second
	cfg.StaleLanes = StaleExclude
	s := startService(t, e.nc, e.js, cfg, func(s *Service) { s.now = clock.now })
	waitInstalled(t, s.Service, r.lane, r.epoch(), r.pub.LastSequence())
	if _, err := s.Match(api.Query{Locals: w.chains[0]}); err != nil || !s.Ready() {
		t.Fatalf("fresh lane: %v, ready %v", err, s.Ready())
	}
	clock.advance(11 * time.Second)
	if resp, err := s.Match(api.Query{Locals: w.chains[0]}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("only a stale lane: %+v, %v; want ErrUnavailable", resp, err)
	}
	if s.Ready() {
		t.Fatal("ready with only a stale lane")
	}
	clock.advance(-11 * time.Second)
	if _, err := s.Match(api.Query{Locals: w.chains[0]}); err != nil || !s.Ready() {
		t.Fatalf("fresh again: %v, ready %v", err, s.Ready())
	}
}

func TestStaleLanesConfigIsValidated(t *testing.T) {
	for name, c := range map[string]func(*Config){
		"negative bound": func(c *Config) { c.LaneStaleAfter = -time.Second },
		"unknown mode":   func(c *Config) { c.StaleLanes = "drop" },
	} {
		cfg := testConfig(t)
		c(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
