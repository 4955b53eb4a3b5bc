package wire

import (
	"math"
	"testing"
)

// Every load value is bounded: at its bound a message round-trips, one
// above it is refused by the encoder and, forced onto the wire, by the
// decoder (an underflowed counter or a hostile sender never reaches a
// router).
func TestLoadValuesAreBounded(t *testing.T) {
	for _, tc := range []struct {
		field string
		bound uint64
		set   func(*PoolLoad, uint64)
	}{
		{"load.kv_used_blocks", MaxLoadBlocks, func(p *PoolLoad, v uint64) { p.KVUsedBlocks = v }},
		{"load.kv_capacity_blocks", MaxLoadBlocks, func(p *PoolLoad, v uint64) { p.KVCapacityBlocks = v }},
		{"load.kv_workers", MaxLoadWorkers, func(p *PoolLoad, v uint64) { p.KVWorkers = v }},
		{"load.running", MaxLoadRequests, func(p *PoolLoad, v uint64) { p.Serving.Running = v }},
		{"load.waiting", MaxLoadRequests, func(p *PoolLoad, v uint64) { p.Serving.Waiting = v }},
		{"load.active_prefill_tokens", MaxLoadTokens, func(p *PoolLoad, v uint64) { p.Serving.ActivePrefillTokens = v }},
		{"load.active_decode_blocks", MaxLoadBlocks, func(p *PoolLoad, v uint64) { p.Serving.ActiveDecodeBlocks = v }},
		{"load.serving_workers", MaxLoadWorkers, func(p *PoolLoad, v uint64) { p.ServingWorkers = v }},
	} {
		p := testPoolLoad()
		p.Flags |= LoadPrefill
		tc.set(&p, tc.bound)
		b, err := AppendPoolLoad(nil, &p)
		if err != nil {
			t.Fatalf("%s at its bound: %v", tc.field, err)
		}
		if got, err := DecodePoolLoad(b); err != nil || got != p {
			t.Fatalf("%s at its bound: %+v %v", tc.field, got, err)
		}
		for _, v := range []uint64{tc.bound + 1, math.MaxUint64} {
			tc.set(&p, v)
			_, err = AppendPoolLoad(nil, &p)
			wantEncodeError(t, err, ErrMalformed, tc.field)
			_, err = DecodePoolLoad(forcePoolLoad(t, &p))
			wantDecodeError(t, err, ErrMalformed, tc.field)
		}
	}
	for _, tc := range []struct {
		field string
		bound uint64
		set   func(*WorkerLoad, uint64)
	}{
		{"worker_load.kv_capacity_blocks", MaxLoadBlocks, func(w *WorkerLoad, v uint64) { w.KVCapacityBlocks = v }},
		{"worker_load.running", MaxLoadRequests, func(w *WorkerLoad, v uint64) { w.Serving.Running = v }},
		{"worker_load.waiting", MaxLoadRequests, func(w *WorkerLoad, v uint64) { w.Serving.Waiting = v }},
		{"worker_load.active_prefill_tokens", MaxLoadTokens, func(w *WorkerLoad, v uint64) { w.Serving.ActivePrefillTokens = v }},
		{"worker_load.active_decode_blocks", MaxLoadBlocks, func(w *WorkerLoad, v uint64) { w.Serving.ActiveDecodeBlocks = v }},
	} {
		w := testWorkerLoad()
		w.Flags |= LoadPrefill | LoadDecode
		tc.set(&w, tc.bound)
		b, err := AppendWorkerLoad(nil, &w)
		if err != nil {
			t.Fatalf("%s at its bound: %v", tc.field, err)
		}
		if got, err := DecodeWorkerLoad(b); err != nil || got != w {
			t.Fatalf("%s at its bound: %+v %v", tc.field, got, err)
		}
		tc.set(&w, tc.bound+1)
		_, err = AppendWorkerLoad(nil, &w)
		wantEncodeError(t, err, ErrMalformed, tc.field)
		forged := appendHeader(nil, KindWorkerLoad, workerLoadFields)
		for _, v := range [...]uint64{w.WorkerID, w.Sequence, unixNanos(w.Time), uint64(w.Flags), w.KVCapacityBlocks,
			w.Serving.Running, w.Serving.Waiting, w.Serving.ActivePrefillTokens, w.Serving.ActiveDecodeBlocks} {
			forged = appendUint(forged, v)
		}
		_, err = DecodeWorkerLoad(forged)
		wantDecodeError(t, err, ErrMalformed, tc.field)
	}
}

func TestAddLoadSaturates(t *testing.T) {
	for _, tc := range []struct{ a, b, limit, want uint64 }{
		{2, 3, 10, 5},
		{2, 0, 10, 2},
		{0, 0, 10, 0},
		{math.MaxUint64, 1, math.MaxUint64, math.MaxUint64},
		{math.MaxUint64, 0, math.MaxUint64, math.MaxUint64},
		{4, 6, 10, 10},
		{4, 5, 10, 9},
		{10, 0, 10, 10},
		{11, 0, 10, 10}, // a past the limit (a relay's clamp input) stays at it
		{0, 10, 10, 10},
		{0, 11, 10, 10},
		{math.MaxUint64 - 1, math.MaxUint64 - 1, MaxLoadTokens, MaxLoadTokens},
		{1 << 39, 1 << 39, MaxLoadTokens, MaxLoadTokens},
		{1 << 39, 1<<39 - 1, MaxLoadTokens, MaxLoadTokens - 1},
	} {
		if got := AddLoad(tc.a, tc.b, tc.limit); got != tc.want {
			t.Errorf("AddLoad(%d, %d, %d) = %d, want %d", tc.a, tc.b, tc.limit, got, tc.want)
		}
	}
}
