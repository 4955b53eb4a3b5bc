package routerevent

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/testenv/cputime"
)

const (
	specStored = `{"worker_id":7,"storage_tier":"device","event":{"event_id":42,"dp_rank":0,
 "data":{"stored":{"parent_hash":null,"start_position":0,"blocks":[
   {"block_hash":9143094415614847814,"tokens_hash":9143094415614847814,"mm_extra_info":null},
   {"block_hash":9510318385840434533,"tokens_hash":12124091508212882195,"mm_extra_info":null}]}}}}`
	specRemoved = `{"worker_id":7,"event":{"event_id":43,"data":{"removed":{"block_hashes":[9510318385840434533]}},"dp_rank":0}}`
	specCleared = `{"worker_id":7,"event":{"event_id":44,"data":"cleared","dp_rank":0}}`
	// richStored exercises every reusable buffer: parent and start
	// pointers, several blocks, raw mm_extra_info.
	richStored = `[{"worker_id":1,"storage_tier":"disk","event":{"event_id":9,"dp_rank":3,"data":{"stored":{"parent_hash":11,"start_position":64,"blocks":[` +
		`{"block_hash":1,"tokens_hash":2,"mm_extra_info":{"mm_objects":[{"mm_hash":5,"offsets":[[0,4]]}]}},` +
		`{"block_hash":3,"tokens_hash":4,"mm_extra_info":null},{"block_hash":5,"tokens_hash":6}]}}}},` +
		`{"worker_id":1,"event":{"event_id":10,"data":{"removed":{"block_hashes":[1,2,3,4,5,6,7,8]}}}},` +
		`{"worker_id":1,"event":{"event_id":11,"data":{"stored":{"parent_hash":3,"blocks":[{"block_hash":7,"tokens_hash":8}]}}}}]`
)

// diffEvents describes how got differs from want (the reference decoder's
// result), or returns "". Slices of the variant Kind does not select must
// be empty; everything else must match exactly, nil-ness included.
func diffEvents(want, got []RouterEvent) string {
	if len(want) != len(got) {
		return fmt.Sprintf("%d events, want %d", len(got), len(want))
	}
	if (want == nil) != (got == nil) {
		return fmt.Sprintf("nil result %v, want %v", got == nil, want == nil)
	}
	for i := range want {
		if d := diffEvent(&want[i], &got[i]); d != "" {
			return fmt.Sprintf("event %d: %s", i, d)
		}
	}
	return ""
}

func diffEvent(w, g *RouterEvent) string {
	if w.WorkerID != g.WorkerID || w.StorageTier != g.StorageTier || w.Event.EventID != g.Event.EventID ||
		w.Event.DpRank != g.Event.DpRank || w.Event.Data.Kind != g.Event.Data.Kind {
		return fmt.Sprintf("header %+v, want %+v", *g, *w)
	}
	wd, gd := &w.Event.Data, &g.Event.Data
	ws, gs := &wd.Stored, &gd.Stored
	if wd.Kind == EventStored {
		if d := diffPtr("parent_hash", ws.ParentHash, gs.ParentHash); d != "" {
			return d
		}
		if d := diffPtr("start_position", ws.StartPosition, gs.StartPosition); d != "" {
			return d
		}
		if (ws.Blocks == nil) != (gs.Blocks == nil) || len(ws.Blocks) != len(gs.Blocks) {
			return fmt.Sprintf("blocks %#v, want %#v", gs.Blocks, ws.Blocks)
		}
		for i := range ws.Blocks {
			wb, gb := &ws.Blocks[i], &gs.Blocks[i]
			if wb.BlockHash != gb.BlockHash || wb.TokensHash != gb.TokensHash ||
				(wb.MmExtraInfo == nil) != (gb.MmExtraInfo == nil) || !bytes.Equal(wb.MmExtraInfo, gb.MmExtraInfo) {
				return fmt.Sprintf("block %d: %+v, want %+v", i, *gb, *wb)
			}
		}
	} else if gs.ParentHash != nil || gs.StartPosition != nil || len(gs.Blocks) != 0 {
		return fmt.Sprintf("inactive stored payload %+v", *gs)
	}
	wr, gr := wd.Removed.BlockHashes, gd.Removed.BlockHashes
	if wd.Kind == EventRemoved {
		if (wr == nil) != (gr == nil) || len(wr) != len(gr) {
			return fmt.Sprintf("block_hashes %#v, want %#v", gr, wr)
		}
		for i := range wr {
			if wr[i] != gr[i] {
				return fmt.Sprintf("block_hashes %v, want %v", gr, wr)
			}
		}
	} else if len(gr) != 0 {
		return fmt.Sprintf("inactive removed payload %v", gr)
	}
	return ""
}

