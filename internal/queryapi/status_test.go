package queryapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/api"

	"github.com/prometheus/client_golang/prometheus"
)

// laneTable answers with a fixed lane table (HTTP-layer stand-in).
type laneTable struct {
	recordingBackend
	lanes []api.LaneStatus
}

func (b *laneTable) Lanes() []api.LaneStatus { return b.lanes }

func TestStatusPageRendersLanesLatencyAndTheMatchForm(t *testing.T) {
	b := &laneTable{recordingBackend: recordingBackend{ready: true}, lanes: []api.LaneStatus{
		{Lane: 0, DC: "dc-a", State: "active", Epoch: 3, InstalledSequence: 1234, StreamLag: 7},
		{Lane: 1, DC: "dc-b", State: "backoff", Epoch: 1, InstalledSequence: 9, LastFault: `decode <script>alert(1)</script>`},
	}}
	reg := prometheus.NewRegistry()
	m := mustMetrics(t, reg)
	h := Handler(b, m, reg, WithStatusInfo(StatusInfo{Domain: "prod", Version: "v1.2.3"}))
	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/match", strings.NewReader(`{"local_hashes":[1]}`)))
		if rec.Code != http.StatusOK {
			t.Fatal(rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	page := rec.Body.String()
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("%d %s", rec.Code, rec.Header())
	}
	for _, want := range []string{
		"domain <b>prod</b>", "1 of 2 lanes ready", "version v1.2.3",
		`<tr data-dc="dc-a">`, `<td class="num">1234</td><td class="num">7</td>`,
		`<span class="state state-backoff">backoff</span>`,
		"decode &lt;script&gt;alert(1)&lt;/script&gt;", // a fault string from the bus is escaped
		`<td class="num">3</td>`,                       // three matches timed
		`fetch("/v1/match"`, `<form id="match">`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "<script>alert") {
		t.Fatal("unescaped fault string")
	}
	// Only / itself is the page.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nothing", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("/nothing: %d", rec.Code)
	}
}

func TestStatusPageWithoutLanesOrQueries(t *testing.T) {
	b := &laneTable{}
	reg := prometheus.NewRegistry()
	h := Handler(b, mustMetrics(t, reg), reg, WithStatusInfo(StatusInfo{Domain: "d"}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if !strings.Contains(rec.Body.String(), "no lane yet") || !strings.Contains(rec.Body.String(), "<td class=\"num\">–</td>") {
		t.Fatal(rec.Body.String())
	}
	if d := (LatencyStats{}); mustMetrics(t, nil).MatchLatency() != d {
		t.Fatal("latency of no match")
	}
}
