package queryapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// A body whose Content-Type the API does not take gets 415 with a reason
// naming the accepted types, over HTTP and through Match (the NATS
// endpoint), and is counted; JSON with a utf-8 charset, no type, curl's
// default form type and the binary type are read.
func TestMatchContentTypes(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := &recordingBackend{ready: true}
	m := mustMetrics(t, reg)
	h := Handler(b, m, reg)
	jsonBody := []byte(`{"local_hashes":[1,2]}`)
	for _, tc := range []struct {
		contentType string
		body        []byte
		code        int
	}{
		{"", jsonBody, http.StatusOK},
		{"application/json", jsonBody, http.StatusOK},
		{"Application/JSON; charset=UTF-8", jsonBody, http.StatusOK},
		{`application/json; charset="utf-8"`, jsonBody, http.StatusOK},
		{"application/x-www-form-urlencoded", jsonBody, http.StatusOK},
		{api.ContentTypeSeqHashes, seqHashBody(1, 2), http.StatusOK},
		{"text/plain", jsonBody, http.StatusUnsupportedMediaType},
		{"application/xml", []byte(`<q/>`), http.StatusUnsupportedMediaType},
		{"application/json; charset=iso-8859-1", jsonBody, http.StatusUnsupportedMediaType},
		{"multipart/form-data; boundary=x", jsonBody, http.StatusUnsupportedMediaType},
	} {
		rec := post(h, tc.contentType, tc.body)
		if rec.Code != tc.code {
			t.Fatalf("HTTP %q: status %d, want %d (%s)", tc.contentType, rec.Code, tc.code, rec.Body)
		}
		_, status, err := Match(context.Background(), b, m, tc.contentType, tc.body)
		if tc.code == http.StatusOK {
			if err != nil {
				t.Fatalf("Match %q: %v", tc.contentType, err)
			}
			continue
		}
		if status != tc.code || err == nil {
			t.Fatalf("Match %q: status %d, %v; want %d", tc.contentType, status, err, tc.code)
		}
		var eb api.ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || !strings.Contains(eb.Error, "application/json") && !strings.Contains(eb.Error, "utf-8") {
			t.Fatalf("HTTP %q: error body %q does not say what is accepted", tc.contentType, rec.Body)
		}
	}
	if out, ok := promtest.Has(reg, `ckf_api_requests_total{endpoint="match",outcome="unsupported_media_type"} 8`); !ok {
		t.Fatalf("415s not counted:\n%s", out)
	}
}

// A binary body of MaxBlocks+1 hashes is over the size limit the contract
// gives it (8 × 65,536 bytes): 413 over HTTP and through Match, as a JSON
// body over MaxRequestBytes is; MaxBlocks hashes are answered.
func TestBinaryBodyOverMaxBlocksIs413(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := &recordingBackend{ready: true}
	m := mustMetrics(t, reg)
	h := Handler(b, m, reg)
	over := seqHashBody(make([]uint64, api.MaxBlocks+1)...)
	if rec := post(h, api.ContentTypeSeqHashes, over); rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("HTTP: %d hashes got %d (%s), want 413", api.MaxBlocks+1, rec.Code, rec.Body)
	}
	if _, status, err := Match(context.Background(), b, m, api.ContentTypeSeqHashes, over); status != http.StatusRequestEntityTooLarge || err == nil {
		t.Fatalf("Match: %d hashes got %d, %v; want 413", api.MaxBlocks+1, status, err)
	}
	// Without Content-Length the capped reader finds the excess.
	req := httptest.NewRequest("POST", "/v1/match", bytes.NewReader(over))
	req.ContentLength = -1
	req.Header.Set("Content-Type", api.ContentTypeSeqHashes)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("HTTP chunked: %d hashes got %d (%s), want 413", api.MaxBlocks+1, rec.Code, rec.Body)
	}
	full := seqHashBody(make([]uint64, api.MaxBlocks)...)
	if rec := post(h, api.ContentTypeSeqHashes, full); rec.Code != http.StatusOK {
		t.Fatalf("HTTP: %d hashes got %d (%s), want 200", api.MaxBlocks, rec.Code, rec.Body)
	}
	if out, ok := promtest.Has(reg, `ckf_api_requests_total{endpoint="match",outcome="too_large"} 3`); !ok {
		t.Fatalf("413s not counted:\n%s", out)
	}
}

// Any Content-Type header is classified without panicking, and only the
// accepted media types (case-insensitive, parameters after ';') are
// accepted, each as its own kind.
func FuzzClassifyBody(f *testing.F) {
	for _, s := range []string{"", "application/json", "Application/JSON; charset=UTF-8", `application/json; charset="latin1"`,
		api.ContentTypeSeqHashes + "; x=y", "text/plain", "application/xml", ";;;", "application/json;charset", "\x00\xff", "application/x-ckf-\u017feqhashes"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, contentType string) {
		kind, err := classifyBody(contentType)
		if err != nil {
			return
		}
		mt, _, _ := strings.Cut(contentType, ";")
		mt = strings.Map(func(r rune) rune {
			if 'A' <= r && r <= 'Z' {
				return r + 'a' - 'A'
			}
			return r
		}, strings.TrimSpace(mt))
		switch {
		case kind == bodySeqHashes && mt == api.ContentTypeSeqHashes:
		case kind == bodyJSON && (mt == "" || mt == "application/json" || mt == "application/x-www-form-urlencoded"):
		default:
			t.Fatalf("%q accepted as kind %d", contentType, kind)
		}
	})
}
