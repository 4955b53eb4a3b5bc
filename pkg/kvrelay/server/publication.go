package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
)

// Publication is one pool a Server serves. The relay implements it.
// All methods are safe for concurrent use.
type Publication interface {
	// Generation returns the generation being published and true, or false
	// while this relay does not publish the pool (standby, rebuilding,
	// stopped): the pool is then not in the catalog.
	Generation() (Generation, bool)
	// Changed returns a channel that is closed at the next change of
	// Generation. Take it before calling Generation so no change is missed.
	Changed() <-chan struct{}
	// Subscribe returns a Feed of generation key: a copy of the lane at a
	// consistent sequence, then every delta after it. It fails with
	// kvrelay.ErrPoolNotFound when the pool is not published,
	// kvrelay.ErrProducerChanged when another generation is, or ctx's error.
	// The feed ends with kvrelay.ErrPublicationUnavailable when the
	// generation ends and with kvrelay.ErrSubscriberLagged when its queue
	// overflows limits.
	Subscribe(ctx context.Context, key kvrelay.ProducerKey, limits QueueLimits) (*Feed, error)
	// Load returns the pool's KV occupancy for the load windows (§6.3);
	// zero fields are unknown and sent as 0.
	Load() PoolLoad
	// ServingLoad returns the pool's serving load for the serving load
	// windows (§6.4) and true when it is complete; false sends the pool as
	// DATA_STATUS_UNAVAILABLE, and a load whose PrefillEstimated is set
	// goes out as DATA_STATUS_DEGRADED.
	ServingLoad() (ServingLoad, bool)
}

// ServingLoad is a pool's complete scheduler load (§6.4's pool gauges).
type ServingLoad struct {
	ActivePrefillTokens uint64
	ActiveDecodeBlocks  uint64
	// SourceTime is the oldest contributing report (source_observed_ms).
	SourceTime time.Time
	// Workers is the number of workers the load sums (live_workers).
	Workers uint64
	// PrefillEstimated: ActivePrefillTokens was estimated from request
	// counts by some worker (wire.LoadPrefillEstimated), not measured.
	PrefillEstimated bool
}

// Generation is one producer generation of the pool.
type Generation struct {
	// Descriptor is the catalog entry; shared, never modified.
	Descriptor *kvrelayv1.KvPoolDescriptor
	// Key is Descriptor.Producer's key.
	Key kvrelay.ProducerKey
}

// PoolLoad is a pool's worker-authoritative KV occupancy (§6.3): UsedBlocks
// only when every expected rank reported, TotalBlocks only when every
// capacity is known; 0 otherwise.
type PoolLoad struct {
	UsedBlocks    uint64
	TotalBlocks   uint64
	ObservedRanks uint32
	ExpectedRanks uint32
}

// PoolSpec is the descriptor metadata of the pool, which the relay does not
// learn from its events: the model, the serving endpoint and the query
// semantics.
type PoolSpec struct {
	// Model is the canonical model id, the served name a router looks the
	// pool up by (the registration's canonical_model_id and Base target).
	Model string
	// SourcePath is the model card's source_path, from which the default
	// cache-semantics digest is derived (§7.1), as Dynamo's relay derives
	// it: two pools serving the same weights under different names share
	// an indexer domain. Empty: Model.
	SourcePath string
	// Aliases are extra lookup names (sorted, deduplicated, the model
	// itself dropped).
	Aliases []string
	// Namespace, Component, Endpoint name the serving endpoint; they derive
	// the routing-scope digest (§7.2).
	Namespace, Component, Endpoint string
	// BlockSize is the KV block size in tokens (kv_block_size).
	BlockSize uint32
	// HashFormat defaults to DYNAMO_STANDARD_V1.
	HashFormat kvrelayv1.KvQueryHashFormat
	// Roles are the pool_roles declared (nil: [LEGACY], a role-less card).
	// Dynamo's Global Router follows only pools that declare AGGREGATED, so
	// a relay meant for it declares [AGGREGATED].
	Roles []kvrelayv1.WorkerRole
}

