package wire

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func testPoolLoad() PoolLoad {
	return PoolLoad{
		Identity: testIdentity(), Lease: testLease(), WindowSequence: 9,
		Time: time.Unix(1_700_000_000, 5).UTC(), WindowMs: 1000,
		Flags:        LoadKV | LoadRequests | LoadDecode,
		KVUsedBlocks: 300, KVCapacityBlocks: 1000, KVWorkers: 2,
		Serving:        ServingLoad{Running: 4, Waiting: 7, ActiveDecodeBlocks: 90},
		ServingWorkers: 2, ServingTime: time.Unix(1_699_999_999, 0).UTC(),
	}
}

func testWorkerLoad() WorkerLoad {
	return WorkerLoad{WorkerID: 7, Sequence: 3, Time: time.Unix(1_700_000_000, 0).UTC(),
		Flags: LoadKV | LoadRequests, KVCapacityBlocks: 4096, Serving: ServingLoad{Running: 2, Waiting: 1}}
}

func TestPoolLoadRoundTrips(t *testing.T) {
	for name, p := range map[string]PoolLoad{
		"full": testPoolLoad(),
		"kv only": func() PoolLoad {
			p := testPoolLoad()
			p.Flags, p.Serving, p.ServingWorkers, p.ServingTime = LoadKV, ServingLoad{}, 0, time.Time{}
			return p
		}(),
		"nothing known": func() PoolLoad {
			p := testPoolLoad()
			p.Flags, p.KVUsedBlocks, p.KVCapacityBlocks, p.KVWorkers = 0, 0, 0, 0
			p.Serving, p.ServingWorkers, p.ServingTime = ServingLoad{}, 0, time.Time{}
			return p
		}(),
	} {
		b, err := AppendPoolLoad(nil, &p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := DecodePoolLoad(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != p {
			t.Fatalf("%s: got %+v, want %+v", name, got, p)
		}
		again, _ := AppendPoolLoad(nil, &got)
		if !bytes.Equal(again, b) {
			t.Fatalf("%s: re-encoding differs", name)
		}
		if _, err := PeekKind(b); !errors.Is(err, ErrKind) {
			t.Fatalf("%s: a lane consumer must refuse a load message, PeekKind said %v", name, err)
		}
	}
}

func TestWorkerLoadRoundTrips(t *testing.T) {
	w := testWorkerLoad()
	b, err := AppendWorkerLoad(nil, &w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeWorkerLoad(b)
	if err != nil || got != w {
		t.Fatalf("got %+v %v, want %+v", got, err, w)
	}
	if _, err := DecodePoolLoad(b); !errors.Is(err, ErrKind) {
		t.Fatalf("a worker report decoded as a pool window: %v", err)
	}
}

// Unknown values are 0 and flagged absent; a value without its flag, a
// zero capacity with the KV flag or serving load without workers would let
// a reader take unknown load for zero load, so they are refused both ways.
func TestLoadRefusesValuesWithoutTheirFlag(t *testing.T) {
	for name, tc := range map[string]struct {
		mut   func(*PoolLoad)
		field string
		kind  ErrorKind
	}{
		"used without kv":         {func(p *PoolLoad) { p.Flags &^= LoadKV; p.KVCapacityBlocks, p.KVWorkers = 0, 0 }, "load.kv_used_blocks", ErrMalformed},
		"zero capacity":           {func(p *PoolLoad) { p.KVCapacityBlocks = 0 }, "load.kv_capacity_blocks", ErrMalformed},
		"prefill without flag":    {func(p *PoolLoad) { p.Serving.ActivePrefillTokens = 5 }, "load.active_prefill_tokens", ErrMalformed},
		"serving without workers": {func(p *PoolLoad) { p.ServingWorkers = 0 }, "load.serving_workers", ErrMalformed},
		"unknown flag":            {func(p *PoolLoad) { p.Flags |= 1 << 9 }, "load.flags", ErrUnknownEnum},
		"estimate without prefill": {func(p *PoolLoad) {
			p.Flags = p.Flags&^LoadPrefill | LoadPrefillEstimated
			p.Serving.ActivePrefillTokens = 0
		}, "load.flags", ErrMalformed},
		"serving time alone": {func(p *PoolLoad) {
			p.Flags &^= LoadServing
			p.Serving, p.ServingWorkers = ServingLoad{}, 0
		}, "load.serving_time", ErrMalformed},
	} {
		p := testPoolLoad()
		tc.mut(&p)
		_, err := AppendPoolLoad(nil, &p)
		wantEncodeError(t, err, tc.kind, tc.field)
		// The same values forced onto the wire are refused by the decoder.
		good := testPoolLoad()
		b, _ := AppendPoolLoad(nil, &good)
		forged := forcePoolLoad(t, &p)
		if bytes.Equal(forged, b) {
			t.Fatalf("%s: no change", name)
		}
		_, err = DecodePoolLoad(forged)
		wantDecodeError(t, err, tc.kind, tc.field)
	}
}

// forcePoolLoad encodes p without the encoder's checks.
func forcePoolLoad(t *testing.T, p *PoolLoad) []byte {
	t.Helper()
	dst := appendPreamble(nil, KindPoolLoad, poolLoadFields, &p.Identity, &p.Lease)
	for _, v := range [...]uint64{p.WindowSequence, unixNanos(p.Time), p.WindowMs, uint64(p.Flags),
		p.KVUsedBlocks, p.KVCapacityBlocks, p.KVWorkers,
		p.Serving.Running, p.Serving.Waiting, p.Serving.ActivePrefillTokens, p.Serving.ActiveDecodeBlocks,
		p.ServingWorkers, unixNanos(p.ServingTime)} {
		dst = appendUint(dst, v)
	}
	return dst
}

func TestLoadDecodersRefuseTruncationAndTrailingBytes(t *testing.T) {
	p := testPoolLoad()
	b, _ := AppendPoolLoad(nil, &p)
	for i := range b {
		if _, err := DecodePoolLoad(b[:i]); err == nil {
			t.Fatalf("truncated at %d accepted", i)
		}
	}
	_, err := DecodePoolLoad(append(bytes.Clone(b), 0))
	wantDecodeError(t, err, ErrTrailingBytes, "")
	w := testWorkerLoad()
	wb, _ := AppendWorkerLoad(nil, &w)
	for i := range wb {
		if _, err := DecodeWorkerLoad(wb[:i]); err == nil {
			t.Fatalf("worker report truncated at %d accepted", i)
		}
	}
}

func TestLoadSubjects(t *testing.T) {
	s, err := PoolLoadSubject("prod", "dc-a")
	if err != nil || s != "ckfload.prod.dc-a.pool" {
		t.Fatalf("%q %v", s, err)
	}
	if dc, err := ParsePoolLoadSubject(s, "prod"); err != nil || dc != "dc-a" {
		t.Fatalf("%q %v", dc, err)
	}
	for _, bad := range []string{"ckfload.prod.dc-a.worker.1", "ckfload.other.dc-a.pool", "ckf.prod.dc-a.pool", "ckfload.prod..pool"} {
		if _, err := ParsePoolLoadSubject(bad, "prod"); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	ws, _ := WorkerLoadSubject("prod", "dc-a", 42)
	if id, err := ParseWorkerLoadSubject(ws, "prod", "dc-a"); err != nil || id != 42 {
		t.Fatalf("%q: %d %v", ws, id, err)
	}
	for _, bad := range []string{"ckfload.prod.dc-a.worker.042", "ckfload.prod.dc-a.worker.x", "ckfload.prod.dc-b.worker.1"} {
		if _, err := ParseWorkerLoadSubject(bad, "prod", "dc-a"); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	if f, _ := PoolLoadFilter("prod"); f != "ckfload.prod.*.pool" {
		t.Fatal(f)
	}
	if _, err := PoolLoadSubject("prod", "a.b"); err == nil {
		t.Fatal("a dot in a DC name accepted")
	}
}

func FuzzDecodePoolLoad(f *testing.F) {
	p := testPoolLoad()
	b, _ := AppendPoolLoad(nil, &p)
	f.Add(b)
	f.Add(b[:len(b)-3])
	w := testWorkerLoad()
	wb, _ := AppendWorkerLoad(nil, &w)
	f.Add(wb)
	f.Add(pack(heartbeatArr()))
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzRoundTrip(t, in, DecodePoolLoadInto, AppendPoolLoad)
	})
}

func FuzzDecodeWorkerLoad(f *testing.F) {
	w := testWorkerLoad()
	wb, _ := AppendWorkerLoad(nil, &w)
	f.Add(wb)
	w.Flags, w.KVCapacityBlocks, w.Serving = LoadPrefill|LoadDecode, 0, ServingLoad{ActivePrefillTokens: 1 << 40, ActiveDecodeBlocks: 3}
	wb, _ = AppendWorkerLoad(nil, &w)
	f.Add(wb)
	p := testPoolLoad()
	b, _ := AppendPoolLoad(nil, &p)
	f.Add(b)
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzRoundTrip(t, in, DecodeWorkerLoadInto, AppendWorkerLoad)
	})
}

// The estimate's mark travels with the prefill it qualifies.
func TestPoolLoadCarriesThePrefillEstimate(t *testing.T) {
	p := testPoolLoad()
	p.Flags |= LoadPrefill | LoadPrefillEstimated
	b, err := AppendPoolLoad(nil, &p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodePoolLoad(b)
	if err != nil || !got.Flags.Has(LoadPrefillEstimated) || got.Flags != p.Flags {
		t.Fatalf("decoded flags %v (%v), want %v", got.Flags, err, p.Flags)
	}
	w := WorkerLoad{WorkerID: 3, Time: p.Time, Flags: LoadRequests | LoadPrefill | LoadPrefillEstimated,
		Serving: ServingLoad{Waiting: 2, ActivePrefillTokens: 900}}
	b, err = AppendWorkerLoad(nil, &w)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := DecodeWorkerLoad(b)
	if err != nil || gw.Flags != w.Flags {
		t.Fatalf("worker report flags %v (%v), want %v", gw.Flags, err, w.Flags)
	}
	w.Flags &^= LoadPrefill
	w.Serving.ActivePrefillTokens = 0
	if _, err := AppendWorkerLoad(nil, &w); err == nil {
		t.Fatal("a worker report with the estimate's mark and no prefill encoded")
	}
}
