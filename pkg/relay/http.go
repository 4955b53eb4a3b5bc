package relay

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/promx"
)

// Handler serves /healthz, /readyz (200 while publishing), /v1/status and
// /metrics.
func (r *Relay) Handler(reg prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := r.Status()
		code := http.StatusOK
		if st.State != StateActive {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]string{"status": string(st.State)})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, r.Status())
	})
	if reg != nil {
		mux.Handle("GET /metrics", promx.Handler(reg))
	}
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
