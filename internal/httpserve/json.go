package httpserve

import (
	"encoding/json"
	"net/http"
)

// WriteJSON answers with status and v encoded as JSON. An encoding error
// after the header is sent cannot change the answer, so it is dropped.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