// Generation builds the pool's generation for a producer identity: the
// pool id from the spec (derived digests, dcID), the incarnation, layout
// generation and CKF format as given.
func (p PoolSpec) Generation(dcID, incarnation, layout uint64, format ckf.FormatIdentity) (Generation, error) {
	hf := p.HashFormat
	if hf == kvrelayv1.KvQueryHashFormat_KV_QUERY_HASH_FORMAT_UNSPECIFIED {
		hf = kvrelayv1.KvQueryHashFormat_KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1
	}
	cs, err := kvrelay.DefaultCacheSemantics(p.sourcePath(), p.BlockSize, hf)
	if err != nil {
		return Generation{}, err
	}
	roles := slices.Clone(p.Roles)
	if len(roles) == 0 {
		roles = []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY}
	}
	aliases := slices.Clone(p.Aliases)
	slices.Sort(aliases)
	aliases = slices.Compact(aliases)
	aliases = slices.DeleteFunc(aliases, func(a string) bool { return a == p.Model })
	d := &kvrelayv1.KvPoolDescriptor{
		Producer: &kvrelayv1.ProducerIdentity{
			PoolId: &kvrelayv1.KvPoolId{
				IdentityVersion: kvrelayv1.PoolIdentityVersion,
				IndexerDomain: &kvrelayv1.IndexerDomainId{
					CacheSemantics: cs,
					RoutingScope:   kvrelay.DefaultRoutingScope(p.Namespace, p.Component, p.Endpoint),
				},
				DcId: dcID,
			},
			ProducerIncarnation: incarnation,
			LayoutGeneration:    layout,
			CkfFormat: &kvrelayv1.CkfFormat{
				FormatVersion:   uint32(format.FormatVersion),
				Seed:            format.Seed,
				BucketCount:     format.BucketCount,
				FingerprintBits: uint32(format.FingerprintBits),
				SlotsPerBucket:  uint32(format.SlotsPerBucket),
			},
		},
		ServingEndpoint: &kvrelayv1.DynamoEndpointId{Namespace: p.Namespace, Component: p.Component, Endpoint: p.Endpoint},
		Registrations: []*kvrelayv1.ModelRegistration{{
			CanonicalModelId: p.Model,
			Target:           &kvrelayv1.ModelTarget{Target: &kvrelayv1.ModelTarget_Base{Base: &kvrelayv1.BaseModelTarget{BaseModel: p.Model}}},
			Aliases:          aliases,
		}},
		QuerySemantics: &kvrelayv1.KvQuerySemantics{KvBlockSize: p.BlockSize, HashFormat: hf},
		PoolRoles:      roles,
	}
	if err := kvrelay.ValidatePoolDescriptor(d); err != nil {
		return Generation{}, fmt.Errorf("kvrelay pool: %w", err)
	}
	key, err := kvrelay.KeyOf(d.Producer)
	if err != nil {
		return Generation{}, fmt.Errorf("kvrelay pool: %w", err)
	}
	return Generation{Descriptor: d, Key: key}, nil
}

// sourcePath is the card source path of the cache-semantics digest.
func (p PoolSpec) sourcePath() string {
	if p.SourcePath == "" {
		return p.Model
	}
	return p.SourcePath
}

// Validate reports a spec that cannot make a valid descriptor.
func (p PoolSpec) Validate() error {
	_, err := p.Generation(1, 1, 1, ckf.NewFormatIdentity(ckf.DefaultSeed, 1024))
	return err
}

// PoolText is a pool's descriptor metadata as an operator writes it:
// relay-producer's --kvrelay-* flags and a pools file's kvrelay block both
// hold one, and Spec parses either the same way.
type PoolText struct {
	Model      string
	SourcePath string
	Aliases    []string
	// Roles are role names, case-insensitive, with or without the
	// WORKER_ROLE_ prefix; none: [AGGREGATED].
	Roles []string
	// Endpoint is NAMESPACE/COMPONENT/ENDPOINT.
	Endpoint  string
	BlockSize uint64
}

// PoolTextError names the field of a PoolText that Spec refused: model,
// endpoint, block_size, roles, or descriptor when the fields are each
// well-formed but make no valid descriptor together.
type PoolTextError struct {
	Field string
	Err   error
}

func (e *PoolTextError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *PoolTextError) Unwrap() error { return e.Err }

// Spec parses t into a PoolSpec: a model, an endpoint of three parts, a
// block size in 1..2^31, known roles (AGGREGATED when none is given, since
// Dynamo's Global Router follows only pools declaring it; LEGACY, a card
// without a role, alone), and fields that make a valid descriptor. Errors
// are *PoolTextError.
func (t PoolText) Spec() (PoolSpec, error) {
	bad := func(field string, err error) (PoolSpec, error) {
		return PoolSpec{}, &PoolTextError{Field: field, Err: err}
	}
	if t.Model == "" {
		return bad("model", errors.New("required"))
	}
	parts := strings.Split(t.Endpoint, "/")
	if len(parts) != 3 {
		return bad("endpoint", fmt.Errorf("%q: want NAMESPACE/COMPONENT/ENDPOINT", t.Endpoint))
	}
	if t.BlockSize == 0 || t.BlockSize > 1<<31 {
		return bad("block_size", fmt.Errorf("%d: set the workers' KV block size (1..2^31)", t.BlockSize))
	}
	roles, err := ParseRoles(t.Roles)
	if err != nil {
		return bad("roles", err)
	}
	spec := PoolSpec{Model: t.Model, SourcePath: t.SourcePath, Aliases: slices.Clone(t.Aliases), Namespace: parts[0], Component: parts[1],
		Endpoint: parts[2], BlockSize: uint32(t.BlockSize), Roles: roles}
	if err := spec.Validate(); err != nil {
		return bad("descriptor", err)
	}
	return spec, nil
}

// ParseRoles maps role names to WorkerRoles (see PoolText.Roles).
func ParseRoles(names []string) ([]kvrelayv1.WorkerRole, error) {
	if len(names) == 0 {
		return []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_AGGREGATED}, nil
	}
	var roles []kvrelayv1.WorkerRole
	for _, n := range names {
		key := strings.ToUpper(n)
		if !strings.HasPrefix(key, "WORKER_ROLE_") {
			key = "WORKER_ROLE_" + key
		}
		v, ok := kvrelayv1.WorkerRole_value[key]
		r := kvrelayv1.WorkerRole(v)
		switch {
		case !ok || r == kvrelayv1.WorkerRole_WORKER_ROLE_UNSPECIFIED:
			return nil, fmt.Errorf("unknown role %q (want AGGREGATED, PREFILL, DECODE, ENCODE or LEGACY)", n)
		case slices.Contains(roles, r):
			return nil, fmt.Errorf("%s given twice", n)
		}
		roles = append(roles, r)
	}
	if len(roles) > 1 && slices.Contains(roles, kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY) {
		return nil, errors.New("LEGACY stands for a card without a role and cannot be combined with others")
	}
	return roles, nil
}
