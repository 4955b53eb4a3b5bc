package queryapi

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// burstBody is the body of the 4 MiB query burst: exactly n bytes of
// {"block_size":64,"tokens":[1,1,...]} (tokensFirst puts block_size last).
func burstBody(n int, tokensFirst bool) []byte {
	head, tail := `{"block_size":64,"tokens":[`, `]}`
	if tokensFirst {
		head, tail = `{"tokens":[`, `],"block_size":64}`
	}
	var b bytes.Buffer
	b.WriteString(head)
	for b.Len()+len(tail)+2 <= n {
		if b.Bytes()[b.Len()-1] != '[' {
			b.WriteByte(',')
		}
		b.WriteByte('1')
	}
	for b.Len()+len(tail) < n {
		b.WriteByte(' ')
	}
	b.WriteString(tail)
	return b.Bytes()
}

// allocatedPerRun is the bytes the heap handed out per call of f, over
// runs calls (no warm-up: the one-time allocations are small next to the
// bodies measured, and each 4 MiB decode is slow under -race).
func allocatedPerRun(runs int, f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// TestA4MiBTokenBodyCostsAboutItsOwnSize: a match request of the largest
// body, 2M tokens, allocates about the body once (its read buffer) plus its
// hashes, not the many times the body a materialised token array cost
// (a []uint64 and a []uint32 of the tokens grown by append: ~12× the body).
func TestA4MiBTokenBodyCostsAboutItsOwnSize(t *testing.T) {
	b := &recordingBackend{ready: true}
	reg := prometheus.NewRegistry()
	h := Handler(b, mustMetrics(t, reg), reg)
	for _, tokensFirst := range []bool{false, true} {
		body := burstBody(api.MaxRequestBytes, tokensFirst)
		if len(body) != api.MaxRequestBytes {
			t.Fatalf("body of %d bytes", len(body))
		}
		blocks := (len(body) - 40) / 2 / 64
		var code, got int
		per := allocatedPerRun(1, func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/match", bytes.NewReader(body)))
			code, got = rec.Code, b.last.Blocks()
		})
		if code != http.StatusOK || got < blocks {
			t.Fatalf("tokensFirst=%v: status %d, %d blocks (want ≥ %d)", tokensFirst, code, got, blocks)
		}
		// The read buffer (1×), the hashes (8 bytes per 64 tokens, 1/16×),
		// the hasher's window and the request's small change.
		if limit := uint64(len(body)) * 3 / 2; per > limit {
			t.Fatalf("tokensFirst=%v: %d bytes allocated per request, want at most %d (1.5× the body)", tokensFirst, per, limit)
		}
		t.Logf("tokensFirst=%v: %.2f× the body allocated per request", tokensFirst, float64(per)/float64(len(body)))

		// The NATS endpoint decodes a body it already holds: only the hashes.
		per = allocatedPerRun(1, func() {
			if _, status, err := Match(context.Background(), b, mustMetrics(t, nil), "application/json", body); status != http.StatusOK {
				t.Fatalf("NATS match: %d %v", status, err)
			}
		})
		if limit := uint64(len(body)) / 4; per > limit {
			t.Fatalf("tokensFirst=%v: decoding a held body allocated %d bytes, want at most %d", tokensFirst, per, limit)
		}
	}
}

// TestTheBodyPoolNeverKeepsALargeBuffer: a buffer above PooledBodyBytes is
// never put back, so a burst of large bodies leaves nothing pinned.
func TestTheBodyPoolNeverKeepsALargeBuffer(t *testing.T) {
	var p bodyPool
	p.p.New = func() any { b := make([]byte, 0, 16); return &b }
	for range 50 {
		big := make([]byte, 0, PooledBodyBytes+1)
		if p.put(&big) {
			t.Fatal("a buffer above PooledBodyBytes was kept")
		}
		if got := p.get(); cap(*got) > PooledBodyBytes {
			t.Fatalf("the pool handed out a buffer of %d bytes", cap(*got))
		}
	}
	small := make([]byte, 10, PooledBodyBytes)
	if !p.put(&small) {
		t.Fatal("a buffer of PooledBodyBytes was not kept")
	}
	// After a large request the pool still only holds small buffers.
	b := &recordingBackend{ready: true}
	h := Handler(b, mustMetrics(t, nil), nil)
	body := burstBody(1<<20, false)
	req := httptest.NewRequest("POST", "/v1/match", bytes.NewReader(body))
	req.ContentLength = -1 // grown from a pooled buffer while read
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	for range 20 {
		if got := bodies.get(); cap(*got) > PooledBodyBytes {
			t.Fatalf("after a 1 MiB body the pool handed out a buffer of %d bytes", cap(*got))
		}
	}
}

// TestLargeBodiesShareABudgetSmallOnesDoNot: with room for one large body,
// a second (declared or chunked) waits LargeBodyWait and is answered 429
// with Retry-After, while a small query is answered at once; once the
// first is done a large body is admitted again.
func TestLargeBodiesShareABudgetSmallOnesDoNot(t *testing.T) {
	b := &blockingBackend{recordingBackend: recordingBackend{ready: true}, entered: make(chan struct{}), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	body := burstBody(256<<10, false)
	h := Handler(b, mustMetrics(t, reg), reg, WithLimits(Limits{MaxBodyBytes: int64(len(body)), MaxLargeBodyBytes: int64(len(body)), LargeBodyWait: 20 * time.Millisecond}))
	var wg sync.WaitGroup
	wg.Add(1)
	first := httptest.NewRecorder()
	go func() {
		defer wg.Done()
		h.ServeHTTP(first, httptest.NewRequest("POST", "/v1/match", bytes.NewReader(body)))
	}()
	<-b.entered // the first holds the whole budget until released
	for _, chunked := range []bool{false, true} {
		req := httptest.NewRequest("POST", "/v1/match", bytes.NewReader(body))
		if chunked {
			req.ContentLength = -1
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("chunked=%v: second large body: status %d Retry-After %q, want 429", chunked, rec.Code, rec.Header().Get("Retry-After"))
		}
	}
	small := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/match", strings.NewReader(`{"sequence_hashes":[1,2,3]}`)))
		small <- rec.Code
	}()
	<-b.entered // the small query reached the backend with the budget full
	b.release <- struct{}{}
	b.release <- struct{}{}
	if code := <-small; code != http.StatusOK {
		t.Fatalf("small query: status %d", code)
	}
	wg.Wait()
	if first.Code != http.StatusOK {
		t.Fatalf("first large body: status %d", first.Code)
	}
	go func() { <-b.entered; b.release <- struct{}{} }()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/match", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("large body after the first: status %d", rec.Code)
	}
	if out, ok := promtest.Has(reg, `ckf_api_requests_total{endpoint="match",outcome="overloaded"} 2`); !ok {
		t.Fatalf("refusals not counted as overloaded:\n%s", out)
	}
}
