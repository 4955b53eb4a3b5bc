package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/route"
)

func testRouteResponse() RouteResponse {
	return RouteResponse{Policy: "cost", ReadyLanes: 3, Blocks: 12, BlockSize: 16, InputTokens: 200, Best: 0, Ranked: []RouteLane{
		{Lane: 1, DC: "dc-b", Pool: "p\"1", Depth: 10, Ready: true, AgeMs: 12, CachedTokens: 160, CostMs: 45.0625,
			Terms: RouteTerms{RTTMs: 40, QueueMs: 1.0625, PrefillMs: 4, PenaltyMs: 0},
			Load:  RouteLoad{HasKV: true, KVUsedBlocks: 30, KVCapacityBlocks: 100, HasRequests: true, Running: 2, Waiting: 0, AgeMs: 400}},
		{Lane: 0, DC: "dc-a", Pool: "p0", Depth: 0, Ready: true, AgeMs: 3, CostMs: 125.000001, Terms: RouteTerms{RTTMs: 5, QueueMs: 100.000001, PrefillMs: 20},
			LoadMissing: true, RTTUnknown: true},
		{Lane: 2, DC: "dc-d", Pool: "p2", Ready: true, AgeMs: 7, CostMs: 9, Terms: RouteTerms{QueueMs: 9},
			Load: RouteLoad{HasRequests: true, Running: 1, Waiting: 3, HasPrefill: true, ActivePrefillTokens: 3072, PrefillEstimated: true, AgeMs: 20}},
		{Lane: 15, DC: "dc-c", Pool: "p15", AgeMs: -1, Stale: true, Excluded: true, Reason: "unready", Load: RouteLoad{HasPrefill: true, ActivePrefillTokens: 0, HasDecode: true, ActiveDecodeBlocks: 7}},
	}}
}

// AppendJSON writes what encoding/json writes, and the answer reads back
// equal, known-zero values included and unknown ones absent.
func TestRouteResponseJSON(t *testing.T) {
	r := testRouteResponse()
	want, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.AppendJSON(nil); !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON\n%s\nencoding/json\n%s", got, want)
	}
	var back RouteResponse
	if err := json.Unmarshal(want, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("read back %+v\nwant %+v", back, r)
	}
	if !bytes.Contains(want, []byte(`"load":null`)) || !bytes.Contains(want, []byte(`"active_prefill_tokens":0`)) ||
		bytes.Contains(want[bytes.Index(want, []byte(`"lane":15`)):], []byte(`"running"`)) {
		t.Fatalf("unknown load must be absent (null when nothing is known), a known 0 present: %s", want)
	}
	for _, bad := range []string{`{}`, `{"kv_used_blocks":1,"age_ms":0}`, `{"running":1,"age_ms":0}`,
		`{"running":1,"waiting":0,"prefill_estimated":true,"age_ms":0}`} {
		var l RouteLoad
		if err := json.Unmarshal([]byte(bad), &l); err == nil {
			t.Fatalf("load %s accepted", bad)
		}
	}
}

// AppendJSON writes what encoding/json writes for answers of every shape:
// integers of one, two and many digits, negative ages, costs of whole and
// fractional milliseconds (and zero), any mix of flags and known load.
func TestRouteResponseJSONRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	num := func() int64 {
		v := rng.Int64N(int64(1) << uint(rng.IntN(62)+1))
		if rng.IntN(6) == 0 {
			v = -v
		}
		return v
	}
	msOf := func() float64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return rng.Float64() * 1e4
		}
		return float64(time.Duration(rng.Int64N(1<<uint(rng.IntN(60)+1)))) / float64(time.Millisecond)
	}
	flag := func() bool { return rng.IntN(2) == 0 }
	var buf []byte
	for range 2000 {
		r := RouteResponse{Policy: "cost", ReadyLanes: uint16(rng.Uint32()), Blocks: int(num()), BlockSize: int(num()),
			InputTokens: int(num()), Best: int(num()), Ranked: []RouteLane{}}
		for range rng.IntN(17) {
			r.Ranked = append(r.Ranked, RouteLane{Lane: int(num()), DC: "dc-" + string(rune('a'+rng.IntN(26))), Pool: "p0",
				Depth: rng.Uint32(), Ready: flag(), AgeMs: num(), Stale: flag(), CachedTokens: int(num()), CostMs: msOf(),
				Terms:       RouteTerms{RTTMs: msOf(), QueueMs: msOf(), PrefillMs: msOf(), PenaltyMs: msOf()},
				LoadMissing: flag(), RTTUnknown: flag(), Excluded: flag(),
				Load: RouteLoad{HasKV: flag(), KVUsedBlocks: rng.Uint64(), KVCapacityBlocks: uint64(rng.IntN(100)),
					HasRequests: flag(), Running: uint64(rng.IntN(10)), Waiting: rng.Uint64() >> uint(rng.IntN(64)),
					HasPrefill: flag(), ActivePrefillTokens: uint64(rng.IntN(1000)), PrefillEstimated: flag(), HasDecode: flag(), ActiveDecodeBlocks: 99, AgeMs: num()}})
			if l := &r.Ranked[len(r.Ranked)-1]; l.Excluded {
				l.Reason = route.ReasonStale
			}
			if !r.Ranked[len(r.Ranked)-1].Load.Known() {
				r.Ranked[len(r.Ranked)-1].Load = RouteLoad{}
			}
		}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if buf = r.AppendJSON(buf[:0]); !bytes.Equal(buf, want) {
			t.Fatalf("AppendJSON\n%s\nencoding/json\n%s", buf, want)
		}
	}
	minInt := int64(math.MinInt64)
	if got := string(appendUint(nil, uint64(minInt), true)); got != "-9223372036854775808" {
		t.Fatalf("MinInt64: %s", got)
	}
}

