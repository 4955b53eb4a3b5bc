package unithost_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/pkg/unithost"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// unit runs until its context ends, or fails at once when fail is set.
type unit struct {
	name    string
	fail    error
	running atomic.Bool
	ran     chan struct{}
}

func (u *unit) Run(ctx context.Context) error {
	u.running.Store(true)
	close(u.ran)
	if u.fail != nil {
		return u.fail
	}
	<-ctx.Done()
	u.running.Store(false)
	return nil
}

func newHost(t *testing.T, max int, admit func(string) bool) (*unithost.Host[*unit], *prometheus.Registry, *[]string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	var events []string
	h, err := unithost.New(unithost.Config[*unit]{
		Noun: "pool", Max: max, Admit: admit, Registerer: reg,
		Metrics: unithost.MetricNames{Units: "t_units", Refused: "t_refused_total", Limit: "t_limit", Failed: "t_failures_total", FailedLabel: "domain"},
		Build: func(name string) (*unit, error) {
			if strings.Contains(name, ".") {
				return nil, errors.New("not a token")
			}
			u := &unit{name: name, ran: make(chan struct{})}
			if strings.HasPrefix(name, "bad") {
				u.fail = errors.New("boom")
			}
			return u, nil
		},
		OnAdd:    func(name string, _ *unit) { events = append(events, "add "+name) },
		OnRemove: func(name string, _ *unit) { events = append(events, "remove "+name) },
		Stopped:  func(name string, u *unit) { events = append(events, "stopped "+name) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return h, reg, &events
}

func wait(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
	}
}

func TestHostLifeCycle(t *testing.T) {
	h, reg, events := newHost(t, 3, func(name string) bool { return !strings.HasPrefix(name, "x") })
	if err := h.Add("a"); err != nil {
		t.Fatal(err)
	}
	a, _ := h.Get("a")
	if a.running.Load() {
		t.Fatal("a unit runs before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	wait(t, a.ran)
	if err := h.Add("b"); err != nil {
		t.Fatal(err)
	}
	b, _ := h.Get("b")
	wait(t, b.ran)
	tasks := make(chan struct{})
	if err := h.Go(func(ctx context.Context) { close(tasks); <-ctx.Done() }); err != nil {
		t.Fatal(err)
	}
	wait(t, tasks)

	for name, kind := range map[string]unithost.ErrorKind{"a": unithost.ErrExists, "xy": unithost.ErrNotAllowed, "c.d": unithost.ErrInvalid} {
		var he *unithost.Error
		if err := h.Add(name); !errors.Is(err, kind) || !errors.As(err, &he) || he.Name != name {
			t.Fatalf("Add(%q) = %v, want %s", name, err, kind)
		}
	}
	if err := h.Add("bad"); err != nil {
		t.Fatal(err)
	}
	bad, _ := h.Get("bad")
	wait(t, bad.ran)
	if err := h.Add("d"); !errors.Is(err, unithost.ErrTooMany) {
		t.Fatalf("a 4th unit: %v, want ErrTooMany", err)
	}
	h.Add("d") //nolint:errcheck // refused again: counted, logged once
	for spec, want := range map[string]uint64{
		`t_refused_total{kind="too_many"}`: 2, `t_refused_total{kind="not_allowed"}`: 1, `t_refused_total{kind="invalid"}`: 1,
		`t_refused_total{kind="exists"}`: 0, `t_units`: 3, `t_limit{bound="pools"}`: 3,
	} {
		if got := promtest.Count(reg, spec); got != want {
			t.Errorf("%s = %d, want %d", spec, got, want)
		}
	}
	testWaitFailure(t, reg)

	if !h.Remove("b") || b.running.Load() {
		t.Fatal("b not stopped by Remove")
	}
	if h.Remove("b") {
		t.Fatal("b removed twice")
	}
	h.SetBounds(4, nil)
	if err := h.Add("xz"); err != nil {
		t.Fatalf("after SetBounds: %v", err)
	}
	if got := strings.Join(h.Names(), ","); got != "a,bad,xz" {
		t.Fatalf("names %s", got)
	}
	if !h.Ready(func(u *unit) bool { return u.name == "a" }) || h.Ready(func(u *unit) bool { return u.name == "b" }) {
		t.Fatal("Ready")
	}

	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	var he *unithost.Error
	if !errors.Is(err, unithost.ErrFailed) || !errors.As(err, &he) || he.Name != "bad" || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Run = %v, want bad's failure", err)
	}
	if a.running.Load() {
		t.Fatal("a still runs after Run returned")
	}
	if err := h.Add("e"); !errors.Is(err, unithost.ErrNotRunning) {
		t.Fatalf("Add after Run: %v", err)
	}
	if err := h.Run(context.Background()); !errors.Is(err, unithost.ErrAlreadyRunning) {
		t.Fatalf("second Run: %v", err)
	}
	want := "add a,add b,add bad,remove b,stopped b,add xz"
	if got := strings.Join(*events, ","); got != want {
		t.Fatalf("hooks %s, want %s", got, want)
	}
}

func testWaitFailure(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for promtest.Count(reg, `t_failures_total{domain="bad"}`) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("failure not counted")
		}
		time.Sleep(time.Millisecond)
	}
}

// A unit removed before Run started it never runs, and Remove does not
// wait for it.
func TestRemoveBeforeRun(t *testing.T) {
	h, _, _ := newHost(t, 0, nil)
	if err := h.Add("a"); err != nil {
		t.Fatal(err)
	}
	a, _ := h.Get("a")
	if !h.Remove("a") {
		t.Fatal("not removed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a.running.Load() {
		t.Fatal("a removed unit ran")
	}
}

// With StopOnFailure the first failure ends Run, stopping the others.
func TestStopOnFailure(t *testing.T) {
	h, err := unithost.New(unithost.Config[*unit]{Noun: "pool", StopOnFailure: true,
		Build: func(name string) (*unit, error) {
			u := &unit{name: name, ran: make(chan struct{})}
			if name == "bad" {
				u.fail = errors.New("boom")
			}
			return u, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Add("good"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Run(context.Background()) }()
	good, _ := h.Get("good")
	wait(t, good.ran)
	if err := h.Add("bad"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, unithost.ErrFailed) || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end on the failure")
	}
	if good.running.Load() {
		t.Fatal("good still runs")
	}
}

// Only names the unit of a host of one, and none otherwise.
func TestOnly(t *testing.T) {
	h, _, _ := newHost(t, 0, nil)
	if _, ok := h.Only(); ok {
		t.Fatal("an empty host has an only unit")
	}
	if err := h.Add("a"); err != nil {
		t.Fatal(err)
	}
	if u, ok := h.Only(); !ok || u.name != "a" {
		t.Fatalf("Only = %v, %v", u, ok)
	}
	if err := h.Add("b"); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Only(); ok {
		t.Fatal("a host of two has an only unit")
	}
	if n := testing.AllocsPerRun(100, func() { h.Only() }); n != 0 {
		t.Fatalf("Only allocates %v times", n)
	}
}
