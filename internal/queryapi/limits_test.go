package queryapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/api"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

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

func (b *blockingBackend) Match(q api.Query) (api.MatchResponse, error) {
	b.entered <- struct{}{}
	<-b.release
	return api.MatchResponse{Blocks: q.Blocks()}, nil
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

// tokensJSON is a JSON array of n distinct-ish token ids.
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
