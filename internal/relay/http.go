package relay

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/pkg/promx"
)

// Handler serves /healthz, /readyz (200 while publishing), /v1/status and
// /metrics.
func (r *Relay) Handler(reg prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpserve.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := r.Status()
		code := http.StatusOK
		if st.State != StateActive {
			code = http.StatusServiceUnavailable
		}
		httpserve.WriteJSON(w, code, map[string]string{"status": string(st.State)})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		httpserve.WriteJSON(w, http.StatusOK, r.Status())
	})
	if reg != nil {
		mux.Handle("GET /metrics", promx.Handler(reg))
	}
	return mux
}
