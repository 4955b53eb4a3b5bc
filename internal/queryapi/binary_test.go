package queryapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

func seqHashBody(hs ...uint64) []byte {
	var b []byte
	for _, h := range hs {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	return b
}

func post(h http.Handler, contentType string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/v1/match", bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// A binary body asks exactly what the JSON body with the same hashes asks,
// and gets the same answer bytes.
func TestBinaryBodyAsksLikeJSON(t *testing.T) {
	b := &recordingBackend{ready: true}
	reg := prometheus.NewRegistry()
	h := Handler(b, mustMetrics(t, reg), reg)
	hs := []uint64{1, 18446744073709551615, 9007199254740993}
	bin := post(h, api.ContentTypeSeqHashes+"; charset=binary", seqHashBody(hs...))
	binQ := b.last
	js, _ := json.Marshal(map[string][]uint64{"sequence_hashes": hs})
	jsn := post(h, "application/json", js)
	if bin.Code != 200 || jsn.Code != 200 || bin.Body.String() != jsn.Body.String() {
		t.Fatalf("binary %d %q, JSON %d %q", bin.Code, bin.Body, jsn.Code, jsn.Body)
	}
	want := api.Query{Seqs: []ckf.SequenceHash{1, 18446744073709551615, 9007199254740993}}
	if !reflect.DeepEqual(binQ, want) || !reflect.DeepEqual(b.last, want) {
		t.Fatalf("binary asked %+v, JSON %+v", binQ, b.last)
	}
}

// Bad binary bodies get the same clear errors as bad JSON ones: 400 with a
// reason, 413 past the limit, 503 without lanes, each counted.
func TestBinaryBodyErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	ready := &recordingBackend{ready: true}
	h := Handler(ready, mustMetrics(t, reg), reg, WithLimits(Limits{MaxBodyBytes: 64}))
	for name, tc := range map[string]struct {
		body []byte
		code int
	}{
		"empty":        {nil, http.StatusBadRequest},
		"ragged":       {[]byte{1, 2, 3}, http.StatusBadRequest},
		"over 64 B":    {seqHashBody(make([]uint64, 9)...), http.StatusRequestEntityTooLarge},
		"exactly 64 B": {seqHashBody(make([]uint64, 8)...), http.StatusOK},
	} {
		rec := post(h, api.ContentTypeSeqHashes, tc.body)
		if rec.Code != tc.code {
			t.Fatalf("%s: status %d, want %d (%s)", name, rec.Code, tc.code, rec.Body)
		}
		if tc.code != http.StatusOK {
			var eb api.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error == "" {
				t.Fatalf("%s: error body %q", name, rec.Body)
			}
		}
	}
	unready := Handler(&recordingBackend{}, mustMetrics(t, prometheus.NewRegistry()), nil)
	if rec := post(unready, api.ContentTypeSeqHashes, seqHashBody(1)); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("no lane: status %d", rec.Code)
	}
	for _, want := range []string{`ckf_api_requests_total{outcome="bad_request"} 2`, `ckf_api_requests_total{outcome="too_large"} 1`} {
		if out, ok := promtest.Has(reg, want); !ok {
			t.Fatalf("%s not counted:\n%s", want, out)
		}
	}
	big := make([]uint64, api.MaxBlocks+1)
	if _, err := api.DecodeSeqHashes(seqHashBody(big...)); err == nil {
		t.Fatal("more than MaxBlocks binary hashes accepted")
	}
}
