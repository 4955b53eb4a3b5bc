package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The status line counts the events the relays refused, summed over
// their metrics endpoints and reasons; a relay that does not answer
// shows as unknown, never as zero.
func TestStatusLineCountsTheRelaysRefusedEvents(t *testing.T) {
	exposition := `# HELP ckf_relay_refusals_total Worker events refused whole, by reason.
# TYPE ckf_relay_refusals_total counter
ckf_relay_refusals_total{dc="dc-a",reason="parent_block_not_found"} 37
ckf_relay_refusals_total{dc="dc-a",reason="worker_mismatch"} 2
# TYPE ckf_relay_events_total counter
ckf_relay_events_total{dc="dc-a"} 1000
`
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(exposition)) }))
	defer a.Close()
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ckf_relay_refusals_total{dc=\"dc-b\",reason=\"tracked_blocks\"} 1\n"))
	}))
	defer b.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	defer down.Close()
	ctx := context.Background()
	n, ok := relayRefusals(ctx, http.DefaultClient, []string{a.URL, b.URL})
	if !ok || n != 40 {
		t.Fatalf("refusals %d %v, want 40", n, ok)
	}
	st := &stats{start: time.Now(), refused: int64(n)}
	if line := st.line(10); !strings.HasSuffix(line, " | refused=40") {
		t.Fatalf("status line %q", line)
	}
	if _, ok := relayRefusals(ctx, http.DefaultClient, []string{a.URL, down.URL}); ok {
		t.Fatal("a relay that did not answer was counted as answering")
	}
	st.refused = -2
	if line := st.line(10); !strings.HasSuffix(line, " | refused=?") {
		t.Fatalf("status line with a relay down %q", line)
	}
	st.refused = -1
	if line := st.line(10); strings.Contains(line, "refused") {
		t.Fatalf("status line without --relay-metrics %q", line)
	}
	if _, err := parse([]string{"--relay-metrics", "ftp://x"}, func(string) string { return "" }, &strings.Builder{}); err == nil {
		t.Fatal("a non-http relay metrics URL was accepted")
	}
}
