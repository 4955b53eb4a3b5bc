package indexer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/lease"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// The NATS endpoint gives the same answer as HTTP, status for status and
// body for body, and only while the service runs.
func TestMicroEndpointAnswersLikeHTTP(t *testing.T) {
	srv := testenv.StartServer(t)
	nc := srv.Connect(t)
	s, err := New(nc, srv.JetStream(t), follow.Config{Domain: "test", Logger: zerolog.Nop(),
		Streams: streams.Options{Memory: true}, LeaseOptions: []lease.Option{lease.WithMemoryStorage()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Request(MatchSubject("test"), []byte(`{}`), 200*time.Millisecond); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("request before Run = %v, want no responders", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	web := httptest.NewServer(queryapi.Handler(s, s.APIMetrics(), s.Metrics()))
	t.Cleanup(web.Close)
	cases := []struct {
		name, path, subject string
		body                []byte
		status              int
	}{
		{"match without lanes", "/v1/match", MatchSubject("test"), []byte(`{"local_hashes":[1,2]}`), http.StatusServiceUnavailable},
		{"bad match", "/v1/match", MatchSubject("test"), []byte(`{"tokens":[1,2]}`), http.StatusBadRequest},
		{"route without lanes", "/v1/route", RouteSubject("test"), []byte(`{"local_hashes":[1,2]}`), http.StatusServiceUnavailable},
		{"bad route", "/v1/route", RouteSubject("test"), []byte(`{"local_hashes":[1],"policy":"nope"}`), http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hresp, err := http.Post(web.URL+tc.path, "application/json", bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			hbody, _ := io.ReadAll(hresp.Body)
			hresp.Body.Close()
			if hresp.StatusCode != tc.status {
				t.Fatalf("HTTP status %d, want %d: %s", hresp.StatusCode, tc.status, hbody)
			}
			var msg *nats.Msg
			testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
				msg, err = nc.Request(tc.subject, tc.body, 5*time.Second)
				return err // no responders until Run has started the endpoint
			})
			if code := msg.Header.Get(micro.ErrorCodeHeader); code != strconv.Itoa(tc.status) {
				t.Fatalf("%s = %q, want %d (%s)", micro.ErrorCodeHeader, code, tc.status, msg.Data)
			}
			if !bytes.Equal(bytes.TrimSpace(hbody), bytes.TrimSpace(msg.Data)) {
				t.Fatalf("NATS answer differs from HTTP:\nhttp: %s\nnats: %s", hbody, msg.Data)
			}
		})
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := nc.Request(MatchSubject("test"), []byte(`{}`), 200*time.Millisecond); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("request after Run = %v, want no responders", err)
	}
}
