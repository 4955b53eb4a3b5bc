package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/promtest"
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

func TestOversizedBodyIs413(t *testing.T) {
	b := &recordingBackend{ready: true}
	reg := prometheus.NewRegistry()
	h := Handler(b, mustMetrics(t, reg), reg, WithLimits(Limits{MaxBodyBytes: 64}))
	body := `{"local_hashes":` + tokensJSON(100) + `}`
	for _, chunked := range []bool{false, true} {
		req := httptest.NewRequest("POST", "/v1/match", strings.NewReader(body))
		if chunked {
			req.ContentLength = -1 // no declared length: caught while reading
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked=%v: status %d, want 413", chunked, rec.Code)
		}
	}
	if out, ok := promtest.Has(reg, `ckf_api_requests_total{outcome="too_large"} 2`); !ok {
		t.Fatalf("too_large not counted:\n%s", out)
	}
}

// blockingBackend holds every match until released.
type blockingBackend struct {
	recordingBackend
	entered chan struct{}
	release chan struct{}
}

func (b *blockingBackend) Match(q Query) (MatchResponse, error) {
	b.entered <- struct{}{}
	<-b.release
	return MatchResponse{Blocks: q.Blocks()}, nil
}

func TestConcurrencyBoundAnswers429WithRetryAfter(t *testing.T) {
	b := &blockingBackend{recordingBackend: recordingBackend{ready: true}, entered: make(chan struct{}), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	h := Handler(b, mustMetrics(t, reg), reg, WithLimits(Limits{MaxConcurrentMatches: 2}))
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/match", strings.NewReader(`{"local_hashes":[1]}`)))
			codes <- rec.Code
		}()
	}
	<-b.entered
	<-b.entered // both slots are taken
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/match", strings.NewReader(`{"local_hashes":[1]}`)))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("third request: status %d Retry-After %q, want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	close(b.release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Fatalf("admitted request: status %d", c)
		}
	}
	// A slot is free again.
	go func() { <-b.entered }()
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/match", strings.NewReader(`{"local_hashes":[1]}`)))
	if rec.Code != http.StatusOK {
		t.Fatalf("after release: status %d", rec.Code)
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
