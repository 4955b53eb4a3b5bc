package server

import (
	"fmt"
	"maps"
	"slices"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// servedPool is one pool of the server: its publication, its own
// subscriber limit (§8.4 max_subscribers_per_pool) and the channel that
// ends its pool streams when it leaves the server.
type servedPool struct {
	name    string
	pub     Publication
	subs    limiter
	removed chan struct{} // closed by RemovePool or a replacing AddPool
}

// published is a pool whose publication has a generation.
type published struct {
	pool *servedPool
	gen  Generation
}

// AddPool serves pub as the pool name: from now on its generation, while
// it has one, is in the catalog, readiness and load streams, and
// SubscribeKvPool finds it by its producer key. A pool already served
// under name is replaced (as RemovePool, then AddPool). Names only tell
// the pools apart for this API and the logs; clients never see them.
func (s *Server) AddPool(name string, pub Publication) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.pools[name]; ok {
		close(old.removed)
	}
	s.pools[name] = &servedPool{name: name, pub: pub, subs: limiter{max: int64(s.cfg.MaxSubscribersPerPool)}, removed: make(chan struct{})}
	s.setChangedLocked()
	s.log.Info().Str("pool", name).Int("pools", len(s.pools)).Msg("kvrelay pool added")
}

// RemovePool stops serving the pool name: it leaves the catalog (a new
// revision) and the readiness and load streams, and its pool streams end
// with UNAVAILABLE / PUBLICATION_UNAVAILABLE, as when a generation ends.
// False when no such pool was served.
func (s *Server) RemovePool(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pools[name]
	if !ok {
		return false
	}
	delete(s.pools, name)
	close(p.removed)
	s.m.poolSubs.DeleteLabelValues(name)
	s.setChangedLocked()
	s.log.Info().Str("pool", name).Int("pools", len(s.pools)).Msg("kvrelay pool removed")
	return true
}

// Pools lists the names of the pools served, sorted.
func (s *Server) Pools() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.pools))
}

func (s *Server) setChangedLocked() {
	close(s.setChanged)
	s.setChanged = make(chan struct{})
}

// publishedLocked lists the pools that publish a generation, by name. A
// generation whose pool id (producer key without incarnation and layout)
// an earlier pool already publishes is left out: one catalog must not
// list a pool twice (§3.4), and SubscribeKvPool must find one pool per id.
func (s *Server) publishedLocked() []published {
	out := make([]published, 0, len(s.pools))
	for _, name := range slices.Sorted(maps.Keys(s.pools)) {
		p := s.pools[name]
		gen, ok := p.pub.Generation()
		if !ok {
			continue
		}
		if slices.ContainsFunc(out, func(q published) bool { return poolOf(q.gen.Key) == poolOf(gen.Key) }) {
			continue
		}
		out = append(out, published{pool: p, gen: gen})
	}
	return out
}

// changesLocked is every channel closed at the next change of the view:
// the pool set's and each pool's generation's. Taken before the
// generations are read, so no change is missed.
func (s *Server) changesLocked() []<-chan struct{} {
	out := make([]<-chan struct{}, 0, len(s.pools)+1)
	out = append(out, s.setChanged)
	for _, p := range s.pools {
		out = append(out, p.pub.Changed())
	}
	return out
}

// current returns the catalog/readiness view, bumping the revisions when
// the published generations changed since the last call, and the channels
// of the next change.
func (s *Server) current() (view, []<-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.changesLocked()
	pub := s.publishedLocked()
	v := &s.view
	same := slices.EqualFunc(v.published, pub, func(a, b published) bool {
		return a.pool == b.pool && a.gen.Key == b.gen.Key && a.gen.Descriptor == b.gen.Descriptor
	})
	if !v.inited || !same {
		first := !v.inited
		v.inited, v.published = true, pub
		v.catalog = &kvrelayv1.KvPoolCatalogSnapshot{}
		for _, p := range pub {
			v.catalog.Pools = append(v.catalog.Pools, p.gen.Descriptor)
		}
		v.entries = readinessEntries(pub)
		switch {
		case first && len(pub) == 0:
			v.catalogRev, v.readinessRev = 0, 1
		case first:
			v.catalogRev, v.readinessRev = 1, 1
		default:
			v.catalogRev++
			v.readinessRev++
		}
	}
	return *v, changed
}

// lookup finds the pool publishing key's pool id and its generation.
func (s *Server) lookup(key kvrelay.ProducerKey) (*servedPool, Generation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.publishedLocked() {
		if poolOf(p.gen.Key) == poolOf(key) {
			return p.pool, p.gen, true
		}
	}
	return nil, Generation{}, false
}

// modelKey is what a readiness entry and a model's serving load are keyed
// by (§6.2, §6.4).
type modelKey struct{ namespace, model string }

func modelOf(d *kvrelayv1.KvPoolDescriptor) modelKey {
	return modelKey{d.ServingEndpoint.Namespace, d.Registrations[0].CanonicalModelId}
}

// readinessEntries is the serving topology of the published pools (§6.2):
// one READY entry per (namespace, canonical model), a member per pool. Its
// present roles are the members' roles; when every member is role-less
// (LEGACY) the entry is READY under legacy fallback with present roles
// [LEGACY].
func readinessEntries(pub []published) []*kvrelayv1.TopologyEntry {
	var out []*kvrelayv1.TopologyEntry
	byModel := map[modelKey]*kvrelayv1.TopologyEntry{}
	for _, p := range pub {
		d := p.gen.Descriptor
		k := modelOf(d)
		e, ok := byModel[k]
		if !ok {
			e = &kvrelayv1.TopologyEntry{Namespace: k.namespace, CanonicalModelId: k.model,
				State: kvrelayv1.ServingReadinessState_SERVING_READINESS_STATE_READY}
			byModel[k] = e
			out = append(out, e)
		}
		// Two pools of one model on one endpoint would be a duplicate
		// member (§3.4): the first one stands for the endpoint.
		if slices.ContainsFunc(e.Members, func(m *kvrelayv1.TopologyMember) bool {
			return m.Endpoint.Component == d.ServingEndpoint.Component && m.Endpoint.Endpoint == d.ServingEndpoint.Endpoint
		}) {
			continue
		}
		e.Members = append(e.Members, &kvrelayv1.TopologyMember{Endpoint: d.ServingEndpoint, Roles: d.PoolRoles, PoolId: d.Producer.PoolId})
	}
	for _, e := range out {
		var roles []kvrelayv1.WorkerRole
		for _, m := range e.Members {
			for _, r := range m.Roles {
				if r != kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY && !slices.Contains(roles, r) {
					roles = append(roles, r)
				}
			}
		}
		if len(roles) == 0 {
			e.PresentRoles, e.LegacyFallbackActive = []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY}, true
			continue
		}
		e.PresentRoles = roles
	}
	return out
}

// errRemoved ends the pool streams of a pool that left the server.
func errRemoved(name string) error {
	return fmt.Errorf("pool %q is no longer served by this relay: %w", name, kvrelay.ErrPublicationUnavailable)
}
