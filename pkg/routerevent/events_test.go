package routerevent

import "testing"

func TestDecodeRouterEvents(t *testing.T) {
	in := `[{"worker_id":7,"storage_tier":"device","event":{"event_id":42,"dp_rank":0,
     "data":{"stored":{"parent_hash":null,"start_position":0,"blocks":[
       {"block_hash":9143094415614847814,"tokens_hash":9143094415614847814,"mm_extra_info":null},
       {"block_hash":18446744073709551615,"tokens_hash":12124091508212882195,"mm_extra_info":null}]}}}},
	 {"worker_id":7,"event":{"event_id":43,"data":{"removed":{"block_hashes":[9510318385840434533]}},"dp_rank":1}},
	 {"worker_id":7,"event":{"event_id":44,"data":"cleared","dp_rank":0}}]`
	evs, err := DecodeRouterEvents([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || evs[0].Event.Data.Kind != EventStored || evs[0].Event.Data.Stored.Blocks[1].BlockHash != 18446744073709551615 {
		t.Fatalf("%+v", evs)
	}
	if evs[1].Event.Data.Kind != EventRemoved || evs[1].Event.DpRank != 1 || evs[1].StorageTier != TierDevice {
		t.Fatalf("%+v", evs[1])
	}
	if evs[2].Event.Data.Kind != EventCleared {
		t.Fatalf("%+v", evs[2])
	}
	for _, bad := range []string{``, `{}`, `{"worker_id":1}`, `{"worker_id":1,"event":{"data":"bogus"}}`, `{"worker_id":-1,"event":{"data":"cleared"}}`, `{"worker_id":1,"storage_tier":"gpu","event":{"data":"cleared"}}`} {
		if _, err := DecodeRouterEvents([]byte(bad)); err == nil {
			t.Fatalf("accepted %q", bad)
		}
	}
}

// UnmarshalJSON called directly on empty or blank input reports an error
// instead of indexing past the end.
func TestEventDataUnmarshalEmptyInput(t *testing.T) {
	for _, in := range []string{"", "   "} {
		var d EventData
		if err := d.UnmarshalJSON([]byte(in)); err == nil {
			t.Fatalf("UnmarshalJSON(%q) accepted", in)
		}
	}
}
