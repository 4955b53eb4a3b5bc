package wanproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/httpserve"
)

// Status is what GET /v1/link answers.
type Status struct {
	Name   string  `json:"name"`
	Routes []Route `json:"routes"`
	Toxics Toxics  `json:"toxics"`
	Stats  Stats   `json:"stats"`
}

// LatencyRequest is the body of POST /v1/latency.
type LatencyRequest struct {
	Direction string `json:"direction"` // up, down or both (default)
	Latency
}

// BandwidthRequest is the body of POST /v1/bandwidth.
type BandwidthRequest struct {
	Direction      string `json:"direction"`
	BytesPerSecond int64  `json:"bytes_per_second"`
}

// StallRequest is the body of POST /v1/stall (it may be empty).
type StallRequest struct {
	Timeout Duration `json:"timeout"`
}

// maxBody bounds a control request's body.
const maxBody = 4 << 10

// NewHandler serves the control API of l:
//
//	GET  /healthz        200 while the link is open
//	GET  /v1/link        Status
//	POST /v1/latency     {"direction":"both","delay":"75ms","jitter":"10ms"}
//	POST /v1/bandwidth   {"direction":"both","bytes_per_second":1250000}
//	POST /v1/reset       close every connection with an RST
//	POST /v1/stall       {"timeout":"0s"}: stop forwarding, close nothing
//	POST /v1/cut         close every connection, refuse new ones
//	POST /v1/heal        end a cut and a stall
//	POST /v1/clear       lift every toxic
//
// Every POST answers the Status after the change; a bad body is a 400
// with {"error": …}.
func NewHandler(l *Link) http.Handler {
	mux := http.NewServeMux()
	status := func(w http.ResponseWriter) {
		httpserve.WriteJSON(w, http.StatusOK, Status{Name: l.Name(), Routes: l.Routes(), Toxics: l.Toxics(), Stats: l.Stats()})
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		l.mu.Lock()
		closed := l.closed
		l.mu.Unlock()
		if closed {
			http.Error(w, "closed", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /v1/link", func(w http.ResponseWriter, _ *http.Request) { status(w) })
	post := func(path string, apply func(r *http.Request) error) {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
			if err := apply(r); err != nil {
				code := http.StatusBadRequest
				if errors.Is(err, ErrClosed) {
					code = http.StatusServiceUnavailable
				}
				httpserve.WriteJSON(w, code, map[string]string{"error": err.Error()})
				return
			}
			status(w)
		})
	}
	post("/v1/latency", func(r *http.Request) error {
		var req LatencyRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		dirs, err := ParseDirections(req.Direction)
		if err != nil {
			return err
		}
		return l.SetLatency(req.Latency, dirs...)
	})
	post("/v1/bandwidth", func(r *http.Request) error {
		var req BandwidthRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		dirs, err := ParseDirections(req.Direction)
		if err != nil {
			return err
		}
		return l.SetBandwidth(req.BytesPerSecond, dirs...)
	})
	post("/v1/reset", func(*http.Request) error { l.Reset(); return nil })
	post("/v1/stall", func(r *http.Request) error {
		var req StallRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		return l.Stall(time.Duration(req.Timeout))
	})
	post("/v1/cut", func(*http.Request) error { l.Cut(); return nil })
	post("/v1/heal", func(*http.Request) error { l.Heal(); return nil })
	post("/v1/clear", func(*http.Request) error { l.Clear(); return nil })
	return mux
}

// decode reads a JSON body into v; an empty body leaves v as it is.
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%w body: %w", ErrInvalid, err)
	}
	if len(b) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w body: %w", ErrInvalid, err)
	}
	return nil
}
