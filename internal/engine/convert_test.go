package engine

import (
	"reflect"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/routerevent"
)

// convertOne decodes payload and converts it, returning the RouterEvents
// as the relay's own decoder reads them.
func convertOne(t *testing.T, c *Converter, payload []byte, seq uint64) ([]routerevent.RouterEvent, Stats) {
	t.Helper()
	var d Decoder
	b, err := d.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	var st Stats
	out, n := c.Convert(nil, b, seq, &st)
	if n == 0 {
		if len(out) != 0 {
			t.Fatalf("nothing converted but %q written", out)
		}
		return nil, st
	}
	evs, err := routerevent.DecodeRouterEvents(out)
	if err != nil {
		t.Fatalf("relay rejects %s: %v", out, err)
	}
	if len(evs) != n {
		t.Fatalf("Convert said %d events, JSON has %d", n, len(evs))
	}
	return evs, st
}

// TestConvertD1 checks spec vector D1: V1 (array) and V3 (map) become the
// same Stored event with Dynamo's tokens_hash.
func TestConvertD1(t *testing.T) {
	want := []routerevent.RouterEvent{{
		WorkerID:    7,
		StorageTier: routerevent.TierDevice,
		Event: routerevent.KvCacheEvent{EventID: 42, DpRank: 0, Data: routerevent.EventData{Kind: routerevent.EventStored, Stored: routerevent.StoreData{
			Blocks: []routerevent.StoredBlock{
				{BlockHash: 1229782938247303441, TokensHash: 14643705804678351452},
				{BlockHash: 17506321826814554866, TokensHash: 16777012769546811212},
			}}}},
	}}
	for name, h := range map[string]string{"V1": v1Hex, "V3": v3Hex} {
		c := NewConverter(Options{WorkerID: 7, BlockSize: 4})
		got, st := convertOne(t, c, wrap(t, h), 42)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %+v\nwant %+v", name, got, want)
		}
		if st.Stored != 1 || st.Blocks != 2 {
			t.Fatalf("%s: stats %+v", name, st)
		}
	}
}

// TestConvertLoraSeed checks the V2/V4 hashes of D1: tokens 9–12 after
// parent H2 with and without lora_name "adapter-a".
func TestConvertLoraSeed(t *testing.T) {
	for _, c := range []struct {
		lora string
		want uint64
	}{{"", 0x06B748F1777D599C}, {"adapter-a", 0x9799522907DA1E6B}, {"", 0x06B748F1777D599C}} {
		ev := Event{Kind: KindStored, BlockHashes: []uint64{h3}, HasParent: true, Parent: h2,
			TokenIDs: []uint32{9, 10, 11, 12}, BlockSize: 4}
		if c.lora != "" {
			ev.LoraName = []byte(c.lora)
		}
		conv := NewConverter(Options{WorkerID: 1})
		var st Stats
		out, n := conv.Convert(nil, &Batch{Events: []Event{ev}}, 1, &st)
		evs, err := routerevent.DecodeRouterEvents(out)
		if err != nil || n != 1 {
			t.Fatalf("n=%d err=%v", n, err)
		}
		s := evs[0].Event.Data.Stored
		if s.ParentHash == nil || *s.ParentHash != h2 || s.Blocks[0].TokensHash != c.want || s.Blocks[0].BlockHash != h3 {
			t.Fatalf("lora %q: %+v, want tokens_hash %x", c.lora, s, c.want)
		}
		// The same seed the API uses for a tokens query with lora_name.
		q := ckf.LocalBlockHashesWith(nil, ev.TokenIDs, 4, ckf.BlockOptions{Seed: ckf.SaltedSeed(c.lora, "")})
		if uint64(q[0]) != c.want {
			t.Fatalf("query hash %x differs", q[0])
		}
	}
}

func TestTierOf(t *testing.T) {
	cases := map[string]struct {
		tier routerevent.StorageTier
		ok   bool
	}{
		"": {routerevent.TierDevice, true}, "GPU": {routerevent.TierDevice, true}, "DEVICE": {routerevent.TierDevice, true},
		"CPU": {routerevent.TierHostPinned, true}, "CPU_PINNED": {routerevent.TierHostPinned, true}, "cpu_tier1": {routerevent.TierHostPinned, true},
		"CPU_TIER2": {routerevent.TierDisk, true}, "DISK": {routerevent.TierDisk, true}, "NVME": {routerevent.TierDisk, true}, "STORAGE": {routerevent.TierDisk, true},
		"EXTERNAL": {routerevent.TierExternal, true}, "NETWORK": {routerevent.TierExternal, true}, "REMOTE": {routerevent.TierExternal, true}, "SHARED": {routerevent.TierExternal, true},
		"TAPE": {routerevent.TierDevice, false},
	}
	for m, want := range cases {
		tier, ok := TierOf([]byte(m))
		if tier != want.tier || ok != want.ok {
			t.Errorf("%q: got %v/%v want %v/%v", m, tier, ok, want.tier, want.ok)
		}
	}
}

func storeOn(medium string, hash uint64) Event {
	ev := Event{Kind: KindStored, BlockHashes: []uint64{hash}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4}
	if medium != "" {
		ev.Medium = []byte(medium)
	}
	return ev
}

