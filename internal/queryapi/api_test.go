package queryapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/api"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// recordingBackend records the query and answers with a fixed table of
// depths; it stands in for the indexer only at the HTTP layer.
type recordingBackend struct {
	last  api.Query
	ready bool
}

func (b *recordingBackend) Match(q api.Query) (api.MatchResponse, error) {
	b.last = q
	if !b.ready {
		return api.MatchResponse{}, api.ErrUnavailable
	}
	r := api.MatchResponse{ReadyLanes: 0b101, Blocks: q.Blocks(), Lanes: []api.LaneDepth{{Lane: 0, DC: "a", Depth: 1}, {Lane: 2, DC: "b", Depth: uint32(q.Blocks())}}}
	r.SetBest()
	return r, nil
}
func (b *recordingBackend) Lanes() []api.LaneStatus {
	return []api.LaneStatus{{Lane: 0, DC: "a", State: "active"}}
}
func (b *recordingBackend) Ready() bool { return b.ready }

func mustMetrics(t *testing.T, reg prometheus.Registerer) *Metrics {
	t.Helper()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func serve(t *testing.T, b Backend, method, path, body string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := Handler(b, mustMetrics(t, reg), reg)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	var out map[string]any
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: %v", rec.Body, err)
		}
	}
	return rec, out
}

func TestMatchDecodesU64WithoutFloatLoss(t *testing.T) {
	b := &recordingBackend{ready: true}
	rec, out := serve(t, b, "POST", "/v1/match", `{"sequence_hashes":[18446744073709551615, 9007199254740993]}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if b.last.Seqs[0] != ckf.SequenceHash(18446744073709551615) || b.last.Seqs[1] != 9007199254740993 {
		t.Fatalf("decoded %v", b.last.Seqs)
	}
	best := out["best"].(map[string]any)
	if best["dc"] != "b" || best["depth"].(float64) != 2 || out["blocks"].(float64) != 2 {
		t.Fatalf("response %v", out)
	}
}

func TestMatchTokensAreHashedLikeTheSpec(t *testing.T) {
	b := &recordingBackend{ready: true}
	rec, _ := serve(t, b, "POST", "/v1/match", `{"tokens":[0,1,2,3,4,5,6,7,8,9,10,11,12],"block_size":4}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	want := []ckf.LocalBlockHash{0x7EE2CBEDC694AB46, 0xA8416CFD935BDB13, 0x0F1AA342314B9384}
	if len(b.last.Locals) != 3 {
		t.Fatalf("locals %v", b.last.Locals)
	}
	for i := range want {
		if b.last.Locals[i] != want[i] {
			t.Fatalf("local %d = %#x", i, b.last.Locals[i])
		}
	}
}

func TestBadMatchRequestsNameTheField(t *testing.T) {
	b := &recordingBackend{ready: true}
	for _, c := range []struct{ body, field string }{
		{`{"local_hashes":[-1]}`, "local_hashes"},
		{`{"local_hashes":[1.5]}`, "local_hashes"},
		{`{"local_hashes":[18446744073709551616]}`, "local_hashes"},
		{`{"tokens":[1,2]}`, "block_size"},
		{`{"tokens":[1,2],"block_size":0}`, "block_size"},
		{`{"local_hashes":[1],"block_size":4}`, "block_size"},
		{`{"local_hashes":[1],"sequence_hashes":[2]}`, "tokens|local_hashes|sequence_hashes"},
		{`{}`, "tokens|local_hashes|sequence_hashes"},
		{`{"tokens":[4294967296],"block_size":1}`, "tokens"},
		{`{"bogus":1}`, "bogus"},
		{`{"local_hashes":[1],"lora_name":"a"}`, "lora_name"},
		{`{"sequence_hashes":[1],"cache_namespace":"n"}`, "cache_namespace"},
		{`{"local_hashes":[1],"eagle":true}`, "eagle"},
		{`{"tokens":[1],"block_size":1,"eagle":"yes"}`, "eagle"},
		{`not json`, ""},
		{``, ""},
		{`{"local_hashes":[1]} {}`, ""},
	} {
		rec, out := serve(t, b, "POST", "/v1/match", c.body)
		if rec.Code != http.StatusBadRequest {
			t.Fatalf("%q: status %d", c.body, rec.Code)
		}
		if out["error"] == "" || (c.field != "" && out["field"] != c.field) {
			t.Fatalf("%q: %v", c.body, out)
		}
	}
	if rec, _ := serve(t, b, "GET", "/v1/match", ""); rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/match: %d", rec.Code)
	}
}

func TestUnavailableAndReadiness(t *testing.T) {
	b := &recordingBackend{}
	if rec, _ := serve(t, b, "POST", "/v1/match", `{"local_hashes":[1]}`); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("match: %d", rec.Code)
	}
	if rec, _ := serve(t, b, "GET", "/readyz", ""); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("readyz: %d", rec.Code)
	}
	b.ready = true
	if rec, _ := serve(t, b, "GET", "/readyz", ""); rec.Code != 200 {
		t.Fatalf("readyz: %d", rec.Code)
	}
	rec, out := serve(t, b, "GET", "/v1/lanes", "")
	if rec.Code != 200 || len(out["lanes"].([]any)) != 1 {
		t.Fatalf("lanes: %d %v", rec.Code, out)
	}
}

func TestTokensWithSaltsAndEagleWindows(t *testing.T) {
	b := &recordingBackend{ready: true}
	rec, _ := serve(t, b, "POST", "/v1/match", `{"tokens":[0,1,2,3],"block_size":4,"lora_name":"adapter-a"}`)
	if rec.Code != 200 || len(b.last.Locals) != 1 || b.last.Locals[0] != 0x5C7F6547F18918BF {
		t.Fatalf("lora: %d %#x", rec.Code, b.last.Locals)
	}
	rec, _ = serve(t, b, "POST", "/v1/match", `{"tokens":[0,1,2,3,4,5],"block_size":2,"eagle":true}`)
	want := ckf.LocalBlockHashesWith(nil, []uint32{0, 1, 2, 3, 4, 5}, 2, ckf.BlockOptions{Eagle: true})
	if rec.Code != 200 || len(b.last.Locals) != 2 || b.last.Locals[0] != want[0] || b.last.Locals[1] != want[1] {
		t.Fatalf("eagle: %d %#x", rec.Code, b.last.Locals)
	}
	rec, _ = serve(t, b, "POST", "/v1/match", `{"tokens":[0,1,2,3],"block_size":4,"lora_name":"","cache_namespace":""}`)
	if rec.Code != 200 || b.last.Locals[0] != 0x7EE2CBEDC694AB46 {
		t.Fatalf("empty salts: %d %#x", rec.Code, b.last.Locals)
	}
}
