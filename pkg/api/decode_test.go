package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func tokensJSON(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, i*7919%50000)
	}
	return "[" + b.String() + "]"
}

// Streaming (block_size and salts first) and buffered (tokens first)
// decoding hash exactly like the whole-body reference decoder.
func TestStreamedTokensHashLikeTheReference(t *testing.T) {
	toks := tokensJSON(1000)
	for _, body := range []string{
		`{"block_size":16,"tokens":` + toks + `}`,
		`{"tokens":` + toks + `,"block_size":16}`,
		`{"block_size":16,"lora_name":"a","cache_namespace":"n","eagle":true,"tokens":` + toks + `}`,
		`{"tokens":` + toks + `,"block_size":16,"lora_name":"a","cache_namespace":"n","eagle":true}`,
		`{"block_size":7,"eagle":true,"tokens":` + toks + `}`,
		`{"block_size":1000,"tokens":` + toks + `}`,
		`{"block_size":1001,"tokens":` + toks + `}`,
		`{"local_hashes":[1,18446744073709551615]}`,
		`{"sequence_hashes":[3],"tokens":null}`,
	} {
		want, werr := referenceDecode([]byte(body))
		got, err := DecodeMatchRequest([]byte(body))
		if werr != nil || err != nil {
			t.Fatalf("%.60s: reference err %v, streaming err %v", body, werr, err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%.60s: streaming %d locals, reference %d: differ", body, len(got.Locals), len(want.Locals))
		}
	}
}

func TestSaltAfterStreamedTokensIsRefused(t *testing.T) {
	for _, f := range []string{`"lora_name":"a"`, `"cache_namespace":"n"`, `"eagle":true`} {
		body := `{"block_size":4,"tokens":[1,2,3,4],` + f + `}`
		if _, err := DecodeMatchRequest([]byte(body)); err == nil {
			t.Fatalf("%s accepted: it would have changed hashes already computed", body)
		}
	}
	if _, err := DecodeMatchRequest([]byte(`{"local_hashes":[1],"local_hashes":[2]}`)); err == nil {
		t.Fatal("duplicate field accepted")
	}
}

// A hash array is refused at its MaxBlocks+1-th element.
func TestTooManyBlocksRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"local_hashes":[`)
	for i := range MaxBlocks + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('1')
	}
	b.WriteString(`]}`)
	if _, err := DecodeMatchRequest([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("err %v, want more than %d blocks", err, MaxBlocks)
	}
	body := `{"block_size":1,"tokens":` + tokensJSON(MaxBlocks+1) + `}`
	if _, err := DecodeMatchRequest([]byte(body)); err == nil {
		t.Fatal("streamed tokens past MaxBlocks accepted")
	}
}

// FuzzDecodeMatchRequestStreaming holds the streaming decoder to the
// whole-body reference: it never accepts what the reference refuses, and
// when both accept they agree exactly. (It may refuse more: duplicate
// fields, salts after streamed tokens, keys in another case.)
func FuzzDecodeMatchRequestStreaming(f *testing.F) {
	for _, s := range []string{
		`{"tokens":[1,2,3,4],"block_size":2}`, `{"block_size":2,"eagle":true,"tokens":[1,2,3,4,5]}`,
		`{"local_hashes":[1,2]}`, `{"sequence_hashes":[18446744073709551615]}`,
		`{"tokens":[1],"block_size":1,"lora_name":"x","cache_namespace":null}`, `{"local_hashes":null,"sequence_hashes":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := DecodeMatchRequest(body)
		if err != nil {
			return
		}
		want, werr := referenceDecode(body)
		if werr != nil {
			t.Fatalf("streaming accepted %q, reference refused it: %v", body, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: streaming %+v, reference %+v", body, got, want)
		}
	})
}

func TestBestIsNullWhenNothingMatches(t *testing.T) {
	r := MatchResponse{Lanes: []LaneDepth{{Lane: 1}, {Lane: 2}}}
	r.SetBest()
	b, _ := json.Marshal(r)
	if !strings.Contains(string(b), `"best":null`) {
		t.Fatal(string(b))
	}
}

func FuzzDecodeMatchRequest(f *testing.F) {
	f.Add([]byte(`{"tokens":[1,2,3,4],"block_size":2}`))
	f.Add([]byte(`{"local_hashes":[1,2]}`))
	f.Add([]byte(`{"sequence_hashes":[18446744073709551615]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		q, err := DecodeMatchRequest(body)
		if err == nil && q.Locals != nil && q.Seqs != nil {
			t.Fatal("both query kinds set")
		}
		if err == nil && q.Blocks() > MaxBlocks {
			t.Fatal("block limit not enforced")
		}
	})
}

func TestBestIsNeverAStaleLane(t *testing.T) {
	r := MatchResponse{Lanes: []LaneDepth{{Lane: 1, Depth: 2}, {Lane: 2, Depth: 9, Stale: true}}}
	r.SetBest()
	if r.Best == nil || r.Best.Lane != 1 {
		t.Fatalf("best %+v, want the fresh lane 1", r.Best)
	}
	r.Lanes[0].Stale = true
	if r.SetBest(); r.Best != nil {
		t.Fatalf("best %+v among stale lanes only", r.Best)
	}
}

// "model" and "domain" name the domain, in any position and on every
// shape; both at once, an empty one or a non-string is refused.
func TestModelNamesTheDomain(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"llama","sequence_hashes":[1]}`:                   "llama",
		`{"local_hashes":[1],"domain":"qwen"}`:                      "qwen",
		`{"block_size":2,"tokens":[1,2,3,4],"model":"m\u00e9"}`:     "m\u00e9",
		`{"tokens":[1,2],"eagle":false,"block_size":2,"model":"x"}`: "x",
		`{"sequence_hashes":[1],"model":null}`:                      "",
		`{"sequence_hashes":[1]}`:                                   "",
	} {
		q, err := DecodeMatchRequest([]byte(body))
		if err != nil || q.Model != want || q.Blocks() == 0 {
			t.Fatalf("%s: model %q blocks %d err %v, want %q", body, q.Model, q.Blocks(), err, want)
		}
	}
	for _, body := range []string{
		`{"model":"a","domain":"b","sequence_hashes":[1]}`,
		`{"model":"","sequence_hashes":[1]}`,
		`{"model":7,"sequence_hashes":[1]}`,
		`{"model":"` + strings.Repeat("m", MaxModelBytes+1) + `","sequence_hashes":[1]}`,
	} {
		var re *RequestError
		if _, err := DecodeMatchRequest([]byte(body)); !errors.As(err, &re) {
			t.Fatalf("%.80s: err %v, want a RequestError", body, err)
		}
	}
}