func TestConvertTierFiltering(t *testing.T) {
	batch := &Batch{Events: []Event{storeOn("GPU", 1), storeOn("CPU", 2), storeOn("DISK", 3), storeOn("TAPE", 4),
		{Kind: KindRemoved, BlockHashes: []uint64{2}, Medium: []byte("CPU")}}}
	for _, pinned := range []bool{false, true} {
		c := NewConverter(Options{WorkerID: 3, IndexHostPinned: pinned})
		var st Stats
		out, n := c.Convert(nil, batch, 1, &st)
		evs, err := routerevent.DecodeRouterEvents(out)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, e := range evs {
			if e.StorageTier != routerevent.TierDevice {
				t.Fatalf("published a %v event", e.StorageTier)
			}
			if e.Event.Data.Kind == routerevent.EventStored {
				got = append(got, e.Event.Data.Stored.Blocks[0].BlockHash)
			} else {
				got = append(got, 100+e.Event.Data.Removed.BlockHashes[0])
			}
		}
		want := []uint64{1}
		wantFiltered := uint64(3)
		if pinned {
			want, wantFiltered = []uint64{1, 2, 102}, 1
		}
		if n != len(want) || !reflect.DeepEqual(got, want) {
			t.Fatalf("pinned=%v: got %v want %v", pinned, got, want)
		}
		if st.TierFiltered != wantFiltered || st.UnknownMedium != 1 {
			t.Fatalf("pinned=%v: stats %+v", pinned, st)
		}
	}
}

func TestConvertDropsWhatDynamoDrops(t *testing.T) {
	sw := storeOn("", 10)
	sw.SpecKind, sw.HasGroupIdx, sw.GroupIdx = []byte("sliding_window"), true, 1
	swRemove := Event{Kind: KindRemoved, BlockHashes: []uint64{10}, HasGroupIdx: true, GroupIdx: 1}
	mainRemove := Event{Kind: KindRemoved, BlockHashes: []uint64{11}, HasGroupIdx: true, GroupIdx: 0}
	wrongSize := storeOn("", 12)
	wrongSize.BlockSize = 8
	dup := storeOn("", 13)
	dup.HasParent, dup.Parent = true, 13
	short := Event{Kind: KindStored, BlockHashes: []uint64{14, 15}, TokenIDs: []uint32{1, 2, 3, 4, 5}, BlockSize: 4}
	remote := storeOn("", 16)
	remote.Locality = []byte("REMOTE")
	c := NewConverter(Options{WorkerID: 1, DPRank: 3, BlockSize: 4})
	var st Stats
	out, n := c.Convert(nil, &Batch{Events: []Event{sw, swRemove, mainRemove, wrongSize, dup, short, remote}}, 9, &st)
	evs, err := routerevent.DecodeRouterEvents(out)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || evs[0].Event.Data.Kind != routerevent.EventRemoved || evs[1].Event.Data.Kind != routerevent.EventStored {
		t.Fatalf("got %d events: %+v", n, evs)
	}
	if b := evs[1].Event.Data.Stored.Blocks; len(b) != 1 || b[0].BlockHash != 14 {
		t.Fatalf("short store converted to %+v, want only block 14", b)
	}
	if evs[0].Event.DpRank != 3 || evs[0].Event.EventID != 9 {
		t.Fatalf("rank/id %d/%d", evs[0].Event.DpRank, evs[0].Event.EventID)
	}
	want := Stats{Stored: 1, Removed: 1, Blocks: 1, NonMainGroup: 2, BlockSizeMismatch: 1, DuplicateHashes: 1, ShortTokens: 1, RemoteLocality: 1}
	if st != want {
		t.Fatalf("stats %+v\nwant  %+v", st, want)
	}
}

func TestAppendClearedIsARelayClear(t *testing.T) {
	c := NewConverter(Options{WorkerID: 5})
	evs, err := routerevent.DecodeRouterEvents(c.AppendCleared(nil, 2, 77))
	if err != nil {
		t.Fatal(err)
	}
	want := routerevent.RouterEvent{WorkerID: 5, Event: routerevent.KvCacheEvent{EventID: 77, DpRank: 2, Data: routerevent.EventData{Kind: routerevent.EventCleared}}}
	if len(evs) != 1 || !reflect.DeepEqual(evs[0], want) {
		t.Fatalf("got %+v", evs)
	}
}

func TestDecodeConvertSteadyStateAllocs(t *testing.T) {
	payloads := [][]byte{unhex(t, b1Hex), unhex(t, b2Hex), wrap(t, v1Hex, v3Hex, v8Hex)}
	var d Decoder
	c := NewConverter(Options{WorkerID: 1, BlockSize: 4, IndexHostPinned: true})
	var st Stats
	buf := make([]byte, 0, 4096)
	run := func() {
		for i, p := range payloads {
			b, err := d.Decode(p)
			if err != nil {
				t.Fatal(err)
			}
			buf, _ = c.Convert(buf[:0], b, uint64(i), &st)
		}
	}
	run()
	if a := testing.AllocsPerRun(100, run); a != 0 {
		t.Fatalf("%v allocations per steady-state run", a)
	}
}
