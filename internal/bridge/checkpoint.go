package bridge

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket is the KV bucket holding per-engine resume points.
const DefaultBucket = "ckf_bridge"

// position is how far an engine's batches are acknowledged by JetStream:
// everything up to Seq of incarnation Epoch (none of it when !Has). Digest
// is the XXH3 of that batch's payload, which identifies the incarnation
// when the bridge reconnects (a restarted engine sends other bytes under
// the same number).
type position struct {
	Endpoint string `json:"endpoint"`
	WorkerID uint64 `json:"worker_id"`
	Epoch    uint64 `json:"epoch"`
	Has      bool   `json:"has"`
	Seq      uint64 `json:"seq"`
	Digest   uint64 `json:"digest"`
}

// CheckpointKey names an engine's resume point in the bucket:
// <domain>.<dc>.<worker_id>.<hex endpoint> (KV keys allow neither ':' nor
// '/').
func CheckpointKey(domain, dc string, s EngineSpec) string {
	return domain + "." + dc + "." + strconv.FormatUint(s.WorkerID, 10) + "." + hex.EncodeToString([]byte(s.Pub))
}

func ensureBucket(ctx context.Context, js jetstream.JetStream, name string, memory bool) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("bridge: bucket %s: %w", name, err)
	}
	storage := jetstream.FileStorage
	if memory {
		storage = jetstream.MemoryStorage
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      name,
		Description: "ckfrelay engine-bridge resume points (last JetStream-acknowledged engine sequence)",
		History:     1,
		Storage:     storage,
	})
	if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		kv, err = js.KeyValue(ctx, name)
	}
	if err != nil {
		return nil, fmt.Errorf("bridge: create bucket %s: %w", name, err)
	}
	return kv, nil
}

// loadPosition returns the stored resume point; a missing key is a fresh
// start, an unreadable or foreign one is reported and ignored.
func loadPosition(ctx context.Context, kv jetstream.KeyValue, key string, s EngineSpec) (position, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return position{}, nil
	}
	if err != nil {
		return position{}, fmt.Errorf("bridge: load %s: %w", key, err)
	}
	var p position
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return position{}, fmt.Errorf("bridge: checkpoint %s: %w", key, err)
	}
	if p.Endpoint != s.Pub || p.WorkerID != s.WorkerID {
		return position{}, fmt.Errorf("bridge: checkpoint %s belongs to %d=%s", key, p.WorkerID, p.Endpoint)
	}
	return p, nil
}

func storePosition(ctx context.Context, kv jetstream.KeyValue, key string, p position) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("bridge: store %s: %w", key, err)
	}
	return nil
}
