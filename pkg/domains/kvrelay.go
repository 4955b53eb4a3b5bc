package domains

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/unithost"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// KvRelayModels follows models over dynamo.kvrelay.v1 (docs/kvrelay.md),
// each into a domain of its own, named ModelDomain(model).
//
// A model's domain is added when a source's catalog first lists the model
// (or at Run, for a listed model with a configured block size), through
// the same bounds and Allow as a discovered domain: over a bound or
// refused, it is refused with *Error, counted and logged once, and the
// domains already served are unchanged. Every source is a lane of every
// model's domain (lanes 15, 14, ... in the sources' order); a source whose
// catalog does not list the model shows that lane refused (no_descriptor)
// until it does. A model that leaves every catalog keeps its domain: its
// lanes are withdrawn (unready) until it comes back.
type KvRelayModels struct {
	// Models are the models to follow, each a canonical model id or an
	// alias as the catalogs register it; the domain is named after the
	// name given here.
	Models []string
	// All follows every model the catalogs list instead: each canonical
	// model id of a Base registration of a descriptor with an accepted
	// role (client.WatchModels); the domain is named after the canonical
	// id.
	All bool
	// KvRelay is every model domain's kvrelay configuration: its Sources
	// (at least one) are the lanes, Model is set per domain, and a zero
	// BlockSize takes the model's kv_block_size from the first catalog
	// that lists it (a pool of another block size is then refused, as
	// with a configured one).
	KvRelay follow.KvRelayConfig
}

func (k KvRelayModels) enabled() bool {
	return len(k.KvRelay.Sources) > 0 && (k.All || len(k.Models) > 0)
}

// Validate checks k against the process's base configuration (New does).
func (k KvRelayModels) Validate(base follow.Config) error {
	switch {
	case !k.All && len(k.Models) == 0:
		if len(k.KvRelay.Sources) > 0 {
			return errors.New("domains: kvrelay sources without models to follow")
		}
		return nil
	case len(k.KvRelay.Sources) == 0:
		return errors.New("domains: kvrelay models without sources")
	case k.All && len(k.Models) > 0:
		return errors.New("domains: kvrelay models listed and all models asked for")
	case len(base.KvRelay.Sources) > 0:
		return errors.New("domains: the default domain's kvrelay sources and the kvrelay models are exclusive")
	}
	seen := map[string]string{}
	for _, m := range k.Models {
		d, err := ModelDomain(m)
		if err != nil {
			return &unithost.Error{Kind: unithost.ErrInvalid, Noun: "domain", Name: m, Err: err}
		}
		if other, ok := seen[d]; ok {
			return &unithost.Error{Kind: unithost.ErrInvalid, Noun: "domain", Name: d, Detail: fmt.Sprintf("models %q and %q map to it", other, m)}
		}
		seen[d] = m
	}
	// The per-domain configuration, with a model and a block size, is
	// checked as every domain's service checks it.
	c := base
	c.Domain = "kvrelay"
	c.KvRelay = k.KvRelay
	c.KvRelay.Model = "model"
	if c.KvRelay.BlockSize == 0 {
		c.KvRelay.BlockSize = 1
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("domains: kvrelay models: %w", err)
	}
	return nil
}

// ModelDomain is the domain a kvrelay model is served in: the model's name
// with every byte outside [A-Za-z0-9_-] replaced by '_' (so
// "meta-llama/Llama-3.1-8B" is served as "meta-llama_Llama-3_1-8B"). A
// name that maps to no valid domain (longer than 64 bytes) is an error.
// Queries may name the domain or the model (its canonical id, its aliases).
func ModelDomain(model string) (string, error) {
	b := []byte(model)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	d := string(b)
	if err := wire.ValidateName("domain", d); err != nil {
		return "", fmt.Errorf("model %q: %w", model, err)
	}
	return d, nil
}

// followModels adds the listed models that need no catalog, then watches
// every source's catalog for the models it lists, until ctx ends (a task
// of the registry's host).
func (r *Registry) followModels(ctx context.Context) {
	k := r.cfg.KvRelay
	if !k.enabled() {
		return
	}
	if !k.All && k.KvRelay.BlockSize != 0 {
		for _, m := range k.Models {
			r.addModel(m, client.Model{ID: m})
		}
	}
	for _, src := range k.KvRelay.Sources {
		cfg := client.Config{Name: src.Name, Addr: src.Addr, AcceptLegacy: k.KvRelay.AcceptLegacy, TLS: k.KvRelay.TLS,
			DialOptions: k.KvRelay.DialOptions, BackoffMin: k.KvRelay.BackoffMin, BackoffMax: k.KvRelay.BackoffMax, Logger: r.cfg.Logger}
		if err := r.host.Go(func(ctx context.Context) {
			if err := client.WatchModels(ctx, cfg, r.modelsListed); err != nil {
				r.log.Error().Err(err).Str("source", src.Name).Msg("kvrelay catalog watch failed; no model is added from this source")
			}
		}); err != nil {
			return
		}
	}
}

// modelsListed adds the models a source's catalog lists that are followed.
// Called from each source's watch goroutine.
func (r *Registry) modelsListed(models []client.Model) {
	k := r.cfg.KvRelay
	for _, m := range models {
		if k.All {
			r.addModel(m.ID, m)
			continue
		}
		for _, name := range k.Models {
			if m.Names(name) {
				r.addModel(name, m)
			}
		}
	}
}

// addModel serves the model followed by name (m as a catalog lists it) in
// its domain, once: a model already added or refused is left as it is.
func (r *Registry) addModel(name string, m client.Model) {
	r.models.Lock()
	defer r.models.Unlock()
	if r.modelsDone[name] {
		return
	}
	r.modelsDone[name] = true
	dn, err := ModelDomain(name)
	if err != nil {
		_ = r.host.Refuse(&unithost.Error{Kind: unithost.ErrInvalid, Name: name, Detail: "the model's name maps to no valid domain", Err: err})
		return
	}
	if d, ok := r.host.Get(dn); ok {
		detail := fmt.Sprintf("model %q maps to a domain already served", name)
		if d.model != "" {
			detail = fmt.Sprintf("model %q maps to the domain of model %q", name, d.model)
		}
		_ = r.host.Refuse(&unithost.Error{Kind: unithost.ErrInvalid, Name: dn, Detail: detail})
		return
	}
	kv := r.cfg.KvRelay.KvRelay
	kv.Model = name
	if kv.BlockSize == 0 {
		kv.BlockSize = m.BlockSize
	}
	if err := r.host.AddUnit(dn, func() (*domain, error) { return r.newDomain(dn, &kv) }); err != nil {
		return // refused: counted and logged by the host
	}
	// Queries may also name the model: its followed name, canonical id and
	// aliases, unless a domain or an earlier model has the name.
	names := maps.Clone(*r.names.Load())
	for _, n := range append([]string{name, m.ID}, m.Aliases...) {
		if _, served := r.host.Get(n); n == "" || n == dn || served {
			continue
		}
		if _, taken := names[n]; !taken {
			names[n] = dn
		}
	}
	r.names.Store(&names)
	r.log.Info().Str("domain", dn).Str("model", name).Uint32("block_size", kv.BlockSize).Msg("kvrelay model followed")
}
