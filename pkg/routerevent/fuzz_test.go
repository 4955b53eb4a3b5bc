package routerevent

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeRouterEvents: the input decoder never panics, and whatever it
// accepts survives a JSON round trip unchanged.
func FuzzDecodeRouterEvents(f *testing.F) {
	f.Add([]byte(`{"worker_id":7,"event":{"event_id":44,"data":"cleared","dp_rank":0}}`))
	f.Add([]byte(`[{"worker_id":7,"storage_tier":"host_pinned","event":{"event_id":43,"data":{"removed":{"block_hashes":[18446744073709551615]}},"dp_rank":1}}]`))
	f.Add([]byte(`{"worker_id":7,"event":{"event_id":42,"dp_rank":0,"data":{"stored":{"parent_hash":5,"start_position":3,"blocks":[{"block_hash":1,"tokens_hash":2,"mm_extra_info":null}]}}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := DecodeRouterEvents(b)
		if err != nil {
			return
		}
		out, err := json.Marshal(evs)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := DecodeRouterEvents(out)
		if err != nil {
			t.Fatalf("decode of re-encoded %s: %v", out, err)
		}
		if len(again) != len(evs) {
			t.Fatalf("%d events became %d", len(evs), len(again))
		}
		for i := range evs {
			a, b := evs[i], again[i]
			if a.WorkerID != b.WorkerID || a.StorageTier != b.StorageTier || a.Event.EventID != b.Event.EventID ||
				a.Event.DpRank != b.Event.DpRank || a.Event.Data.Kind != b.Event.Data.Kind ||
				len(a.Event.Data.Stored.Blocks) != len(b.Event.Data.Stored.Blocks) ||
				len(a.Event.Data.Removed.BlockHashes) != len(b.Event.Data.Removed.BlockHashes) {
				t.Fatalf("event %d changed: %+v → %+v", i, a, b)
			}
		}
	})
}
