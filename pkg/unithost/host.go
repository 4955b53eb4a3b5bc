// Package unithost runs the per-domain units of one process: the relay's
// pools (internal/pools) and the indexer's domains (pkg/domains) are
// its units. A Host owns what every such process needs once: adding,
// removing and discovering units by name, the bound on their number and the
// admission policy, each unit's life cycle under Run, the refusals (one
// error type, counted and logged once per unit and kind), the count and
// failure metrics, and readiness over the units. What a unit is, and what
// else a unit needs (a table budget, a kvrelay catalog), stays with the
// package that hosts it, through Config's hooks.
//
// One domain is a host of one unit: the binaries run a host whatever the
// number of domains, so a per-model feature has one place to land.
//
// # Concurrency contract
//
// Every method is safe for concurrent use, before, during and after Run.
// The Host owns one goroutine per started unit, and one per task given to
// Go; each runs under a context derived from Run's, so it ends when Run's
// context ends or, for a unit, when Remove stops it. Run returns only
// after every one of them has returned. Units added before Run start when
// Run starts; units added while Run runs start at once; Add after Run has
// returned fails with ErrNotRunning. Remove returns after the unit's Run
// has returned. The hooks OnAdd and OnRemove run with the host's lock
// held (they must not call the Host), Stopped without it. Reads (Get,
// Names, Each, Ready) take no lock: they see a copy-on-write snapshot.
package unithost

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Unit is one per-domain piece of work: a relay pool, an indexer service.
// Run works until ctx ends and returns nil then; an error means the unit
// failed (it stops alone, the host and the other units go on).
type Unit interface {
	Run(ctx context.Context) error
}

// Config configures a Host.
type Config[U Unit] struct {
	// Noun names a unit in logs and errors ("pool", "domain").
	Noun string
	// Metrics names the host's series; empty names are not exported.
	Metrics MetricNames
	// Registerer receives the series (nil: a private registry).
	Registerer prometheus.Registerer
	// Max bounds the units (0: unbounded).
	Max int
	// Admit says whether a name may become a unit (nil: every name); a
	// name it refuses is ErrNotAllowed.
	Admit func(name string) bool
	// Build makes the unit of name (not started); an error refuses the
	// name as ErrInvalid. It runs with the host's lock held.
	Build func(name string) (U, error)
	// OnAdd is told of each unit once it is visible, OnRemove of each unit
	// Remove takes away, before it is stopped (both with the lock held).
	OnAdd, OnRemove func(name string, u U)
	// Stopped is told of each removed unit once its Run returned (or it
	// never started): the place to free what it held.
	Stopped func(name string, u U)
	// StopOnFailure ends Run at the first unit failure (every other unit
	// stops and Run returns the failure): a process with a fixed set of
	// units that is of no use once one fails. Otherwise a failed unit
	// stops alone.
	StopOnFailure bool
	Logger        zerolog.Logger
}

// MetricNames are the names of a host's series.
type MetricNames struct {
	// Units is the gauge of hosted units.
	Units string
	// Refused counts refusals by kind (ErrorKind.String).
	Refused string
	// Limit is the gauge vector of bounds, by bound; the host sets
	// bound=<Noun>s to Max, the hosting package may add its own.
	Limit string
	// Failed counts units whose Run returned an error, by unit (label
	// FailedLabel).
	Failed      string
	FailedLabel string
}

type entry[U Unit] struct {
	name string
	unit U
	// Set under the host's lock by the goroutine that starts the unit.
	started bool
	stop    context.CancelFunc
	done    chan struct{} // closed when the unit's Run returned
	err     error         // its failure; read after done
}

// Host runs named units; see the package documentation for its contract.
type Host[U Unit] struct {
	cfg Config[U]
	log zerolog.Logger
	m   hostMetrics

	units atomic.Pointer[map[string]*entry[U]]

	// starts hands a goroutine to Run, which starts it under its context.
	starts chan func(context.Context)
	// stopped closes when Run stops starting goroutines.
	stopped chan struct{}
	// failed receives the first unit failure (StopOnFailure).
	failed chan struct{}

	mu      sync.Mutex // guards the fields below and the writes of units
	state   runState
	pending []func(context.Context) // started when Run starts
	max     int
	admit   func(string) bool
	refused map[string]bool // "kind/name" logged once
}

type runState uint8

const (
	idle runState = iota
	running
	ended
)