func diffPtr[T comparable](name string, w, g *T) string {
	switch {
	case (w == nil) != (g == nil):
		return fmt.Sprintf("%s nil=%v, want nil=%v", name, g == nil, w == nil)
	case w != nil && *w != *g:
		return fmt.Sprintf("%s %v, want %v", name, *g, *w)
	}
	return ""
}

// fastOnly runs the scanner alone: ok says it handled the input itself.
func fastOnly(dst []RouterEvent, b []byte) ([]RouterEvent, bool) {
	d := fastDecoder{b: b}
	return d.decode(dst)
}

// prefilled returns a buffer whose elements hold stale data in every
// reusable field, so reuse bugs show up as wrong results.
func prefilled(t testing.TB) []RouterEvent {
	t.Helper()
	buf, err := DecodeRouterEventsInto(nil, []byte(richStored))
	if err != nil || len(buf) != 3 {
		t.Fatalf("prefill: %d events, %v", len(buf), err)
	}
	return buf
}

// checkAgainstReference decodes b with both decoders (fresh and reused
// buffers) and fails on any difference in acceptance, error or result.
func checkAgainstReference(t *testing.T, b []byte) (want []RouterEvent, wantErr error) {
	t.Helper()
	want, wantErr = DecodeRouterEvents(b)
	for _, dst := range [][]RouterEvent{nil, prefilled(t)} {
		// No spare capacity: a read past the input's end panics.
		in := bytes.Clone(b)
		in = in[:len(in):len(in)]
		got, err := DecodeRouterEventsInto(dst, in)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: error %v, reference error %v", b, err, wantErr)
		}
		if err != nil {
			if err.Error() != wantErr.Error() {
				t.Fatalf("%q: error %q, reference %q", b, err, wantErr)
			}
			if len(got) != 0 {
				t.Fatalf("%q: %d events returned with an error", b, len(got))
			}
			continue
		}
		if d := diffEvents(want, got); d != "" {
			t.Fatalf("%q: %s", b, d)
		}
		// The result must not alias the input.
		for i := range in {
			in[i] = 'X'
		}
		if d := diffEvents(want, got); d != "" {
			t.Fatalf("%q: result changed with its input: %s", b, d)
		}
	}
	return want, wantErr
}

func u64p(v uint64) *uint64 { return &v }
func u32p(v uint32) *uint32 { return &v }

