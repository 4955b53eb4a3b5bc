package lease

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A replicated stream refuses an expected last subject sequence with 10164,
// a single replica with 10071; both are a lost compare-and-set, nothing
// else is. The embedded test server has one replica, so 10164 is built.
func TestIsWrongLastSequence(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, true},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}, true},
		{fmt.Errorf("nats: %w", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}), true},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamNotFound}, false},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence + 1}, false},
		{errors.New("wrong last sequence"), false},
		{nil, false},
	} {
		if got := isWrongLastSequence(tc.err); got != tc.want {
			t.Errorf("isWrongLastSequence(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// Lease writes go where nats.go's KV writes go for the same JetStream
// context: behind a domain's or a custom API prefix, bare for the default.
func TestAPIPrefixMatchesTheKVWrites(t *testing.T) {
	for _, tc := range []struct {
		opts jetstream.JetStreamOptions
		want string
	}{
		{jetstream.JetStreamOptions{}, ""},
		{jetstream.JetStreamOptions{Domain: "dc-a"}, "$JS.dc-a.API."},
		{jetstream.JetStreamOptions{APIPrefix: "$JS.API"}, ""},
		{jetstream.JetStreamOptions{APIPrefix: "$JS.API."}, ""},
		{jetstream.JetStreamOptions{APIPrefix: "$JS.hub.API"}, "$JS.hub.API."},
		{jetstream.JetStreamOptions{APIPrefix: "tenant.API."}, "tenant.API."},
	} {
		if got := writePrefix(tc.opts); got != tc.want {
			t.Errorf("writePrefix(%+v) = %q, want %q", tc.opts, got, tc.want)
		}
	}
}

func TestParseTTL(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"2s": 2 * time.Second, "1m30s": 90 * time.Second, "5": 5 * time.Second, "0": 0,
		"never": 0, "": 0, "junk": 0, "-1": 0,
	} {
		if got := parseTTL(v); got != want {
			t.Errorf("parseTTL(%q) = %s, want %s", v, got, want)
		}
	}
}

func TestServerTTLRoundsUpToWholeSeconds(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		time.Nanosecond:                       time.Second,
		time.Second - time.Nanosecond:         time.Second,
		time.Second:                           time.Second,
		time.Second + time.Nanosecond:         2 * time.Second,
		10 * time.Second:                      10 * time.Second,
		10*time.Second + 999*time.Millisecond: 11 * time.Second,
	} {
		if got := serverTTL(ttl); got != want {
			t.Errorf("serverTTL(%s) = %s, want %s", ttl, got, want)
		}
	}
}
