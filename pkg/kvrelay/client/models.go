package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/backoff"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// Model is one model a relay's catalog lists: the canonical id of a Base
// registration of a valid descriptor whose roles a Follower accepts
// (AGGREGATED, or only LEGACY with Config.AcceptLegacy).
type Model struct {
	// ID is the registration's canonical model id.
	ID string
	// Aliases are the registration's aliases (sorted).
	Aliases []string
	// BlockSize is the descriptor's kv_block_size.
	BlockSize uint32
}

// Names reports whether name is m's canonical id or one of its aliases.
func (m Model) Names(name string) bool {
	return m.ID == name || slices.Contains(m.Aliases, name)
}

// WatchModels follows the catalog of cfg.Addr until ctx ends and calls fn,
// from one goroutine, with the models of every valid catalog update (sorted
// by ID; a model listed by several descriptors once, with the first one's
// block size). It is discovery only: nothing is subscribed, and a catalog
// that fails validation is skipped (logged) rather than acted on, because
// the Followers of each model judge the catalog themselves. A failed or
// ended stream is watched again after backoff (cfg.BackoffMin..BackoffMax).
// cfg.Sink and cfg.Model are not used; the subscriber id is
// "<SubscriberBase>/models". It returns nil when ctx ends and an error only
// when the gRPC client cannot be built.
func WatchModels(ctx context.Context, cfg Config, fn func([]Model)) error {
	if err := cfg.validate(false); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger.With().Str("component", "kvrelay-models").Str("source", cfg.Name).Str("addr", cfg.Addr).Logger()
	conn, err := grpc.NewClient("passthrough:///"+cfg.Addr, cfg.dialOptions()...)
	if err != nil {
		return fmt.Errorf("kvrelay client %s: %w", cfg.Name, err)
	}
	defer conn.Close()
	rc := kvrelayv1.NewKvEventRelayClient(conn)
	bo := &backoff.Backoff{Min: cfg.BackoffMin, Max: cfg.BackoffMax, Jitter: true, Rand: cfg.Rand}
	for ctx.Err() == nil {
		start := cfg.Now()
		err := watchModelsOnce(ctx, rc, cfg, log, fn)
		if ctx.Err() != nil {
			return nil
		}
		if cfg.Now().Sub(start) >= cfg.BackoffMax {
			bo.Reset()
		}
		d := bo.Next()
		log.Warn().Err(err).Dur("retry_in", d).Msg("kvrelay catalog watch ended; watching again after backoff")
		select {
		case <-ctx.Done():
			return nil
		case <-cfg.After(d):
		}
	}
	return nil
}

// watchModelsOnce runs one catalog stream until it fails.
func watchModelsOnce(ctx context.Context, rc kvrelayv1.KvEventRelayClient, cfg Config, log zerolog.Logger, fn func([]Model)) error {
	cat, err := rc.WatchKvPoolCatalog(ctx, &kvrelayv1.WatchKvPoolCatalogRequest{
		SubscriberId: cfg.SubscriberBase + "/models", ContractMarker: kvrelayv1.ContractMarker})
	if err != nil {
		return err
	}
	var last []Model
	for {
		u, err := cat.Recv()
		if err != nil {
			if errors.Is(err, errEOF) {
				return errors.New("the catalog stream ended")
			}
			return err
		}
		perPool, err := kvrelay.ValidateCatalogUpdate(u)
		if err != nil {
			log.Warn().Err(err).Uint64("revision", u.GetRevision()).Msg("invalid kvrelay catalog skipped")
			continue
		}
		models := catalogModels(u.GetSnapshot(), perPool, cfg.AcceptLegacy)
		if last != nil && slices.EqualFunc(models, last, func(a, b Model) bool {
			return a.ID == b.ID && a.BlockSize == b.BlockSize && slices.Equal(a.Aliases, b.Aliases)
		}) {
			continue // a heartbeat revision or a change of no model
		}
		last = models
		fn(models)
	}
}

// catalogModels lists the models of a validated catalog: the Base
// registrations of its valid descriptors whose roles a Follower accepts.
func catalogModels(snap *kvrelayv1.KvPoolCatalogSnapshot, perPool []error, acceptLegacy bool) []Model {
	models := []Model{}
	for i, d := range snap.GetPools() {
		if perPool[i] != nil {
			continue // quarantined (§3.4)
		}
		roles := d.GetPoolRoles()
		accepted := slices.Contains(roles, kvrelayv1.WorkerRole_WORKER_ROLE_AGGREGATED) ||
			acceptLegacy && len(roles) == 1 && roles[0] == kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY
		if !accepted {
			continue
		}
		for _, r := range d.GetRegistrations() {
			if r.GetTarget().GetBase() == nil {
				continue // a LoRA adapter shares its base model's pool
			}
			if slices.ContainsFunc(models, func(m Model) bool { return m.ID == r.GetCanonicalModelId() }) {
				continue
			}
			models = append(models, Model{ID: r.GetCanonicalModelId(), Aliases: slices.Clone(r.GetAliases()),
				BlockSize: d.GetQuerySemantics().GetKvBlockSize()})
		}
	}
	slices.SortFunc(models, func(a, b Model) int { return cmp.Compare(a.ID, b.ID) })
	return models
}
