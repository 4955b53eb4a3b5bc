package routerevent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// StorageTier is where a worker keeps a block.
type StorageTier uint8

const (
	TierDevice StorageTier = iota
	TierHostPinned
	TierDisk
	TierExternal
)

func (t StorageTier) String() string {
	switch t {
	case TierDevice:
		return "device"
	case TierHostPinned:
		return "host_pinned"
	case TierDisk:
		return "disk"
	case TierExternal:
		return "external"
	}
	return fmt.Sprintf("StorageTier(%d)", uint8(t))
}

// MarshalJSON writes the serde name.
func (t StorageTier) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// UnmarshalJSON accepts the serde names only.
func (t *StorageTier) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("storage_tier: %w", err)
	}
	switch s {
	case "device":
		*t = TierDevice
	case "host_pinned":
		*t = TierHostPinned
	case "disk":
		*t = TierDisk
	case "external":
		*t = TierExternal
	default:
		return fmt.Errorf("storage_tier: unknown tier %q", s)
	}
	return nil
}

// EventKind tags KvCacheEventData.
type EventKind uint8

const (
	EventStored EventKind = iota + 1
	EventRemoved
	EventCleared
)

// StoredBlock is KvCacheStoredBlockData. MmExtraInfo is kept raw: the DC
// producer never reads it.
type StoredBlock struct {
	BlockHash   uint64          `json:"block_hash"`
	TokensHash  uint64          `json:"tokens_hash"`
	MmExtraInfo json.RawMessage `json:"mm_extra_info,omitempty"`
}

// StoreData is KvCacheStoreData.
type StoreData struct {
	ParentHash    *uint64       `json:"parent_hash"`
	StartPosition *uint32       `json:"start_position,omitempty"`
	Blocks        []StoredBlock `json:"blocks"`
}

// RemoveData is KvCacheRemoveData.
type RemoveData struct {
	BlockHashes []uint64 `json:"block_hashes"`
}

// EventData is the externally tagged KvCacheEventData union.
type EventData struct {
	Kind    EventKind
	Stored  StoreData
	Removed RemoveData
}

// MarshalJSON writes serde's external tagging.
func (d EventData) MarshalJSON() ([]byte, error) {
	switch d.Kind {
	case EventStored:
		return json.Marshal(map[string]StoreData{"stored": d.Stored})
	case EventRemoved:
		return json.Marshal(map[string]RemoveData{"removed": d.Removed})
	case EventCleared:
		return []byte(`"cleared"`), nil
	}
	return nil, fmt.Errorf("event data: unknown kind %d", d.Kind)
}

// UnmarshalJSON reads serde's external tagging: {"stored":{..}},
// {"removed":{..}} or the bare string "cleared".
func (d *EventData) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if s != "cleared" {
			return fmt.Errorf("event data: unknown unit variant %q", s)
		}
		*d = EventData{Kind: EventCleared}
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("event data: %w", err)
	}
	if len(m) != 1 {
		return fmt.Errorf("event data: want exactly one variant, got %d keys", len(m))
	}
	for k, v := range m {
		switch k {
		case "stored":
			*d = EventData{Kind: EventStored}
			if err := strictUnmarshal(v, &d.Stored); err != nil {
				return fmt.Errorf("stored: %w", err)
			}
		case "removed":
			*d = EventData{Kind: EventRemoved}
			if err := strictUnmarshal(v, &d.Removed); err != nil {
				return fmt.Errorf("removed: %w", err)
			}
		case "cleared":
			*d = EventData{Kind: EventCleared}
		default:
			return fmt.Errorf("event data: unknown variant %q", k)
		}
	}
	return nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	return dec.Decode(v)
}

// KvCacheEvent is one engine event.
type KvCacheEvent struct {
	EventID uint64    `json:"event_id"`
	Data    EventData `json:"data"`
	DpRank  uint32    `json:"dp_rank"`
}

// RouterEvent is Dynamo's RouterEvent (spec §14.1).
type RouterEvent struct {
	WorkerID    uint64       `json:"worker_id"`
	StorageTier StorageTier  `json:"storage_tier"`
	Event       KvCacheEvent `json:"event"`
}

// routerEventJSON detects missing required fields.
type routerEventJSON struct {
	WorkerID    *uint64       `json:"worker_id"`
	StorageTier *StorageTier  `json:"storage_tier"`
	Event       *KvCacheEvent `json:"event"`
}

// UnmarshalJSON requires worker_id and event; storage_tier defaults to device.
func (e *RouterEvent) UnmarshalJSON(b []byte) error {
	var raw routerEventJSON
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw.WorkerID == nil {
		return errors.New("router event: missing worker_id")
	}
	if raw.Event == nil {
		return errors.New("router event: missing event")
	}
	if raw.Event.Data.Kind == 0 {
		return errors.New("router event: missing event.data")
	}
	*e = RouterEvent{WorkerID: *raw.WorkerID, Event: *raw.Event}
	if raw.StorageTier != nil {
		e.StorageTier = *raw.StorageTier
	}
	return nil
}

// DecodeRouterEvents decodes one RouterEvent object or a JSON array of them.
func DecodeRouterEvents(b []byte) ([]RouterEvent, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, errors.New("router event: empty payload")
	}
	if b[0] == '[' {
		var evs []RouterEvent
		if err := json.Unmarshal(b, &evs); err != nil {
			return nil, fmt.Errorf("router event array: %w", err)
		}
		return evs, nil
	}
	var ev RouterEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		return nil, fmt.Errorf("router event: %w", err)
	}
	return []RouterEvent{ev}, nil
}