// New builds a host with no unit; Add them, then Run.
func New[U Unit](cfg Config[U]) (*Host[U], error) {
	if cfg.Build == nil {
		return nil, errors.New("unithost: Config.Build is required")
	}
	if cfg.Noun == "" {
		cfg.Noun = "unit"
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	m, err := newHostMetrics(cfg.Registerer, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	h := &Host[U]{cfg: cfg, m: m, log: cfg.Logger, starts: make(chan func(context.Context)),
		stopped: make(chan struct{}), failed: make(chan struct{}, 1), max: cfg.Max, admit: cfg.Admit, refused: map[string]bool{}}
	empty := map[string]*entry[U]{}
	h.units.Store(&empty)
	m.setLimit(cfg.Noun+"s", cfg.Max)
	return h, nil
}

// SetBounds replaces the bound and the admission policy (a reloaded
// file); running units stay, whatever the new bounds say.
func (h *Host[U]) SetBounds(max int, admit func(string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.max, h.admit = max, admit
	h.m.setLimit(h.cfg.Noun+"s", max)
}

// SetLimit exports another bound of the hosting package (bound=name).
func (h *Host[U]) SetLimit(name string, v float64) { h.m.setLimitF(name, v) }

// Add makes name a unit: admitted, within the bound, built, visible, and
// started (at once while Run runs, else when it starts). It fails with
// *Error: ErrExists (not counted), ErrNotAllowed, ErrTooMany, ErrInvalid
// (counted and logged once per name and kind), or ErrNotRunning after Run
// returned.
func (h *Host[U]) Add(name string) error {
	return h.add(name, nil)
}

// AddUnit is Add with the unit's builder given by the caller instead of
// Config.Build (a unit of another configuration, e.g. a kvrelay model's
// domain); admission and bounds are Add's.
func (h *Host[U]) AddUnit(name string, build func() (U, error)) error {
	return h.add(name, build)
}

func (h *Host[U]) add(name string, build func() (U, error)) error {
	h.mu.Lock()
	if h.state == ended {
		h.mu.Unlock()
		return &Error{Kind: ErrNotRunning, Noun: h.cfg.Noun, Name: name}
	}
	cur := *h.units.Load()
	if _, ok := cur[name]; ok {
		h.mu.Unlock()
		return &Error{Kind: ErrExists, Noun: h.cfg.Noun, Name: name}
	}
	var rerr *Error
	switch {
	case h.admit != nil && !h.admit(name):
		rerr = &Error{Kind: ErrNotAllowed, Noun: h.cfg.Noun, Name: name, Detail: "no allow rule admits it"}
	case h.max > 0 && len(cur) >= h.max:
		rerr = &Error{Kind: ErrTooMany, Noun: h.cfg.Noun, Name: name, Detail: fmt.Sprintf("%d %ss hosted, at most %d", len(cur), h.cfg.Noun, h.max)}
	}
	var u U
	if rerr == nil {
		if build == nil {
			build = func() (U, error) { return h.cfg.Build(name) }
		}
		var err error
		if u, err = build(); err != nil {
			rerr = &Error{Kind: ErrInvalid, Noun: h.cfg.Noun, Name: name, Err: err}
		}
	}
	if rerr != nil {
		h.refuseLocked(rerr)
		h.mu.Unlock()
		return rerr
	}
	e := &entry[U]{name: name, unit: u, done: make(chan struct{})}
	next := maps.Clone(cur)
	next[name] = e
	h.units.Store(&next)
	h.m.units.Set(float64(len(next)))
	if h.cfg.OnAdd != nil {
		h.cfg.OnAdd(name, u)
	}
	h.log.Info().Str(h.cfg.Noun, name).Int(h.cfg.Noun+"s", len(next)).Msg(h.cfg.Noun + " added")
	start := h.goLocked(func(ctx context.Context) { h.runUnit(ctx, e) })
	h.mu.Unlock()
	start()
	return nil
}

// Refuse counts and logs (once per name and kind) a refusal the hosting
// package decided (e.g. a budget) and returns it.
func (h *Host[U]) Refuse(e *Error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.Noun == "" {
		e.Noun = h.cfg.Noun
	}
	h.refuseLocked(e)
	return e
}

func (h *Host[U]) refuseLocked(e *Error) {
	h.m.refused(e.Kind.String())
	key := e.Kind.String() + "/" + e.Name
	if !h.refused[key] {
		h.refused[key] = true
		h.log.Warn().Err(e).Str(h.cfg.Noun, e.Name).Msg(h.cfg.Noun + " refused; the running " + h.cfg.Noun + "s are unchanged")
	}
}

// Go runs task under Run's context (at once while Run runs, else when it
// starts), e.g. a discovery loop; Run waits for it. ErrNotRunning after
// Run returned.
func (h *Host[U]) Go(task func(ctx context.Context)) error {
	h.mu.Lock()
	if h.state == ended {
		h.mu.Unlock()
		return &Error{Kind: ErrNotRunning, Noun: h.cfg.Noun}
	}
	start := h.goLocked(task)
	h.mu.Unlock()
	start()
	return nil
}

// goLocked queues f for Run and returns what hands it over once the lock
// is released. h.mu held.
func (h *Host[U]) goLocked(f func(context.Context)) (start func()) {
	if h.state == idle {
		h.pending = append(h.pending, f)
		return func() {}
	}
	return func() {
		select {
		case h.starts <- f:
		case <-h.stopped: // Run ended meanwhile: f never runs
		}
	}
}

// runUnit runs e under ctx until it ends or Remove stops it.
func (h *Host[U]) runUnit(ctx context.Context, e *entry[U]) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h.mu.Lock()
	if (*h.units.Load())[e.name] != e {
		h.mu.Unlock()
		return // removed before it started; Remove did not wait
	}
	e.started, e.stop = true, cancel
	h.mu.Unlock()
	defer close(e.done)
	if err := e.unit.Run(ctx); err != nil {
		e.err = err
		h.m.failed(e.name)
		if h.cfg.StopOnFailure {
			h.log.Error().Err(err).Str(h.cfg.Noun, e.name).Msg(h.cfg.Noun + " stopped on an error; stopping the others")
			select {
			case h.failed <- struct{}{}:
			default:
			}
			return
		}
		h.log.Error().Err(err).Str(h.cfg.Noun, e.name).Msg(h.cfg.Noun + " stopped on an error; the others go on")
	}
}

// Run starts the units and tasks added so far, then each one added later,
// until ctx ends; it returns once every one has returned. Its error is
// ErrAlreadyRunning on a second call, else the failures of the units still
// hosted (each an *Error of kind ErrFailed naming its unit, joined), nil
// when none failed.
func (h *Host[U]) Run(ctx context.Context) error {
	h.mu.Lock()
	if h.state != idle {
		h.mu.Unlock()
		return &Error{Kind: ErrAlreadyRunning, Noun: h.cfg.Noun}
	}
	h.state = running
	pending := h.pending
	h.pending = nil
	h.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	spawn := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	for _, f := range pending {
		spawn(f)
	}
	for done := false; !done; {
		select {
		case f := <-h.starts:
			spawn(f)
		case <-ctx.Done():
			done = true
		case <-h.failed:
			done = true
		}
	}
	cancel()
	h.mu.Lock()
	h.state = ended
	close(h.stopped)
	h.mu.Unlock()
	wg.Wait()
	var errs []error
	units := *h.units.Load()
	for _, name := range slices.Sorted(maps.Keys(units)) {
		if e := units[name]; e.started && e.err != nil {
			errs = append(errs, &Error{Kind: ErrFailed, Noun: h.cfg.Noun, Name: name, Err: e.err})
		}
	}
	return errors.Join(errs...)
}

// Remove takes name's unit away and stops it; it returns once the unit's
// Run returned, false when name is no unit.
func (h *Host[U]) Remove(name string) bool {
	h.mu.Lock()
	cur := *h.units.Load()
	e, ok := cur[name]
	if !ok {
		h.mu.Unlock()
		return false
	}
	next := maps.Clone(cur)
	delete(next, name)
	h.units.Store(&next)
	h.m.units.Set(float64(len(next)))
	if h.cfg.OnRemove != nil {
		h.cfg.OnRemove(name, e.unit)
	}
	started, stop := e.started, e.stop
	h.mu.Unlock()
	if started {
		stop()
		<-e.done
	}
	if h.cfg.Stopped != nil {
		h.cfg.Stopped(name, e.unit)
	}
	h.log.Info().Str(h.cfg.Noun, name).Msg(h.cfg.Noun + " removed")
	return true
}

// Get returns name's unit.
func (h *Host[U]) Get(name string) (U, bool) {
	e, ok := (*h.units.Load())[name]
	if !ok {
		var zero U
		return zero, false
	}
	return e.unit, true
}

// Only returns the unit when there is exactly one (a host of one), without
// allocating: the default of a query that names no unit.
func (h *Host[U]) Only() (U, bool) {
	units := *h.units.Load()
	if len(units) == 1 {
		for _, e := range units {
			return e.unit, true
		}
	}
	var zero U
	return zero, false
}

// Len is the number of units.
func (h *Host[U]) Len() int { return len(*h.units.Load()) }

// Names lists the units' names, sorted.
func (h *Host[U]) Names() []string { return slices.Sorted(maps.Keys(*h.units.Load())) }

// Each calls f on every unit, by name, until f returns false.
func (h *Host[U]) Each(f func(name string, u U) bool) {
	units := *h.units.Load()
	for _, name := range slices.Sorted(maps.Keys(units)) {
		if !f(name, units[name].unit) {
			return
		}
	}
}

// Ready reports whether some unit is ready by ready's judgement.
func (h *Host[U]) Ready(ready func(U) bool) bool {
	for _, e := range *h.units.Load() {
		if ready(e.unit) {
			return true
		}
	}
	return false
}