// A lane's estimated prefill says so next to the figure it qualifies
// (prefill_estimated, where encoding/json puts it), reads back, and is
// absent when the prefill is measured or unknown.
func TestRouteLoadPrefillEstimated(t *testing.T) {
	est := RouteLoad{HasRequests: true, Running: 1, Waiting: 2, HasPrefill: true, ActivePrefillTokens: 2048, PrefillEstimated: true, AgeMs: 5}
	got := est.appendJSON(nil)
	n, w, p := uint64(1), uint64(2), uint64(2048)
	want, err := json.Marshal(routeLoadJSON{Running: &n, Waiting: &w, ActivePrefillTokens: &p, PrefillEstimated: true, AgeMs: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) || !bytes.Contains(got, []byte(`"active_prefill_tokens":2048,"prefill_estimated":true,`)) {
		t.Fatalf("estimated prefill: %s, encoding/json %s", got, want)
	}
	var back RouteLoad
	if err := json.Unmarshal(got, &back); err != nil || back != est {
		t.Fatalf("read back %+v %v, want %+v", back, err, est)
	}
	measured := est
	measured.PrefillEstimated = false
	unknown := est
	unknown.HasPrefill, unknown.ActivePrefillTokens = false, 0 // the mark never goes without its figure
	for name, l := range map[string]RouteLoad{"measured": measured, "no prefill": unknown} {
		b := l.appendJSON(nil)
		if bytes.Contains(b, []byte("prefill_estimated")) {
			t.Fatalf("%s: %s carries prefill_estimated", name, b)
		}
		if err := json.Unmarshal(b, &back); err != nil || back.PrefillEstimated {
			t.Fatalf("%s: read back %+v %v", name, back, err)
		}
	}
}

// The route answer, estimated prefill and all, is written without an
// allocation into a buffer of room enough (names without characters to
// escape: appendJSONString's escaping path may allocate).
func TestRouteAppendJSONAllocatesNothingIntoABuffer(t *testing.T) {
	r := testRouteResponse()
	r.Ranked[0].Pool = "p1"
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = r.AppendJSON(buf[:0]) }); n != 0 {
		t.Fatalf("%v allocs per answer", n)
	}
}

func TestDecodeRouteBody(t *testing.T) {
	q, o, err := DecodeRouteBody([]byte(`{"sequence_hashes":[1,2,3],"input_tokens":48,"output_tokens":10}`))
	if err != nil || len(q.Seqs) != 3 || o.InputTokens != 48 || o.OutputTokens != 10 {
		t.Fatalf("%+v %+v %v", q, o, err)
	}
	q, o, err = DecodeRouteBody([]byte(`{"block_size":4,"tokens":[1,2,3,4,5,6,7,8],"policy":"prefix","stale":"penalize","rtt_ms":{"dc-a":5,"dc-b":40.5}}`))
	if err != nil || len(q.Locals) != 2 || q.BlockSize != 4 || o.Policy != "prefix" || o.Stale != "penalize" || o.RTTMs["dc-b"] != 40.5 {
		t.Fatalf("%+v %+v %v", q, o, err)
	}
	for body, field := range map[string]string{
		`{"sequence_hashes":[1],"policy":"fastest"}`:                "policy",
		`{"sequence_hashes":[1],"stale":"ignore"}`:                  "stale",
		`{"sequence_hashes":[1],"input_tokens":-1}`:                 "input_tokens",
		`{"sequence_hashes":[1],"input_tokens":1073741825}`:         "input_tokens",
		`{"sequence_hashes":[1],"rtt_ms":{"dc-a":-5}}`:              "rtt_ms",
		`{"sequence_hashes":[1],"rtt_ms":[5]}`:                      "rtt_ms",
		`{"sequence_hashes":[1],"input_tokens":1,"input_tokens":2}`: "input_tokens",
		`{"sequence_hashes":[1],"weights":{}}`:                      "weights",
		`{"sequence_hashes":[1],"probe":"yes"}`:                     "probe",
		`{"policy":"cost"}`:                                         "tokens|local_hashes|sequence_hashes",
	} {
		_, _, err := DecodeRouteBody([]byte(body))
		var re *RequestError
		if !errors.As(err, &re) || re.Field != field {
			t.Fatalf("%s: %v, want a RequestError on %s", body, err, field)
		}
	}
	q, o, err = DecodeRouteBody([]byte(`{"sequence_hashes":[1],"probe":true}`))
	if err != nil || !o.Probe || len(q.Seqs) != 1 {
		t.Fatalf("probe: %+v %+v %v", q, o, err)
	}
	if _, o, _ = DecodeRouteBody([]byte(`{"sequence_hashes":[1],"probe":false}`)); o.Probe {
		t.Fatal("probe false read as true")
	}
	rr := RouteRequest{MatchRequest: MatchRequest{SequenceHashes: []uint64{1}}, Probe: true}
	if !rr.Options().Probe {
		t.Fatal("RouteRequest.Options drops probe")
	}
	// A match request refuses the route options.
	if _, err := DecodeMatchBody([]byte(`{"sequence_hashes":[1],"input_tokens":4}`)); err == nil {
		t.Fatal("a match request took input_tokens")
	}
}