func TestDecodeRouterEventsIntoShapes(t *testing.T) {
	const maxU64 = 18446744073709551615
	tests := []struct {
		name string
		in   string
		want []RouterEvent
	}{
		{"spec stored", specStored, []RouterEvent{{WorkerID: 7, Event: KvCacheEvent{EventID: 42, Data: EventData{Kind: EventStored,
			Stored: StoreData{StartPosition: u32p(0), Blocks: []StoredBlock{
				{BlockHash: 9143094415614847814, TokensHash: 9143094415614847814, MmExtraInfo: []byte("null")},
				{BlockHash: 9510318385840434533, TokensHash: 12124091508212882195, MmExtraInfo: []byte("null")}}}}}}}},
		{"spec removed", specRemoved, []RouterEvent{{WorkerID: 7, Event: KvCacheEvent{EventID: 43,
			Data: EventData{Kind: EventRemoved, Removed: RemoveData{BlockHashes: []uint64{9510318385840434533}}}}}}},
		{"spec cleared", specCleared, []RouterEvent{{WorkerID: 7, Event: KvCacheEvent{EventID: 44, Data: EventData{Kind: EventCleared}}}}},
		{"array of all three", "[" + specStored + "," + specRemoved + "," + specCleared + "]", nil},
		{"empty array", `[]`, []RouterEvent{}},
		{"whitespace everywhere", " \t\r\n[ { \"worker_id\" : 7 , \"event\" : { \"data\" : { \"removed\" : { \"block_hashes\" : [ 1 , 2 ] } } } } ] \n", []RouterEvent{
			{WorkerID: 7, Event: KvCacheEvent{Data: EventData{Kind: EventRemoved, Removed: RemoveData{BlockHashes: []uint64{1, 2}}}}}}},
		{"tiers", `[{"worker_id":1,"storage_tier":"host_pinned","event":{"data":"cleared"}},{"worker_id":1,"storage_tier":"disk","event":{"data":"cleared"}},{"worker_id":1,"storage_tier":"external","event":{"data":"cleared"}}]`, []RouterEvent{
			{WorkerID: 1, StorageTier: TierHostPinned, Event: KvCacheEvent{Data: EventData{Kind: EventCleared}}},
			{WorkerID: 1, StorageTier: TierDisk, Event: KvCacheEvent{Data: EventData{Kind: EventCleared}}},
			{WorkerID: 1, StorageTier: TierExternal, Event: KvCacheEvent{Data: EventData{Kind: EventCleared}}}}},
		{"max numbers", `{"worker_id":18446744073709551615,"event":{"event_id":18446744073709551615,"dp_rank":4294967295,"data":{"stored":{"parent_hash":18446744073709551615,"start_position":4294967295,"blocks":[{"block_hash":18446744073709551615,"tokens_hash":0}]}}}}`,
			[]RouterEvent{{WorkerID: maxU64, Event: KvCacheEvent{EventID: maxU64, DpRank: 1<<32 - 1, Data: EventData{Kind: EventStored,
				Stored: StoreData{ParentHash: u64p(maxU64), StartPosition: u32p(1<<32 - 1), Blocks: []StoredBlock{{BlockHash: maxU64}}}}}}}},
		{"mm_extra_info kept verbatim", `{"worker_id":1,"event":{"data":{"stored":{"parent_hash":2,"blocks":[{"block_hash":3,"tokens_hash":4,"mm_extra_info":{ "mm_objects" : [{"mm_hash":5,"offsets":[[0, 4]]}], "s":"\u00e9\"" }}]}}}}`,
			[]RouterEvent{{WorkerID: 1, Event: KvCacheEvent{Data: EventData{Kind: EventStored, Stored: StoreData{ParentHash: u64p(2),
				Blocks: []StoredBlock{{BlockHash: 3, TokensHash: 4, MmExtraInfo: []byte(`{ "mm_objects" : [{"mm_hash":5,"offsets":[[0, 4]]}], "s":"\u00e9\"" }`)}}}}}}}},
		{"absent optional fields", `{"worker_id":1,"event":{"data":{"stored":{"blocks":[{}]}}}}`, []RouterEvent{{WorkerID: 1,
			Event: KvCacheEvent{Data: EventData{Kind: EventStored, Stored: StoreData{Blocks: []StoredBlock{{}}}}}}}},
		{"empty blocks and hashes", `[{"worker_id":1,"event":{"data":{"stored":{"blocks":[]}}}},{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[]}}}}]`, []RouterEvent{
			{WorkerID: 1, Event: KvCacheEvent{Data: EventData{Kind: EventStored, Stored: StoreData{Blocks: []StoredBlock{}}}}},
			{WorkerID: 1, Event: KvCacheEvent{Data: EventData{Kind: EventRemoved, Removed: RemoveData{BlockHashes: []uint64{}}}}}}},
		{"unknown fields ignored at every level", `{"residency_domain":"worker","worker_id":1,"x":[1,{"y":null},"\ud83d\ude00",-1.5e+3,true,false],"event":{"z":{},"event_id":2,"data":{"stored":{"w":"","blocks":[{"v":1e9,"block_hash":3}]}}},"state_source":null}`,
			[]RouterEvent{{WorkerID: 1, Event: KvCacheEvent{EventID: 2, Data: EventData{Kind: EventStored, Stored: StoreData{Blocks: []StoredBlock{{BlockHash: 3}}}}}}}},
		{"hex escapes of both cases in an ignored value", `{"worker_id":1,"x":"\u00C9\u09aF\uFA0f\uE000","event":{"data":"cleared"}}`, []RouterEvent{
			{WorkerID: 1, Event: KvCacheEvent{Data: EventData{Kind: EventCleared}}}}},
		{"zeros in ignored numbers", `{"worker_id":1,"x":[10,0.05,2e10,-100,1E+0],"event":{"data":"cleared"}}`, []RouterEvent{
			{WorkerID: 1, Event: KvCacheEvent{Data: EventData{Kind: EventCleared}}}}},
		{"space in an unknown key", `{"worker_id":1,"a b":1,"event":{"data":"cleared"}}`, []RouterEvent{
			{WorkerID: 1, Event: KvCacheEvent{Data: EventData{Kind: EventCleared}}}}},
		{"invalid UTF-8 in an ignored value", "{\"worker_id\":1,\"note\":\"\xff\xfe\",\"event\":{\"data\":\"cleared\"}}", []RouterEvent{
			{WorkerID: 1, Event: KvCacheEvent{Data: EventData{Kind: EventCleared}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := checkAgainstReference(t, []byte(tt.in))
			if err != nil {
				t.Fatalf("reference rejects: %v", err)
			}
			if tt.want != nil {
				if d := diffEvents(tt.want, want); d != "" {
					t.Fatalf("reference decoder: %s", d)
				}
			}
			// Canonical shapes must not need the fallback.
			if _, ok := fastOnly(nil, []byte(tt.in)); !ok {
				t.Fatalf("fast path declined a canonical input")
			}
		})
	}
}

// TestDecodeRouterEventsIntoRejects: every malformed input is rejected with
// the reference decoder's error, and the scanner never claims it.
func TestDecodeRouterEventsIntoRejects(t *testing.T) {
	ev := func(data string) string { return `{"worker_id":1,"event":{"data":` + data + `}}` }
	blk := func(b string) string { return ev(`{"stored":{"blocks":[` + b + `]}}`) }
	tests := map[string]string{
		"empty":                    ``,
		"spaces":                   " \n",
		"scalar":                   `7`,
		"null":                     `null`,
		"array of null":            `[null]`,
		"array of number":          `[1]`,
		"trailing comma":           `[` + specCleared + `,]`,
		"trailing data":            specCleared + ` {}`,
		"trailing garbage":         specCleared + `x`,
		"two values":               specCleared + specCleared,
		"unclosed":                 `{"worker_id":1,"event":{"data":"cleared"}`,
		"missing worker_id":        `{"event":{"data":"cleared"}}`,
		"missing event":            `{"worker_id":1}`,
		"null worker_id":           `{"worker_id":null,"event":{"data":"cleared"}}`,
		"null event":               `{"worker_id":1,"event":null}`,
		"missing data":             `{"worker_id":1,"event":{"event_id":1}}`,
		"null data":                ev(`null`),
		"negative":                 `{"worker_id":-1,"event":{"data":"cleared"}}`,
		"negative zero":            `{"worker_id":-0,"event":{"data":"cleared"}}`,
		"fraction":                 `{"worker_id":1.0,"event":{"data":"cleared"}}`,
		"exponent":                 `{"worker_id":1e3,"event":{"data":"cleared"}}`,
		"leading zero":             `{"worker_id":01,"event":{"data":"cleared"}}`,
		"overflow u64":             `{"worker_id":18446744073709551616,"event":{"data":"cleared"}}`,
		"overflow u64 long":        `{"worker_id":99999999999999999999999,"event":{"data":"cleared"}}`,
		"overflow u32":             `{"worker_id":1,"event":{"dp_rank":4294967296,"data":"cleared"}}`,
		"string number":            `{"worker_id":"1","event":{"data":"cleared"}}`,
		"unknown tier":             `{"worker_id":1,"storage_tier":"gpu","event":{"data":"cleared"}}`,
		"tier case":                `{"worker_id":1,"storage_tier":"Device","event":{"data":"cleared"}}`,
		"tier number":              `{"worker_id":1,"storage_tier":0,"event":{"data":"cleared"}}`,
		"unknown unit variant":     ev(`"clear"`),
		"unknown variant":          ev(`{"evicted":{}}`),
		"variant case":             ev(`{"Stored":{"blocks":[]}}`),
		"two variants":             ev(`{"stored":{"blocks":[]},"removed":{"block_hashes":[]}}`),
		"no variant":               ev(`{}`),
		"stored not object":        ev(`{"stored":[]}`),
		"blocks not array":         ev(`{"stored":{"blocks":{}}}`),
		"block not object":         blk(`1`),
		"block hash negative":      blk(`{"block_hash":-5}`),
		"block hash float":         blk(`{"block_hash":1.5}`),
		"tokens hash overflow":     blk(`{"tokens_hash":18446744073709551616}`),
		"parent overflow":          ev(`{"stored":{"parent_hash":18446744073709551616,"blocks":[]}}`),
		"start overflow":           ev(`{"stored":{"start_position":4294967296,"blocks":[]}}`),
		"bad mm_extra_info":        blk(`{"mm_extra_info":{"a":}}`),
		"hashes not array":         ev(`{"removed":{"block_hashes":1}}`),
		"hash string":              ev(`{"removed":{"block_hashes":["1"]}}`),
		"hash exponent":            ev(`{"removed":{"block_hashes":[1E2]}}`),
		"control char in string":   "{\"worker_id\":1,\"x\":\"a\x01\",\"event\":{\"data\":\"cleared\"}}",
		"bad escape":               `{"worker_id":1,"x":"\q","event":{"data":"cleared"}}`,
		"short unicode escape":     `{"worker_id":1,"x":"\u12","event":{"data":"cleared"}}`,
		"bad literal":              `{"worker_id":1,"x":nul,"event":{"data":"cleared"}}`,
		"bad number in unknown":    `{"worker_id":1,"x":1.,"event":{"data":"cleared"}}`,
		"single quotes":            `{'worker_id':1}`,
		"missing colon":            `{"worker_id" 1,"event":{"data":"cleared"}}`,
		"trailing comma in object": `{"worker_id":1,"event":{"data":"cleared"},}`,
		// Input cut off inside a value the scanner reads itself.
		"cut before worker_id":     `{"worker_id":`,
		"cut in worker_id":         `{"worker_id":12`,
		"cut after worker_id 0":    `{"worker_id":0`,
		"cut in an ignored string": `{"worker_id":1,"x":"abc`,
		"cut after a backslash":    `{"worker_id":1,"x":"ab\`,
		"cut after an exponent e":  `{"worker_id":1,"x":5e`,
		"objects nested too deep":  `{"worker_id":1,"x":` + strings.Repeat(`{"a":`, 10001) + `1` + strings.Repeat("}", 10001) + `,"event":{"data":"cleared"}}`,
		"cut in a key":             `{"worker_id":1,"eve`,
		"cut in a tier":            `{"worker_id":1,"storage_tier":"dis`,
		"cut in null parent":       `{"worker_id":1,"event":{"data":{"stored":{"parent_hash":nul`,
		"cut in literal":           `{"worker_id":1,"x":tru`,
		"cut in unicode escape":    `{"worker_id":1,"x":"\u12`,
		"cut before a value":       `{"worker_id":1,"x":`,
		"cut after a minus":        `{"worker_id":1,"x":-`,
		"cut after a number":       `{"worker_id":1,"x":5`,
		"cut after a fraction":     `{"worker_id":1,"x":5.25`,
		"cut after an exponent":    `{"worker_id":1,"x":5e+`,
		"nesting too deep":         `{"worker_id":1,"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `,"event":{"data":"cleared"}}`,
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := checkAgainstReference(t, []byte(in)); err == nil {
				t.Fatalf("reference accepts %q", in)
			}
			b := []byte(in)
			if _, ok := fastOnly(nil, b[:len(b):len(b)]); ok {
				t.Fatalf("fast path accepted %q", in)
			}
		})
	}
}

// TestDecodeRouterEventsIntoQuirks: inputs outside the canonical shapes that
// encoding/json still accepts, often with surprising results; the scanner
// declines them and the fallback reproduces the reference exactly.
func TestDecodeRouterEventsIntoQuirks(t *testing.T) {
	tests := map[string]string{
		"key case":                  `{"Worker_ID":1,"EVENT":{"Data":"cleared"}}`,
		"case variant shadows":      `{"worker_id":1,"WORKER_ID":2,"event":{"data":"cleared"}}`,
		"case variant tier":         `{"worker_id":1,"Storage_Tier":"disk","event":{"data":"cleared"}}`,
		"case variant event_id":     `{"worker_id":1,"event":{"data":"cleared","Event_Id":9}}`,
		"case variant dp_rank":      `{"worker_id":1,"event":{"data":"cleared","DP_RANK":9}}`,
		"case variant parent":       `{"worker_id":1,"event":{"data":{"stored":{"Parent_Hash":9,"blocks":[]}}}}`,
		"case variant start":        `{"worker_id":1,"event":{"data":{"stored":{"START_POSITION":9,"blocks":[]}}}}`,
		"case variant blocks":       `{"worker_id":1,"event":{"data":{"stored":{"blocks":[],"Blocks":[{"block_hash":1}]}}}}`,
		"case variant tokens_hash":  `{"worker_id":1,"event":{"data":{"stored":{"blocks":[{"Tokens_Hash":3}]}}}}`,
		"case variant mm":           `{"worker_id":1,"event":{"data":{"stored":{"blocks":[{"MM_EXTRA_INFO":{}}]}}}}`,
		"case variant hashes":       `{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[1],"Block_Hashes":[2]}}}}`,
		"non-ASCII key":             "{\"worker_id\":1,\"\x80\":1,\"event\":{\"data\":\"cleared\"}}",
		"key case folding":          "{\"worker_id\":1,\"event\":{\"data\":{\"stored\":{\"blocks\":[{\"bloc\u212a_hash\":5}]}}}}",
		"escaped key":               `{"worker\u005fid":1,"event":{"data":"cleared"}}`,
		"escaped tier":              `{"worker_id":1,"storage_tier":"dis\u006b","event":{"data":"cleared"}}`,
		"escaped cleared":           `{"worker_id":1,"event":{"data":"clea\u0072ed"}}`,
		"escaped variant":           `{"worker_id":1,"event":{"data":{"\u0072emoved":{"block_hashes":[1]}}}}`,
		"duplicate worker_id":       `{"worker_id":1,"worker_id":2,"event":{"data":"cleared"}}`,
		"duplicate event merges":    `{"worker_id":1,"event":{"event_id":5,"data":"cleared"},"event":{"data":{"removed":{"block_hashes":[1]}}}}`,
		"duplicate variant":         `{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[1]},"removed":{"block_hashes":[2]}}}}`,
		"duplicate block field":     `{"worker_id":1,"event":{"data":{"stored":{"blocks":[{"block_hash":1,"block_hash":2}]}}}}`,
		"null tier":                 `{"worker_id":1,"storage_tier":null,"event":{"data":"cleared"}}`,
		"null event_id":             `{"worker_id":1,"event":{"event_id":null,"data":"cleared"}}`,
		"null dp_rank":              `{"worker_id":1,"event":{"dp_rank":null,"data":"cleared"}}`,
		"null stored":               `{"worker_id":1,"event":{"data":{"stored":null}}}`,
		"null blocks":               `{"worker_id":1,"event":{"data":{"stored":{"blocks":null}}}}`,
		"missing blocks":            `{"worker_id":1,"event":{"data":{"stored":{"parent_hash":1}}}}`,
		"null block":                `{"worker_id":1,"event":{"data":{"stored":{"blocks":[null]}}}}`,
		"null block_hash":           `{"worker_id":1,"event":{"data":{"stored":{"blocks":[{"block_hash":null}]}}}}`,
		"null hash element":         `{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[1,null,3]}}}}`,
		"missing block_hashes":      `{"worker_id":1,"event":{"data":{"removed":{}}}}`,
		"cleared object":            `{"worker_id":1,"event":{"data":{"cleared":[1,2]}}}`,
		"unicode space around":      "\v\u00a0" + specCleared + "\f\u0085",
		"unicode space around list": "\v[]",
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := checkAgainstReference(t, []byte(in)); err != nil {
				t.Fatalf("reference rejects %q (%v): not a quirk", in, err)
			}
			if _, ok := fastOnly(nil, []byte(in)); ok {
				t.Fatalf("fast path claimed %q", in)
			}
		})
	}
}

// TestDecodeRouterEventsIntoReuse: one buffer across messages of changing
// shape never leaks state from an earlier message.
func TestDecodeRouterEventsIntoReuse(t *testing.T) {
	seq := []string{richStored, specRemoved, specStored, specCleared, richStored, `[]`, "[" + specRemoved + "," + specStored + "]", richStored,
		`{"worker_id":1,"event":{"data":{"stored":null}}}`, richStored, `{"worker_id":-1}`, specStored}
	var buf []RouterEvent
	for i, in := range seq {
		want, wantErr := DecodeRouterEvents([]byte(in))
		got, err := DecodeRouterEventsInto(buf, []byte(in))
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("message %d: error %v, want %v", i, err, wantErr)
		}
		if d := diffEvents(want, got); err == nil && d != "" {
			t.Fatalf("message %d: %s", i, d)
		}
		buf = got
	}
}

// TestDecodeRouterEventsIntoZeroAllocs: steady-state decoding of stored and
// removed events (without mm_extra_info objects) allocates nothing.
func TestDecodeRouterEventsIntoZeroAllocs(t *testing.T) {
	for name, in := range map[string][]byte{
		"stored40": benchStored40(), "removed": benchRemoved(), "spec stored": []byte(specStored),
		"stored then removed": []byte("[" + specStored + "," + specRemoved + "]"),
	} {
		t.Run(name, func(t *testing.T) {
			buf, err := DecodeRouterEventsInto(nil, in)
			if err != nil {
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(100, func() {
				if buf, err = DecodeRouterEventsInto(buf, in); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per decode, want 0", allocs)
			}
		})
	}
}

func FuzzDecodeRouterEventsInto(f *testing.F) {
	for _, s := range []string{
		specStored, specRemoved, specCleared, richStored, `[]`, `[` + specStored + `,` + specCleared + `]`,
		" \t\n[ {\"worker_id\" : 1 , \"event\" : {\"data\" : \"cleared\"} } ]\r\n",
		`{"worker_id":18446744073709551615,"event":{"event_id":18446744073709551616,"data":"cleared"}}`,
		`{"worker_id":1,"event":{"dp_rank":4294967296,"data":"cleared"}}`,
		`{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[0,1e2,-1,1.5,18446744073709551615]}}}}`,
		`{"worker\u005fid":1,"storage_tier":"dis\u006b","event":{"data":"clea\u0072ed"}}`,
		`{"WORKER_ID":1,"Event":{"DATA":{"stored":{"Blocks":[{"BLOCK_HASH":1}]}}}}`,
		`{"worker_id":1,"worker_id":2,"event":{"data":"cleared"},"event":{"event_id":3}}`,
		`{"worker_id":1,"storage_tier":null,"event":{"event_id":null,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[null,{"mm_extra_info":null}]}}}}`,
		`{"worker_id":1,"x":[{"a":"\ud83d\ude00\"\\\/\b\f\n\r\t"},true,false,null,-0.5E-7],"event":{"data":{"cleared":1}}}`,
		"{\"worker_id\":1,\"event\":{\"data\":{\"stored\":{\"blocks\":[{\"mm_extra_info\":\"\xff\"}]}}}}",
		"\v" + specCleared + "\u00a0",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkAgainstReference(t, b)
	})
}

func benchStored40() []byte {
	var sb strings.Builder
	sb.WriteString(`[{"worker_id":7,"storage_tier":"device","event":{"event_id":42,"dp_rank":0,"data":{"stored":{"parent_hash":9143094415614847814,"start_position":128,"blocks":[`)
	h := uint64(0x9e3779b97f4a7c15)
	for i := range 40 {
		if i > 0 {
			sb.WriteByte(',')
		}
		h ^= h << 13
		h ^= h >> 7
		h ^= h << 17
		sb.WriteString(`{"block_hash":` + strconv.FormatUint(h, 10) + `,"tokens_hash":` + strconv.FormatUint(h>>3, 10) + `,"mm_extra_info":null}`)
	}
	sb.WriteString(`]}}}}]`)
	return []byte(sb.String())
}

func benchRemoved() []byte {
	return []byte(`{"worker_id":7,"storage_tier":"device","event":{"event_id":43,"data":{"removed":{"block_hashes":[9510318385840434533,12124091508212882195,9143094415614847814,1844674407370955161]}},"dp_rank":0}}`)
}

func BenchmarkDecodeRouterEvents(b *testing.B) {
	for _, in := range []struct {
		name string
		data []byte
	}{{"stored40", benchStored40()}, {"removed", benchRemoved()}} {
		b.Run(in.name+"/old", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in.data)))
			for b.Loop() {
				if _, err := DecodeRouterEvents(in.data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/new", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in.data)))
			var buf []RouterEvent
			var err error
			cpu0 := cputime.Process()
			for b.Loop() {
				if buf, err = DecodeRouterEventsInto(buf, in.data); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time per decode is robust to waiting for a core on a
			// shared machine (the decode allocates nothing, so no GC).
			if cpu := cputime.Process() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// TestDecodeRouterEventsIntoNumbersOfEveryLength: numbers of 1 to 21
// digits, cut or continued at every offset of the eight-digit steps, and
// the keys a canonical encoder writes in an unusual order or spacing,
// decode as the reference does.
func TestDecodeRouterEventsIntoNumbersOfEveryLength(t *testing.T) {
	const digits = "184467440737095516159876"
	var nums []string
	for n := 1; n <= 21; n++ {
		nums = append(nums, digits[:n], "9"+strings.Repeat("0", n-1), strings.Repeat("9", n))
		for _, tail := range []string{".5", "e3", "0x", "a", " "} {
			nums = append(nums, digits[:n]+tail)
		}
	}
	nums = append(nums, "18446744073709551615", "18446744073709551616", "99999999999999999999", "0123", "00", "1234567812345678"+"1")
	for _, n := range nums {
		for _, blk := range []string{
			`{"block_hash":` + n + `,"tokens_hash":` + n + `}`,
			`{"tokens_hash":` + n + `,"block_hash":1}`,
			`{"block_hash" :` + n + `, "tokens_hash": 2,"mm_extra_info":null}`,
			`{"mm_extra_info":{},"tokens_hash":` + n + `,"block_hash":` + n + `}`,
		} {
			checkAgainstReference(t, []byte(`{"worker_id":1,"event":{"data":{"stored":{"blocks":[`+blk+`]}}}}`))
		}
		checkAgainstReference(t, []byte(`{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[`+n+`,`+n+`]}}}}`))
	}
}

// TestParseDigitsSWARAgreesWithABytewiseParse: every run length from 1 to
// 24 digits, ended by every byte value, the input ending at the run or not,
// read as a byte-by-byte parse reads it, or refused where that parse would
// overflow or the input is too short for a word.
func TestParseDigitsSWARAgreesWithABytewiseParse(t *testing.T) {
	const digits = "987654321098765432101234567890"
	for n := 1; n <= 24; n++ {
		for _, run := range []string{digits[:n], "1" + strings.Repeat("0", n-1), strings.Repeat("9", n), "18446744073709551615"[:min(n, 20)] + strings.Repeat("0", max(n-20, 0))} {
			for end := 0; end < 256; end++ {
				for _, pad := range []int{0, 1, 7, 30} {
					in := append([]byte(run), byte(end))
					in = append(in, bytes.Repeat([]byte{'7'}, pad)...)
					in = in[:len(in):len(in)]
					checkDigitsSWAR(t, in)
					checkDigitsSWAR(t, in[:len(run)]) // the input ends with the run
				}
			}
		}
	}
}

func checkDigitsSWAR(t *testing.T, in []byte) {
	t.Helper()
	run := 0
	for run < len(in) && '0' <= in[run] && in[run] <= '9' {
		run++
	}
	want, err := strconv.ParseUint(string(in[:run]), 10, 64)
	var got uint64
	n, ok := parseDigitsSWAR(in, &got)
	if !ok {
		// Refusing is right only when a word would read past the input or
		// the run overflows; the caller's byte loop then decides.
		words := min(run/8+1, 3)
		if err == nil && len(in) >= 8*words {
			t.Fatalf("%q: refused a run of %d digits that fits (%d)", in, run, want)
		}
		return
	}
	if err != nil {
		t.Fatalf("%q: accepted %d (%d digits), byte parse: %v", in, got, n, err)
	}
	if n != run || got != want {
		t.Fatalf("%q: %d digits, %d; want %d digits, %d", in, n, got, run, want)
	}
}

// TestDecodeRouterEventsIntoCompactBlocks: blocks and hash arrays as
// canonical encoders write them, and near misses of that form (which the
// compact scan must leave to the general one), decode as the reference does,
// and the scanner handles every valid one itself.
func TestDecodeRouterEventsIntoCompactBlocks(t *testing.T) {
	const h = "12124091508212882195"
	blocks := []string{
		`{"block_hash":` + h + `,"tokens_hash":` + h + `}`,
		`{"block_hash":` + h + `,"tokens_hash":7,"mm_extra_info":null}`,
		`{"block_hash":0,"tokens_hash":` + h + `,"mm_extra_info":{"a":1}}`,
		`{"block_hash":1,"tokens_hash":2,"mm_extra_info":nul}`,
		`{"block_hash":1,"tokens_hash":2,"mm_extra_info":null,"x":1}`,
		`{"block_hash":1,"tokens_hash":2,"mm_extra_info":null }`,
		`{"block_hash":1,"tokens_hash":2 }`,
		`{"block_hash":1,"tokens_hash":2,"block_hash":3}`,
		`{"block_hash":1,"tokens_hash":-2}`,
		`{"block_hash":1 ,"tokens_hash":2}`,
		`{"block_hash": 1,"tokens_hash":2}`,
		`{"block_hash":1,"tokens_hash":` + h + `0}`,
		`{"block_hash":1.0,"tokens_hash":2}`,
		`{"block_hash":1,"tokens_hash":2`,
		`{"block_hash":1,"tokens_hash":`,
		`{"block_hash":`,
		`{"block_hash":1,"tokens_hash":2}]`,
		// Other keys of exactly the compact keys' lengths, in their places.
		`{"xxxxxxxxxx":1,"tokens_hash":2}`,
		`{"block_hash":1,"xxxxxxxxxxx":2}`,
	}
	for _, a := range blocks {
		for _, b := range blocks {
			for _, sep := range []string{",", " , ", ",\n"} {
				in := `{"worker_id":1,"event":{"data":{"stored":{"blocks":[` + a + sep + b + `]}}}}`
				want, err := checkAgainstReference(t, []byte(in))
				// Duplicate keys are the reference's to resolve.
				if err == nil && !strings.Contains(a+b, `"block_hash":3`) {
					if _, ok := fastOnly(nil, []byte(in)); !ok || len(want[0].Event.Data.Stored.Blocks) != 2 {
						t.Errorf("%s: left to the reference decoder", in)
					}
				}
			}
		}
	}
	for _, hs := range []string{h, h + "," + h, h + " ," + h, h + ", " + h, h + ",]", "1,2,3 ", "0,01", h + "," + h + "0", "1,2]"} {
		checkAgainstReference(t, []byte(`{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[`+hs+`]}}}}`))
		checkAgainstReference(t, []byte(`{"worker_id":1,"event":{"data":{"removed":{"block_hashes":[`+hs)) // cut short
	}
}
