package bridge

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/httpserve"
	"github.com/ckfrelay/ckfrelay/pkg/promx"
)

// Handler serves /healthz, /readyz (200 once every engine is connected),
// /v1/status and /metrics.
func (b *Bridge) Handler(reg prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpserve.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := b.Status()
		connected := 0
		for _, e := range st.Engines {
			if e.Connected {
				connected++
			}
		}
		code := http.StatusOK
		if !st.Running || connected < len(st.Engines) {
			code = http.StatusServiceUnavailable
		}
		httpserve.WriteJSON(w, code, map[string]int{"engines": len(st.Engines), "connected": connected})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		httpserve.WriteJSON(w, http.StatusOK, b.Status())
	})
	if reg != nil {
		mux.Handle("GET /metrics", promx.Handler(reg))
	}
	return mux
}
