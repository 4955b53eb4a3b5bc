package kvrelay_test

import (
	"bytes"

	"google.golang.org/protobuf/proto"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
)

// Fixtures follow §8.2 scenario 12 and Dynamo's wire tests.

func poolID() *kvrelayv1.KvPoolId {
	return &kvrelayv1.KvPoolId{
		IdentityVersion: 1,
		IndexerDomain: &kvrelayv1.IndexerDomainId{
			CacheSemantics: &kvrelayv1.DigestIdentity{Digest: bytes.Repeat([]byte{0x11}, 16), Source: kvrelayv1.IdentitySource_IDENTITY_SOURCE_DEFAULT_DERIVED},
			RoutingScope:   &kvrelayv1.DigestIdentity{Digest: bytes.Repeat([]byte{0x22}, 16), Source: kvrelayv1.IdentitySource_IDENTITY_SOURCE_EXPLICIT},
		},
		DcId: 0xAABBCCDDEEFF0011,
	}
}

func ckfFormat() *kvrelayv1.CkfFormat {
	return &kvrelayv1.CkfFormat{FormatVersion: 1, Seed: 11, BucketCount: 64, FingerprintBits: 16, SlotsPerBucket: 4}
}

func producer() *kvrelayv1.ProducerIdentity {
	return &kvrelayv1.ProducerIdentity{PoolId: poolID(), ProducerIncarnation: 7, LayoutGeneration: 1, CkfFormat: ckfFormat()}
}

func endpoint(ns, comp, ep string) *kvrelayv1.DynamoEndpointId {
	return &kvrelayv1.DynamoEndpointId{Namespace: ns, Component: comp, Endpoint: ep}
}

func baseTarget(model string) *kvrelayv1.ModelTarget {
	return &kvrelayv1.ModelTarget{Target: &kvrelayv1.ModelTarget_Base{Base: &kvrelayv1.BaseModelTarget{BaseModel: model}}}
}

func descriptor() *kvrelayv1.KvPoolDescriptor {
	return &kvrelayv1.KvPoolDescriptor{
		Producer:        producer(),
		ServingEndpoint: endpoint("prod", "backend", "generate"),
		Registrations: []*kvrelayv1.ModelRegistration{{
			CanonicalModelId: "llama", Target: baseTarget("llama"), Aliases: []string{"chat"},
		}},
		QuerySemantics: &kvrelayv1.KvQuerySemantics{KvBlockSize: 64, HashFormat: kvrelayv1.KvQueryHashFormat_KV_QUERY_HASH_FORMAT_DYNAMO_STANDARD_V1},
		PoolRoles:      []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY},
	}
}

func topology() *kvrelayv1.TopologyEntry {
	return &kvrelayv1.TopologyEntry{
		Namespace:        "prod",
		CanonicalModelId: "llama",
		State:            kvrelayv1.ServingReadinessState_SERVING_READINESS_STATE_READY,
		PresentRoles:     []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_DECODE},
		Members: []*kvrelayv1.TopologyMember{{
			Endpoint: endpoint("prod", "backend", "generate"),
			Roles:    []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_DECODE},
			PoolId:   poolID(),
		}},
		DuplicateRoleEndpoints: []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_PREFILL},
		Adapters: []*kvrelayv1.AdapterReadiness{{
			CanonicalModelId: "tenant-a", State: kvrelayv1.ServingReadinessState_SERVING_READINESS_STATE_READY,
		}},
	}
}

func relay() *kvrelayv1.RelayIdentity {
	return &kvrelayv1.RelayIdentity{DrtInstanceId: 1, RelayIncarnation: 2}
}

func clone[M proto.Message](m M) M { return proto.Clone(m).(M) }
