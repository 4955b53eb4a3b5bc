package promx

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Scope registers one component's collectors on a registry, labelled, and
// unregisters them all when the component goes: a pool or domain removed
// and added again registers its series anew instead of colliding with the
// ones it left behind. Safe for concurrent use.
type Scope struct {
	reg prometheus.Registerer

	mu sync.Mutex
	cs []prometheus.Collector
}

// NewScope is a Scope on reg whose series carry labels.
func NewScope(reg prometheus.Registerer, labels prometheus.Labels) *Scope {
	return &Scope{reg: prometheus.WrapRegistererWith(labels, reg)}
}

// Register registers c and remembers it for Close.
func (s *Scope) Register(c prometheus.Collector) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reg.Register(c); err != nil {
		return err
	}
	s.cs = append(s.cs, c)
	return nil
}

// MustRegister registers cs, panicking on the first failure (as
// prometheus.Registry.MustRegister does).
func (s *Scope) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := s.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c and forgets it.
func (s *Scope) Unregister(c prometheus.Collector) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cs = slices.DeleteFunc(s.cs, func(x prometheus.Collector) bool { return x == c })
	return s.reg.Unregister(c)
}

// Close unregisters every collector registered through s.
func (s *Scope) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cs {
		s.reg.Unregister(c)
	}
	s.cs = nil
}

var _ prometheus.Registerer = (*Scope)(nil)