func TestRouteOptionsQueryForm(t *testing.T) {
	o := RouteOptions{InputTokens: 100, OutputTokens: 7, Policy: "load", Stale: "penalize", RTTMs: map[string]float64{"dc-a": 5, "dc-b": 0.25}, Probe: true}
	back, err := ParseRouteOptions(o.EncodeQuery())
	if err != nil || !reflect.DeepEqual(back, o) {
		t.Fatalf("%q → %+v %v", o.EncodeQuery(), back, err)
	}
	if z, err := ParseRouteOptions(""); err != nil || !reflect.DeepEqual(z, RouteOptions{}) {
		t.Fatalf("%+v %v", z, err)
	}
	for _, bad := range []string{"policy=x", "input_tokens=abc", "rtt_ms=dc-a", "what=1", "policy=cost&policy=load", "%zz", "probe=maybe"} {
		if _, err := ParseRouteOptions(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// The route fast path gives exactly the streaming decoder's answers.
func FuzzDecodeRouteFastAgreesWithTheStreamingDecoder(f *testing.F) {
	for _, s := range []string{
		`{"sequence_hashes":[1,2,3],"input_tokens":48,"output_tokens":10}`,
		`{"input_tokens":5,"block_size":2,"tokens":[1,2,3,4]}`,
		`{"local_hashes":[9],"output_tokens":0}`,
		`{"local_hashes":[9],"input_tokens":1073741824}`,
		`{"local_hashes":[9],"input_tokens":1,"input_tokens":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fo RouteOptions
		fq, ok := decodeFastRoute(b, &fo)
		if !ok {
			return
		}
		var so RouteOptions
		d := &matchDecoder{dec: json.NewDecoder(bytes.NewReader(b)), seen: map[string]bool{}, route: &so}
		sq, err := d.decode()
		if err == nil {
			err = so.validate()
		}
		if err != nil || !reflect.DeepEqual(fq, sq) || !reflect.DeepEqual(fo, so) {
			t.Fatalf("%q: fast %+v %+v, streaming %+v %+v %v", b, fq, fo, sq, so, err)
		}
	})
}

// Route bodies and options are untrusted: any input is a query with valid
// options or a *RequestError, never a panic.
func FuzzDecodeRouteBody(f *testing.F) {
	for _, s := range []string{
		`{"sequence_hashes":[1,2,3],"input_tokens":48,"policy":"prefix","rtt_ms":{"dc-a":5}}`,
		`{"block_size":2,"tokens":[1,2,3,4],"stale":"penalize","output_tokens":9}`,
		`{"local_hashes":[9],"rtt_ms":{"":1}}`, `{"rtt_ms":null}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		q, o, err := DecodeRouteBody(b)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("%q: %T %v", b, err, err)
			}
			return
		}
		if q.Blocks() > MaxBlocks || o.validate() != nil {
			t.Fatalf("%q: accepted %d blocks, options %+v", b, q.Blocks(), o)
		}
	})
}

func FuzzParseRouteOptions(f *testing.F) {
	f.Add("input_tokens=900&policy=prefix&rtt_ms=dc-a:5,dc-b:40&stale=penalize")
	f.Add("rtt_ms=a:NaN")
	f.Fuzz(func(t *testing.T, raw string) {
		o, err := ParseRouteOptions(raw)
		if err != nil {
			return
		}
		if err := o.validate(); err != nil {
			t.Fatalf("%q: accepted invalid options %+v: %v", raw, o, err)
		}
		back, err := ParseRouteOptions(o.EncodeQuery())
		if err != nil || !reflect.DeepEqual(back, o) && !(len(o.RTTMs) == 0 && len(back.RTTMs) == 0) {
			t.Fatalf("%q: %+v does not round-trip (%+v, %v)", raw, o, back, err)
		}
	})
}

// Every policy of pkg/route may be named in a request.
func TestRoutePoliciesAreRoutes(t *testing.T) {
	for _, p := range route.Policies {
		if !slices.Contains(RoutePolicies, string(p)) {
			t.Errorf("policy %q is not in RoutePolicies", p)
		}
	}
	for _, p := range RoutePolicies {
		if _, err := route.ParsePolicy(p); err != nil {
			t.Errorf("RoutePolicies has %q: %v", p, err)
		}
	}
}
