package streams

import (
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier adapts NATS headers to OpenTelemetry propagation with the
// W3C names as they are written on the wire. NATS header names are case
// sensitive and are not canonicalised (unlike http.Header): another
// publisher's "traceparent" must be found, and ours must be written exactly
// as "traceparent"/"tracestate" so any other consumer finds them.
//
// Get matches a name case-insensitively (the exact lowercase key first, so
// the common case is one map lookup). Set stores the key in lower case and
// drops any differently cased copy, so a message never carries two
// contexts. Set needs a non-nil map (nats.NewMsg makes one); Get and Keys
// work on nil.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key, whatever the case of the stored name.
func (h HeaderCarrier) Get(key string) string {
	lk := strings.ToLower(key)
	if v := h[lk]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, lk) {
			return v[0]
		}
	}
	return ""
}

// Set replaces every casing of key with the lowercase key holding value.
func (h HeaderCarrier) Set(key, value string) {
	lk := strings.ToLower(key)
	for k := range h {
		if k != lk && strings.EqualFold(k, lk) {
			delete(h, k)
		}
	}
	h[lk] = []string{value}
}

// Keys lists the stored names as they are.
func (h HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}
